"""Post-import hooks: run code once a named module has been imported.

A finder placed first on ``sys.meta_path`` asks the other finders for the module's spec
and wraps its loader, so that a callback runs right after the module has executed. The
job uses it for plugins that wait for a target (:class:`TargetWatcher`); the Ray
integration uses it to wrap ``ray.init`` (:mod:`.ray_init`). Standard library only.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .plan import Item


def spec_from_other_finders(hook: Any, fullname: str, path: Any, target: Any) -> Any:
    """The spec the other finders on ``sys.meta_path`` give for *fullname*; *hook* is not re-entered meanwhile."""
    hook.local.busy = True
    try:
        for finder in list(sys.meta_path):
            if finder is hook or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
    finally:
        hook.local.busy = False


class PostImportLoader:
    """Wraps a target module's loader to run a callback once the module has executed."""

    def __init__(self, loader: Any, callback: Callable[[str], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback(module.__name__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


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

    def imported(self, module_name: str) -> None:
        due = [item for item in self.waiting if module_name in item.entry.targets]
        for item in due:
            self.forget(item)
        if due:
            self.on_import(due, module_name)
