"""Control and bidirectional characters in a plugin's text, refused by ``forge plugin check``
(and so by ``pack`` and ``publish``): in every key and string of ``plugin.yaml`` and in
every file name. Descriptions and the string values a param declares (a default or a
choice, such as a separator) may hold newlines and tabs. The characters and how they are
spelled out are :mod:`starforge.terminal_text`'s.

Laptop side.
"""

from __future__ import annotations

from ..terminal_text import shown, unsafe_characters

TEXT_HINT = ("plugin.yaml strings hold printable text (descriptions and param values may hold newlines and tabs); "
             "control and bidirectional characters can rewrite what a terminal shows (docs/security.md)")
NAME_HINT = "rename the file: file names hold printable text only (docs/security.md)"


def _multiline(path: tuple) -> bool:
    return path == ("description",) or (len(path) >= 3 and path[0] == "params"
                                        and path[2] in ("description", "default", "choices"))


def manifest_problems(doc) -> list:
    """``(line, message)`` for every key or string of the YAML document *doc* (a
    :class:`~starforge.package_format.yamlio.YamlDoc`) holding a control or bidirectional character."""
    found: list = []

    def walk(value, path: tuple) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and unsafe_characters(key):
                    found.append((path + (key,), f"the key {shown(key)!r} holds {', '.join(unsafe_characters(key))}"))
                walk(item, path + (key,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, path + (i,))
        elif isinstance(value, str):
            bad = unsafe_characters(value, "\n\t" if _multiline(path) else "")
            if bad:
                where = ".".join(str(p) for p in path) or "the document"
                found.append((path, f"{where} holds {', '.join(bad)}"))

    walk(doc.data, ())
    return [(doc.line(path) if path else None, f"{message} (a control or bidirectional character)")
            for path, message in found]


def file_name_problems(files) -> list:
    """``(name spelled out, message)`` for every file name of *files* holding such a character."""
    return [(shown(rel), f"the file name holds {', '.join(unsafe_characters(rel))} (a control or bidirectional character)")
            for rel in files if unsafe_characters(rel)]
