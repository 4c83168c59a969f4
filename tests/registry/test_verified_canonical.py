"""The canonical comparison of a record with its verified tree (SPEC §5): equal where only the
spelling differs, different where a job would behave differently."""

from __future__ import annotations

from starforge.package_format.manifest import PluginManifest
from starforge.registry.verified import VerifiedTree, disagreeing

TREE = {
    "schema": "forge/plugin/v1", "name": "p", "version": "1.2", "kind": "algorithm", "entrypoint": "p:install",
    "targets": ["a.b", "c"],
    "requires": {"core": ">=0.1,<1", "packages": {"Numpy_Extra": ">=1"}},
    "params": {"x": {"type": "float", "default": 1.0, "choices": [1.0, 2.5]}, "flag": {"type": "bool", "default": True}},
}


def _tree() -> VerifiedTree:
    return VerifiedTree(tree_digest="sf1:" + "0" * 64, manifest=PluginManifest.from_mapping(TREE), top_level=("p", "q"))


def _with(**changes) -> dict:
    return {**TREE, **changes}


def test_spelling_differences_agree():
    same = _with(version="1.2.0", load="eager", targets=["c", "a.b"],
                 requires={"core": "<1,>=0.1", "packages": {"numpy-extra": ">=1"}},
                 params={"x": {"type": "float", "default": 1, "choices": [2.5, 1]}, "flag": {"type": "bool", "default": True}})
    assert disagreeing(_tree(), same, ["q", "p"]) == []


def test_differences_a_job_would_feel_are_named():
    tree = _tree()
    assert disagreeing(tree, _with(params={**TREE["params"], "x": {"type": "float", "default": 1.5}}), ["p", "q"]) == ["params"]
    # a bool is not the number 1, and an absent default is not null
    assert disagreeing(tree, _with(params={**TREE["params"], "flag": {"type": "bool", "default": 1}}), ["p", "q"]) == ["manifest"]
    assert disagreeing(tree, _with(params={**TREE["params"], "flag": {"type": "bool"}}), ["p", "q"]) == ["params"]
    assert disagreeing(tree, _with(kind="environment", load="deferred"), ["p", "q"]) == ["kind", "load"]
    assert disagreeing(tree, _with(requires={"core": ">=0.1,<2"}), ["p", "q"]) == ["requires"]
    assert disagreeing(tree, TREE, ["p", "q", "json"]) == ["top_level"]
    assert disagreeing(tree, {"kind": "algorithm"}, ["p", "q"]) == ["manifest"]
