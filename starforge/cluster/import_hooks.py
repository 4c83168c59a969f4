"""Post-import hooks: run code once a named module has been imported.

A finder placed first on ``sys.meta_path`` asks the other finders for the module's spec
(:func:`spec_from_other_finders`) and wraps its loader (:class:`PostImportLoader`), so
that a callback runs right after the module has executed. The one mechanism behind three
uses: plugins that wait for a target (:class:`TargetWatcher`), ``ray.init`` wrapped when
``ray`` is imported (:mod:`.ray_init`), and patches applied when their target module is
imported (:mod:`.patching`, through a :class:`ModuleWatcher`). Standard library only.
"""

from __future__ import annotations

import sys
import threading
import types

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any, Callable

    from .load_order import Item


def spec_from_other_finders(hook: Any, fullname: str, path: Any, target: Any) -> Any:
    """The spec the other finders on ``sys.meta_path`` give for *fullname*; *hook* is not re-entered meanwhile.

    *hook* has a thread-local ``local`` whose ``busy`` its ``find_spec`` honours. Other
    finders of *hook*'s own class are skipped too.
    """
    hook.local.busy = True
    try:
        for finder in list(sys.meta_path):
            if finder is hook or isinstance(finder, type(hook)) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
    finally:
        hook.local.busy = False


class PostImportLoader:
    """Wraps a module's loader to call *callback(module)* once the module has executed.

    Implements the loader interface without inheriting ``importlib.abc.Loader`` (which
    pulls in ``importlib.resources``); anything else is the real loader's. If the module
    raises, the callback is not called.
    """

    def __init__(self, loader: Any, callback: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            # Leave the module as if this wrapper had never been there (another post-import
            # wrapper inside this one may already have done so).
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
        self._callback(module)


class TargetWatcher:
    """A meta-path finder that hands waiting plugins to *on_import* when one of their targets is imported."""

    def __init__(self, items: list[Item], on_import: Callable[[list[Item], str], None]) -> None:
        self.waiting = list(items)
        self.on_import = on_import
        self.local = threading.local()

    def targets(self) -> set:
        return {t for item in self.waiting for t in item.entry.targets}

    def forget(self, item: Item) -> None:
        if item in self.waiting:
            self.waiting.remove(item)
        if not self.waiting and self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if getattr(self.local, "busy", False) or fullname not in self.targets():
            return None
        spec = spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = PostImportLoader(spec.loader, self.imported)
        return spec

    def imported(self, module: types.ModuleType) -> None:
        module_name = module.__name__
        due = [item for item in self.waiting if module_name in item.entry.targets]
        for item in due:
            self.forget(item)
        if due:
            self.on_import(due, module_name)


class ModuleWatcher:
    """A meta-path finder that calls *imported(module)* once a module *wanted(name)* accepts has executed.

    It imports nothing itself: it only wraps the real loader (modules without
    ``exec_module`` are left alone). :meth:`install` puts it first on ``sys.meta_path``,
    :meth:`remove` takes it off.
    """

    def __init__(self, wanted: Callable[[str], bool], imported: Callable[[types.ModuleType], None]) -> None:
        self.wanted = wanted
        self.imported = imported
        self.local = threading.local()  # busy while asking the other finders (no re-entry)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not self.wanted(fullname) or getattr(self.local, "busy", False):
            return None
        spec = spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = PostImportLoader(spec.loader, self.imported)
        return spec

    def install(self) -> None:
        """Put this finder first on ``sys.meta_path`` (moving it there if it is further down)."""
        if sys.meta_path and sys.meta_path[0] is self:
            return
        self.remove()
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)
