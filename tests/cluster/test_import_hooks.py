"""``import_hooks``: plugins handed over once their target module has been imported."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

import pytest

from starforge.cluster.import_hooks import ModuleWatcher, PostImportLoader, TargetWatcher, spec_from_other_finders
from starforge.cluster.jobspec import PluginEntry
from starforge.cluster.load_order import Item


def waiting(name: str, *targets: str) -> Item:
    entry = PluginEntry(name, "1.0.0", "sf1:" + "0" * 64, "algorithm", "deferred", f"{name}:install", owner="alice",
                        targets=tuple(targets))
    return Item(entry, False, "/nonexistent")


@pytest.fixture
def app(make_package):
    """A fresh package ``app_<id>`` with modules ``algo``, ``other`` and ``broken`` (raises)."""
    return make_package("app_", {
        "algo": "RAN = True\nVALUE = 41 + 1\n",
        "other": "VALUE = 'other'\n",
        "broken": "raise RuntimeError('broken target')\n",
    })


def install(watcher: TargetWatcher) -> None:
    sys.meta_path.insert(0, watcher)


def test_a_target_import_hands_over_exactly_the_plugins_waiting_for_it(app):
    calls = []
    first, second, third = waiting("first", f"{app}.algo"), waiting("second", f"{app}.algo", "x.y"), waiting("third", f"{app}.other")
    watcher = TargetWatcher([first, second, third], lambda items, module: calls.append(([i.ref for i in items], module)))
    install(watcher)
    assert watcher.targets() == {f"{app}.algo", f"{app}.other", "x.y"}

    module = importlib.import_module(f"{app}.algo")
    assert module.VALUE == 42 and module.RAN
    assert calls == [(["alice/first@1.0.0", "alice/second@1.0.0"], f"{app}.algo")]
    assert watcher.waiting == [third]
    assert watcher in sys.meta_path

    importlib.import_module(f"{app}.other")
    assert calls[-1] == (["alice/third@1.0.0"], f"{app}.other")
    assert watcher.waiting == []
    assert watcher not in sys.meta_path  # nothing left to wait for: the finder leaves


def test_the_module_keeps_its_real_loader(app):
    install(TargetWatcher([waiting("p", f"{app}.algo")], lambda items, module: None))
    module = importlib.import_module(f"{app}.algo")
    assert not isinstance(module.__loader__, PostImportLoader)
    assert not isinstance(module.__spec__.loader, PostImportLoader)
    assert module.__loader__ is module.__spec__.loader
    assert "VALUE = 41 + 1" in module.__loader__.get_source(module.__name__)


def test_a_target_that_fails_to_import_hands_over_nothing(app):
    calls = []
    item = waiting("p", f"{app}.broken")
    watcher = TargetWatcher([item], lambda items, module: calls.append(module))
    install(watcher)
    with pytest.raises(RuntimeError, match="broken target"):
        importlib.import_module(f"{app}.broken")
    assert calls == []
    assert watcher.waiting == [item]


def test_modules_that_are_no_target_are_not_touched(app):
    watcher = TargetWatcher([waiting("p", f"{app}.algo")], lambda items, module: pytest.fail("called"))
    assert watcher.find_spec(f"{app}.other") is None
    assert watcher.find_spec(f"{app}.absent") is None
    install(watcher)
    importlib.import_module(f"{app}.other")
    assert len(watcher.waiting) == 1


def test_a_target_no_finder_knows_gives_no_spec(app):
    watcher = TargetWatcher([waiting("p", f"{app}.missing")], lambda items, module: None)
    assert watcher.find_spec(f"{app}.missing", None) is None


def test_forget_removes_one_plugin_and_the_finder_with_the_last(app):
    a, b = waiting("a", f"{app}.algo"), waiting("b", f"{app}.algo")
    watcher = TargetWatcher([a, b], lambda items, module: pytest.fail("called"))
    install(watcher)
    watcher.forget(a)
    watcher.forget(a)  # twice is harmless
    assert watcher.waiting == [b] and watcher in sys.meta_path
    watcher.forget(b)
    assert watcher not in sys.meta_path


def test_spec_from_other_finders_skips_the_hook_and_its_kind_and_clears_busy(app):
    watcher = TargetWatcher([waiting("p", f"{app}.algo")], lambda items, module: None)
    twin = TargetWatcher([waiting("q", f"{app}.algo")], lambda items, module: None)
    sys.meta_path[:0] = [twin, watcher]
    importlib.import_module(app)  # the package, so its submodule has a search path
    path = sys.modules[app].__path__
    spec = spec_from_other_finders(watcher, f"{app}.algo", path, None)
    assert spec.name == f"{app}.algo"
    assert not isinstance(spec.loader, PostImportLoader)  # neither the hook nor its twin wrapped it
    assert watcher.local.busy is False
    assert spec_from_other_finders(watcher, f"{app}.absent", path, None) is None
    assert watcher.local.busy is False


def test_busy_is_per_thread(app):
    watcher = TargetWatcher([waiting("p", f"{app}.algo")], lambda items, module: None)
    importlib.import_module(app)
    watcher.local.busy = True
    assert watcher.find_spec(f"{app}.algo", sys.modules[app].__path__) is None
    seen = []
    thread = threading.Thread(target=lambda: seen.append(watcher.find_spec(f"{app}.algo", sys.modules[app].__path__)))
    thread.start()
    thread.join()
    assert isinstance(seen[0].loader, PostImportLoader)


def test_post_import_loader_calls_back_after_the_module_ran_and_passes_the_rest_through(app):
    importlib.import_module(app)
    spec = importlib.util.find_spec(f"{app}.algo")
    seen = []
    loader = PostImportLoader(spec.loader, lambda module: seen.append(module.VALUE))
    assert loader.get_filename(f"{app}.algo") == spec.origin  # anything else is the real loader's
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    assert seen == [42]
    assert spec.loader is not loader


def test_a_module_watcher_calls_back_after_a_wanted_module_ran_and_stays_first_once_installed(app):
    seen = []
    watcher = ModuleWatcher(lambda name: name == f"{app}.algo", lambda module: seen.append((module.__name__, module.VALUE)))
    sys.meta_path.append(watcher)
    watcher.install()  # moved to the front, not added twice
    watcher.install()
    assert sys.meta_path[0] is watcher and sys.meta_path.count(watcher) == 1
    importlib.import_module(f"{app}.other")
    assert seen == []
    module = importlib.import_module(f"{app}.algo")
    assert seen == [(f"{app}.algo", 42)]
    assert module.__loader__ is not None and not isinstance(module.__loader__, PostImportLoader)
    watcher.remove()
    assert watcher not in sys.meta_path
