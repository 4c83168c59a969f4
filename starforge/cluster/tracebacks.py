"""A plugin's traceback, and which plugin file each of its frames is.

The frames of a plugin's import or install point at the job's staged, read-only copy of
the plugin (``forge_plugins/<name>/`` or ``recipe/common/algorithms/<name>/`` in the job
directory, or a node's copy of it). After the traceback, one ``source  :`` line per such
file says which file of which plugin it is, so the fix goes into the plugin's own source,
not into the job's copy.

Standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .load_order import Item


def format_exc(exc: BaseException) -> str:
    import traceback  # only when something failed: not on a job's start path

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def plugin_traceback(exc: BaseException, item: Item) -> str:
    """*exc*'s traceback, then a ``source  :`` line for each file of *item*'s copy its frames pass through."""
    import traceback

    root = os.path.abspath(item.root) + os.sep
    files: list = []
    for frame in traceback.extract_tb(exc.__traceback__):
        path = os.path.abspath(frame.filename)
        if path.startswith(root) and path not in files:
            files.append(path)
    return format_exc(exc) + "".join(f"source  : {path} is {source_file(item, path[len(root):])}\n" for path in files)


def source_file(item: Item, rel: str) -> str:
    """Where file *rel* of *item*'s staged copy comes from, as the user who edits it knows it."""
    rel = rel.replace(os.sep, "/")
    if item.builtin:
        return f"common/algorithms/{os.path.basename(item.root.rstrip(os.sep))}/{rel} of the experiment (the job's read-only copy)"
    if "+dev." in item.entry.version:
        return f"{rel} of the directory forge submit --dev gave for {item.entry.name} (the job's read-only copy)"
    return f"{rel} of {item.ref} as published (the job's read-only copy: edit the plugin's source and publish a new version)"
