"""The ``forge`` command line: click commands that parse arguments, call one function, print."""
