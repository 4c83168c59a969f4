"""The static web catalogue of a registry (SPEC §19): ``forge catalog build`` and ``serve``.

:mod:`.collect` reads and verifies what a registry serves into one document (the content of
``catalog.json``), :mod:`.pages` renders that document as HTML, :mod:`.escape` is the one
place registry text is made safe for HTML, :mod:`.output` writes the folder atomically and
:mod:`.serve` previews it on 127.0.0.1. :mod:`.yanks` is everything the catalogue shows of a
yank.

Laptop side.
"""
