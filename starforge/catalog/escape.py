"""Registry text made safe for the place in a page it goes to: the one escaping rule of the catalogue.

Everything a registry serves is someone else's text: a description, a param's doc, a
yank's reason (an unsigned yank is anyone's word), a file name, a target. Each goes
through one of these functions, chosen by where it lands:

* :func:`text` for element text and :func:`attr` for a quoted attribute value: the
  terminal's rule first (:func:`starforge.terminal_text.shown`: control and
  bidirectional characters spelled out, ``\\u202e``; here also the line and paragraph
  separators), then HTML's special characters as entities, quotes included;
* :func:`href` for a link: only the catalogue's own relative paths, built from names and
  versions whose grammar has no ``:`` or ``/`` tricks, each part percent-encoded; anything
  with a scheme (``javascript:``, ``data:``, ``http:``) or a leading ``/`` becomes ``#``;
* :func:`anchor` for an ``id``: a version as a fragment of plain characters.

No registry text goes into a script or a style: the index's filter reads ``data-*``
attributes (through :func:`attr`), so there is no inline data to break out of.

>>> text('<img src=x onerror="alert(1)"> \\u202eevil')
'&lt;img src=x onerror=&quot;alert(1)&quot;&gt; \\\\u202eevil'
>>> href("javascript:alert(1)"), href("plugins/alice/dr-grpo.html#v1.0.0")
('#', 'plugins/alice/dr-grpo.html#v1.0.0')

Laptop side.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from ..terminal_text import shown

_SEPARATORS = re.compile("[\u2028\u2029]")
# a path of the catalogue's own: relative (up to its root by leading "../" only), no scheme, no backslash
_OWN_PATH = re.compile(r"^(?:\.\./)*(?![A-Za-z][A-Za-z0-9+.-]*:)(?!/)(?!.*\.\.)(?!.*\\)[^\s]*$")


def spelled(value: object, keep: str = "") -> str:
    """*value* with control and bidi characters spelled out as the terminal spells them (those of
    *keep* left), and the line and paragraph separators (U+2028, U+2029), which a page would
    show as a break no one typed, as ``\\u2028`` and ``\\u2029``."""
    return _SEPARATORS.sub(lambda m: f"\\u{ord(m.group()):04x}", shown(value, keep=keep))


def text(value: object, keep: str = "") -> str:
    """*value* as element text: :func:`spelled`, then HTML escaped."""
    return html.escape(spelled(value, keep=keep), quote=True)


def attr(value: object) -> str:
    """*value* for a double-quoted attribute: as :func:`text`, newlines spelled out too."""
    return html.escape(spelled(value), quote=True)


def href(path: str) -> str:
    """*path* (one of the catalogue's own relative paths, ``#fragment`` allowed) for an ``href``,
    each part percent-encoded; ``#`` for anything else (a scheme, an absolute path, ``..``
    anywhere but at the start).

    >>> href("../../index.html"), href("plugins/../../etc/passwd"), href("/etc/passwd")
    ('../../index.html', '#', '#')
    """
    if not _OWN_PATH.match(path):
        return "#"
    where, hash_, fragment = path.partition("#")
    out = "/".join(part if part == ".." else quote(part, safe="") for part in where.split("/")) if where else ""
    if hash_:
        out += "#" + quote(fragment, safe="")
    return html.escape(out, quote=True)


def anchor(version: str) -> str:
    """The ``id`` of a version on its plugin's page (its link's fragment): ``v`` and the version,
    any character but letters, digits, ``.``, ``_`` and ``-`` as ``_`` (``1.0+cu121`` is ``v1.0_cu121``)."""
    return "v" + re.sub(r"[^A-Za-z0-9._-]", "_", version)
