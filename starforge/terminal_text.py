"""Text from outside forge, made safe for a terminal: one rule for what is refused and shown.

A registry, a lock, a plugin's files and a job record hold text that others wrote. Raw, a
control sequence in it acts on the terminal that prints it: ``ESC ] 52`` writes the
clipboard, ``ESC ] 8`` makes a link, ``\\r`` and cursor movements rewrite the line already
printed ("signature: verified"), and the bidirectional overrides and isolates
(U+202A–U+202E, U+2066–U+2069, and the marks U+200E, U+200F, U+061C) reorder what is
shown. So:

* ``forge plugin check`` / ``pack`` / ``publish`` refuse these characters in every string
  of ``plugin.yaml`` and in every file name (:func:`unsafe_characters`); descriptions and
  string values may still hold newlines and tabs;
* every command that prints such text passes it through :func:`shown`, which spells each
  of them out, as ``less`` and ``cat -v`` do: ``^[`` for ESC, ``^M`` for a carriage
  return, ``^J`` for a newline, ``^?`` for DEL, ``\\u202e`` for a C1 control or a
  bidirectional character. A tab is kept.

>>> shown("ok\\x1b]52;c;aGk=\\x07 \\u202eevil\\r")
'ok^[]52;c;aGk=^G \\\\u202eevil^M'
>>> unsafe_characters("a\\nb\\tc", allow="\\n\\t"), unsafe_characters("a\\nb")
([], ['^J'])

Standard library only; laptop side.
"""

from __future__ import annotations

import re

# C0 controls (tab aside), DEL, C1 controls, the Arabic letter mark, LRM and RLM, the
# bidirectional embeddings and overrides, and the isolates.
UNSAFE = "\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{UNSAFE}]")


def _spell(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 64)
    if code == 0x7F:
        return "^?"
    return f"\\u{code:04x}"


def shown(text: object, keep: str = "") -> str:
    """*text* (any value, as ``str``) with every control and bidirectional character spelled
    out; the characters of *keep* (say ``"\\n"`` for a text of several lines) are left as they are."""
    text = str(text)
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _spell(m.group()), text)


def unsafe_characters(text: str, allow: str = "") -> list:
    """The control and bidirectional characters of *text* (but those in *allow*), spelled out
    as :func:`shown` spells them, in order and without repeats."""
    found: list = []
    for match in _UNSAFE.finditer(text):
        char = match.group()
        if char not in allow and _spell(char) not in found:
            found.append(_spell(char))
    return found
