"""The top-level names of the distributions installed where ``forge plugin check`` runs.

Read from their ``*.dist-info`` / ``*.egg-info`` folders on ``sys.path``, as
``importlib.metadata.packages_distributions()`` reads them, without importing
importlib.metadata. Laptop side, standard library only.
"""

from __future__ import annotations

import os
import sys


def installed_top_levels() -> dict[str, list[str]]:
    """``{top-level name: [metadata folders of the distributions providing it]}`` on ``sys.path``.

    What ``importlib.metadata.packages_distributions()`` answers (each distribution's
    ``top_level.txt``, else the top-level entries of its ``RECORD``), read from the
    ``*.dist-info`` / ``*.egg-info`` folders directly: importlib.metadata parses every
    distribution's metadata with the email package, which cost every ``forge plugin
    check`` (and pack, publish) tens of milliseconds. A distribution's name is read
    (:func:`distribution_name`) only where one of its names clashes.
    """
    out: dict[str, list[str]] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in names:
            if not folder.endswith((".dist-info", ".egg-info")):
                continue
            path = os.path.join(entry or ".", folder)
            try:
                tops = _declared_top_levels(path)
            except (OSError, UnicodeDecodeError):
                continue  # a broken distribution's metadata must not break the check
            for top in tops:
                out.setdefault(top, []).append(path)
    return out


def _declared_top_levels(dist_info: str) -> set[str]:
    """The top-level names of one installed distribution: its ``top_level.txt``, else its ``RECORD``."""
    try:
        with open(os.path.join(dist_info, "top_level.txt"), encoding="utf-8") as f:
            return {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        pass
    tops = set()
    with open(os.path.join(dist_info, "RECORD"), encoding="utf-8") as f:
        for line in f:
            head, sep, _ = line.partition(",")[0].partition("/")
            name = head if sep else head.partition(".")[0] if head.endswith((".py", ".so", ".pyd")) else head
            if name and "." not in name:
                tops.add(name)
    return tops


def distribution_name(dist_info: str) -> str:
    """The ``Name:`` of an installed distribution's metadata (its folder's name when unreadable)."""
    for meta in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(dist_info, meta), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Name:"):
                        return line[len("Name:"):].strip()
                    if not line.strip():
                        break  # the end of the headers
        except OSError:
            continue
    return os.path.basename(dist_info).partition("-")[0]
