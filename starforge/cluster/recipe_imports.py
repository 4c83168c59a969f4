"""The recipe's own modules, imported from the staged recipe in every process of a job.

The job runs in a working directory of its own (``work/``, copies of the recipe's files,
SPEC §9), which ``python -m`` puts first on ``sys.path``. What runs must still be the
staged ``recipe/`` — the record ``forge jobs replay`` proves — and nothing may be written
there, not even bytecode (as root a read-only tree is writable). :class:`RecipeFinder`
sits on ``sys.meta_path`` ahead of the path finder and answers for the recipe's top-level
names and everything below them: it finds the module in the staged recipe and loads it
with :class:`UncachedSourceLoader`, which compiles the source and neither reads nor writes
``__pycache__``. A file the job writes into its working directory under a recipe module's
name never shadows the staged one.

Standard library only.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys

from .jobdir_layout import RECIPE_DIR

# An extension module's file name (``x.cpython-311-x86_64-linux-gnu.so``, ``x.pyd``): group 1 is its import name.
EXTENSION_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\.[A-Za-z0-9_-]+)*\.(so|pyd)$")


def recipe_top_level(recipe_dir: str) -> dict[str, str]:
    """``{name: what provides it}`` for the recipe's own importable top-level names.

    The recipe directory is first on the entrypoint's ``sys.path``: ``x.py``, an extension
    module, and a directory ``x/`` holding ``__init__.py`` or a Python file (a namespace
    package) are importable as ``x``. One directory listing (and one per sub-directory),
    never a walk of the recipe's data. The launcher's shadowing check refuses a plugin
    providing one of these names (:func:`.shadowing.shadowing`).
    """
    out: dict[str, str] = {}
    try:
        entries = list(os.scandir(recipe_dir))
    except OSError:
        return out
    for entry in entries:
        name = entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                if name.isidentifier() and _holds_python(entry.path):
                    out.setdefault(name, f"{RECIPE_DIR}/{name}/")
                continue
        except OSError:
            continue
        if name.endswith(".py") and name[:-3].isidentifier():
            out.setdefault(name[:-3], f"{RECIPE_DIR}/{name}")
            continue
        m = EXTENSION_RE.match(name)
        if m:
            out.setdefault(m.group(1), f"{RECIPE_DIR}/{name}")
    return out


def _holds_python(directory: str) -> bool:
    try:
        with os.scandir(directory) as it:
            return any(e.name.endswith(".py") for e in it)
    except OSError:
        return False


class UncachedSourceLoader(importlib.machinery.SourceFileLoader):
    """A source file loader that compiles the source every time and writes no bytecode."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)

    def set_data(self, path, data, *, _mode=0o666):
        return None  # bytecode is never written into the staged recipe


class RecipeFinder:
    """Finds the modules of the staged recipe *recipe_dir* (its top-level names and below).

    *origins* is :func:`recipe_top_level` of *recipe_dir* (``{name: what provides it}``),
    listed once: the launcher's shadowing check reads it from here (:func:`recipe_names`)
    instead of listing the recipe again.
    """

    def __init__(self, recipe_dir: str, origins) -> None:
        self.recipe_dir = os.path.abspath(recipe_dir)
        self.origins = dict(origins)
        self.names = frozenset(self.origins)

    def find_spec(self, fullname, path=None, target=None):
        top, dot, _ = fullname.partition(".")
        if top not in self.names:
            return None
        search = path if dot else [self.recipe_dir]
        if not search:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, list(search))
        if spec is None or not spec.origin or not self._inside(spec.origin):
            return None  # not the staged recipe's (a namespace portion, a path changed by the job)
        if type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = UncachedSourceLoader(fullname, spec.origin)
            spec.cached = None
        return spec

    def _inside(self, origin: str) -> bool:
        return os.path.abspath(origin).startswith(self.recipe_dir + os.sep)

    def invalidate_caches(self) -> None:
        return None


def installed_finder(recipe_dir: str) -> RecipeFinder | None:
    """The :class:`RecipeFinder` of *recipe_dir* on ``sys.meta_path``, or None."""
    recipe_dir = os.path.abspath(recipe_dir)
    for finder in sys.meta_path:
        if isinstance(finder, RecipeFinder) and finder.recipe_dir == recipe_dir:
            return finder
    return None


def recipe_names(recipe_dir: str) -> dict[str, str]:
    """The recipe's own top-level names (:func:`recipe_top_level`): those its finder listed
    when this process installed one, else listed now."""
    finder = installed_finder(recipe_dir)
    return dict(finder.origins) if finder is not None else recipe_top_level(recipe_dir)


def install_recipe_finder(recipe_dir: str) -> RecipeFinder | None:
    """Put a :class:`RecipeFinder` for *recipe_dir* ahead of the path finder (once per recipe)."""
    recipe_dir = os.path.abspath(recipe_dir)
    finder = installed_finder(recipe_dir)
    if finder is not None:
        return finder
    if not os.path.isdir(recipe_dir):
        return None
    finder = RecipeFinder(recipe_dir, recipe_top_level(recipe_dir))
    index = len(sys.meta_path)
    for i, other in enumerate(sys.meta_path):
        if other is importlib.machinery.PathFinder:
            index = i
            break
    sys.meta_path.insert(index, finder)
    return finder
