"""Interpreter options of a ``python ...`` entrypoint that the launcher honours in its own process.

The launcher runs ``python [flags] -m mod ...`` and ``python [flags] script ...`` in its
own interpreter (the plugins are installed there). :func:`in_process_form` says whether
every flag can be honoured that way; :func:`apply_flags` honours them. Anything else
runs as a child process, where the real interpreter honours it. Standard library only.
"""

from __future__ import annotations

import sys

# Interpreter options honoured in this process: -u, -B, -W arg, and these -X options.
_X_HONOURED = ("faulthandler", "tracemalloc")


def in_process_form(argv: list[str]):
    """``(flags, module, script, args)`` when *argv* can run in this interpreter, else None.

    *flags* is a list of ``(letter, value)`` for ``-u``, ``-B``, ``-W arg`` and the ``-X``
    options of :data:`_X_HONOURED`; any other option (``-O``, ``-E``, ``-c`` ...) makes the
    entrypoint a child process, where the real interpreter honours it.
    """
    flags: list = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            return flags, None, arg, argv[i + 1 :]
        if arg == "-" or arg.startswith("--"):
            return None
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter in "uB":
                flags.append((letter, None))
                j += 1
                continue
            if letter not in "WXm":
                return None
            value = arg[j + 1 :]
            if not value:
                i += 1
                if i >= len(argv):
                    return None
                value = argv[i]
            if letter == "m":
                return flags, value, None, argv[i + 1 :]
            if letter == "X" and not _x_honoured(value):
                return None
            flags.append((letter, value))
            break
        i += 1
    return None


def _x_honoured(value: str) -> bool:
    name, eq, arg = value.partition("=")
    if name not in _X_HONOURED:
        return False
    if name == "tracemalloc" and eq:
        return arg.isdigit() and 1 <= int(arg) <= 65535
    return not eq


def apply_flags(flags: list) -> None:
    """Honour the entrypoint's interpreter options in this process."""
    for letter, value in flags:
        if letter == "u":
            _unbuffered()
        elif letter == "B":
            sys.dont_write_bytecode = True
        elif letter == "W":
            import warnings

            sys.warnoptions.append(value)  # multiprocessing passes them on to its children
            warnings._processoptions([value])  # type: ignore[attr-defined]  # what the interpreter does with -W
        elif letter == "X":
            name, _, arg = value.partition("=")
            sys._xoptions[name] = arg or True
            if name == "faulthandler":
                import faulthandler

                faulthandler.enable()
            elif name == "tracemalloc":
                import tracemalloc

                tracemalloc.start(int(arg) if arg else 1)


def _unbuffered() -> None:
    """``-u``: stdout and stderr written straight through to their file descriptors."""
    import io

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        stream.flush()
        raw = open(fd, "wb", buffering=0, closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw, encoding=stream.encoding, errors=stream.errors, write_through=True))
