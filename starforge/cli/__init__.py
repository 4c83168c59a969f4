"""The ``forge`` command line: click commands that parse arguments, call one function, print."""


def run() -> None:
    """The ``forge`` command: :func:`starforge.cli.main.main`, where a Ctrl-C while the
    command line is still being imported ends as one after it does (exit 130, no traceback)."""
    import sys

    try:
        from .main import main
    except KeyboardInterrupt:
        sys.stderr.write("\nerror: aborted\n")
        sys.exit(130)
    main()
