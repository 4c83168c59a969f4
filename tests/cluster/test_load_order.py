"""``load_order``: which plugins of a JobSpec a process loads, in which order, and what it refuses."""

from __future__ import annotations

import os

import pytest

from starforge.cluster.errors import LaunchFailure
from starforge.cluster.jobspec import JobSpec, PluginEntry
from starforge.cluster.load_order import Item, ordered_items

DIGEST = "sf1:" + "ab" * 32


def package(name: str, *, kind: str = "algorithm", top: tuple = (), owner: str = "alice", **kw) -> PluginEntry:
    module = name.replace("-", "_")
    return PluginEntry(name, "1.0.0", DIGEST, kind, kw.pop("load", "eager"), f"{module}:install", owner=owner,
                       top_level=top or (module,), **kw)


def builtin(name: str, *, top: tuple = (), kind: str = "algorithm") -> PluginEntry:
    module = name.replace("-", "_")
    return PluginEntry(name, "0.0.0", DIGEST, kind, "eager", f"{module}:install", top_level=top or (module,))


def spec(plugins=(), recipe=()) -> JobSpec:
    return JobSpec("j-0001", "j", "2026-01-01T00:00:00Z", ["python", "-m", "t"], plugins=tuple(plugins),
                   recipe_plugins=tuple(recipe))


def test_packages_come_first_then_builtins_each_under_its_own_root(tmp_path):
    items = ordered_items(spec([package("b-patch"), package("a-patch")], [builtin("local-algo")]), str(tmp_path))
    assert [(i.ref, i.builtin, i.status) for i in items] == [
        ("alice/b-patch@1.0.0", False, "planned"),
        ("alice/a-patch@1.0.0", False, "planned"),
        ("recipe:local-algo@0.0.0", True, "planned"),
    ]
    assert items[0].root == os.path.join(str(tmp_path), "forge_plugins", "b-patch")
    assert items[2].root == os.path.join(str(tmp_path), "recipe", "common", "algorithms", "local-algo")


def test_a_builtin_named_like_a_package_is_shadowed_and_does_not_clash(tmp_path):
    items = ordered_items(spec([package("opsd-patch")], [builtin("opsd-patch"), builtin("other")]), str(tmp_path))
    shadowed = items[1]
    assert shadowed.status == "shadowed"
    assert shadowed.shadowed_by == "alice/opsd-patch@1.0.0"
    assert items[2].status == "planned"
    record = shadowed.to_record()
    assert record["shadowed_by"] == "alice/opsd-patch@1.0.0"
    assert record["source"] == "builtin"


def test_two_loaded_plugins_with_one_top_level_module_are_refused(tmp_path):
    plugins = [package("one", top=("shared", "one")), package("two", owner="bob", top=("shared",))]
    with pytest.raises(LaunchFailure) as info:
        ordered_items(spec(plugins), str(tmp_path))
    failure = info.value
    assert (failure.phase, failure.code, failure.plugin) == ("spec", 2, "bob/two@1.0.0")
    assert failure.message == "bob/two@1.0.0 and alice/one@1.0.0 both provide the top-level module 'shared'"


def test_a_builtin_and_a_package_sharing_a_top_level_module_are_refused(tmp_path):
    with pytest.raises(LaunchFailure, match="recipe:algo@0.0.0 and alice/p@1.0.0 both provide the top-level module 'p'"):
        ordered_items(spec([package("p")], [builtin("algo", top=("p",))]), str(tmp_path))


def test_a_data_prep_plugin_never_enters_a_job(tmp_path):
    with pytest.raises(LaunchFailure) as info:
        ordered_items(spec([package("good"), package("prep", kind="data-prep")]), str(tmp_path))
    assert info.value.code == 2
    assert info.value.plugin == "alice/prep@1.0.0"
    assert "data-prep plugins never enter a job" in info.value.message


def test_an_environment_plugin_waits_as_skipped_but_still_owns_its_modules(tmp_path):
    items = ordered_items(spec([package("env", kind="environment"), package("algo")]), str(tmp_path))
    assert [i.status for i in items] == ["skipped", "planned"]
    with pytest.raises(LaunchFailure, match="both provide the top-level module 'env'"):
        ordered_items(spec([package("env", kind="environment"), package("algo", top=("env",))]), str(tmp_path))


def test_the_record_carries_the_entry_and_what_happened(tmp_path):
    entry = package("p", load="deferred", targets=("app.algo",))
    item = Item(entry, False, str(tmp_path))
    assert item.ref == "alice/p@1.0.0"
    assert item.to_record() == {
        "ref": "alice/p@1.0.0", "name": "p", "version": "1.0.0", "digest": DIGEST, "source": "package",
        "kind": "algorithm", "load": "deferred", "targets": ["app.algo"], "status": "planned", "verified": False,
        "trigger": None,
    }
    item.status, item.verified, item.trigger = "loaded", True, "target:app.algo"
    item.seconds, item.check, item.hashed = 0.12345678, "files", ["p.py"]
    record = item.to_record()
    assert (record["status"], record["verified"], record["trigger"]) == ("loaded", True, "target:app.algo")
    assert record["seconds"] == 0.123457
    assert record["check"] == "files"
    assert record["hashed_files"] == ["p.py"]
    assert "shadowed_by" not in record
