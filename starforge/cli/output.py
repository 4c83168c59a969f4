"""How ``forge`` talks to the user: verbosity (``-q``/``-v``) and colour.

Colour is used only when the stream is a terminal and ``NO_COLOR`` is unset (or empty),
as https://no-color.org asks; piped output is coloured only with ``FORCE_COLOR`` set to
anything but ``0`` or empty (https://force-color.org; ``NO_COLOR`` wins over it). ``-q`` and ``-v`` travel in
``FORGE_VERBOSITY`` (``-1``, ``0``, ``1``) so library code can honour them without the CLI.

Laptop side; imported by ``forge --help``, so it stays small (click only).
"""

from __future__ import annotations

import os
import sys

import click


def verbosity() -> int:
    """-1 with ``-q``, 1 with ``-v``, else 0."""
    try:
        return int(os.environ.get("FORGE_VERBOSITY", "0"))
    except ValueError:
        return 0


def colour_forced() -> bool:
    """``FORCE_COLOR`` set (not empty, not ``0``) and ``NO_COLOR`` not: colour even when piped
    (a CI log that renders ANSI, ``less -R``)."""
    return os.environ.get("FORCE_COLOR", "") not in ("", "0") and not os.environ.get("NO_COLOR")


def colour_on(stream=None) -> bool:
    """Whether to colour what goes to *stream* (default stderr)."""
    if os.environ.get("NO_COLOR"):
        return False
    if colour_forced():
        return True
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def paint(text: str, stream=None, **style) -> str:
    """*text* with click's ANSI *style* (fg=, bold=) when :func:`colour_on` for *stream*."""
    return click.style(text, **style) if colour_on(stream) else text


def error_lines(message: str, hint: str | None) -> list:
    """The ``error:`` line and the ``hint:`` line, coloured on a terminal.

    Credentials in a URL never reach the terminal: userinfo is masked in both lines; nor
    does a control or bidirectional character of a registry's or a plugin's text (spelled out).
    """
    from ..terminal_text import shown
    from ..urls import mask_url

    err = sys.stderr
    lines = [paint("error:", err, fg="red", bold=True) + " " + shown(mask_url(message), keep="\n\t")]
    if hint:
        lines.append(paint("hint:", err, fg="yellow") + " " + shown(mask_url(hint), keep="\n\t"))
    return lines


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 plugin``, ``2 plugins``: a count and its noun, agreeing."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def note(text: str) -> None:
    """An informational line on stderr (counts, empty listings); silenced by ``-q``."""
    if verbosity() >= 0:
        click.echo(text, err=True)


def detail(text: str) -> None:
    """A line only ``-v`` shows (stderr)."""
    if verbosity() > 0:
        click.echo(paint(text, sys.stderr, dim=True), err=True)


PLUGIN_PREFIX = "plugin  : "  # the launcher's plugin lines (SPEC §9)


class JobOutput:
    """Writes a job's streamed output to stdout, colouring the launcher's plugin lines and
    ``error:`` lines on a terminal. Chunks may split lines; colour needs whole lines, so
    a partial line is held back until its end arrives (or :meth:`flush`)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.colour = colour_on(self.stream)
        self.partial = ""

    def write(self, text: str) -> None:
        if not self.colour:
            self.stream.write(text)
            self.stream.flush()
            return
        text = self.partial + text
        lines = text.split("\n")
        self.partial = lines.pop()
        if lines:
            self.stream.write("".join(self._paint(line) + "\n" for line in lines))
            self.stream.flush()

    def flush(self) -> None:
        if self.partial:
            self.stream.write(self._paint(self.partial))
            self.partial = ""
        self.stream.flush()

    @staticmethod
    def _paint(line: str) -> str:
        if line.startswith(PLUGIN_PREFIX):
            failed = " failed " in line or line.endswith(" failed")
            return click.style(line, fg="red" if failed else "cyan")
        if line.startswith("error:"):
            return click.style("error:", fg="red", bold=True) + line[len("error:"):]
        if line.startswith("warning:"):
            return click.style("warning:", fg="yellow") + line[len("warning:"):]
        return line
