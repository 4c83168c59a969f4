"""A plugin's facts flow one way: the verified tree's manifest -> the lock entry, which holds
the JobSpec's entry as it is; no registry record is ever rebuilt from a lock entry."""

from __future__ import annotations

import ast
from pathlib import Path

import starforge
from starforge.cluster.jobspec import PluginEntry
from starforge.experiment.config import load_experiment
from starforge.experiment.lockfile import LockEntry, LockFile, read_lock
from starforge.experiment.stage import resolve_job

PACKAGE = Path(starforge.__file__).parent
RECORD = "PublishedVersion"  # what a registry knows of a version: only a registry builds one


def builders_of(name: str, root: Path) -> list:
    """``path:line`` of every call constructing *name* (by that name or as ``module.name``) under *root*."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                    out.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return out


def test_the_builder_finder_finds_a_reverse_constructor(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "lock.py").write_text(
        "def published_version(entry):\n    from ..registry import base\n    return base.PublishedVersion(owner=entry.owner)\n")
    assert builders_of(RECORD, tmp_path) == ["experiment/lock.py:3"]


def test_only_the_registry_builds_a_registry_record():
    outside = [where for where in builders_of(RECORD, PACKAGE) if not where.startswith("registry/")]
    assert outside == []


def test_the_jobspec_entry_of_a_locked_plugin_is_the_lock_entrys_own(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    (exp_dir / "forge.yaml").write_text("schema: forge/job/v1\nname: d\nentrypoint: python -m t\nplugins: [alice/one@1.0.0]\n")
    plugin = PluginEntry(name="one", version="1.0.0", tree_digest="sf1:" + "1" * 64, kind="algorithm", load="eager",
                         entrypoint="one:install", owner="alice", top_level=("one",), files={"one.py": "2" * 64},
                         params={"one.scale": {"type": "float", "default": 1.0}})
    entry = LockEntry(plugin=plugin, request="alice/one@==1.0.0", artifact_digest="sha256:" + "3" * 64)
    (exp_dir / "plugins.lock.json").write_text(LockFile(plugins=(entry,)).to_json())
    plan = resolve_job(load_experiment(exp_dir))
    assert plan.lock == read_lock(exp_dir / "plugins.lock.json")
    assert plan.spec.plugins[0] is plan.lock.plugins[0].plugin
    assert plan.spec.plugins[0] == plugin
    # the JSON keys stay: the lock and the JobSpec both say "digest"
    assert plan.lock.plugins[0].to_dict()["digest"] == plan.spec.plugins[0].to_dict()["digest"] == "sf1:" + "1" * 64
    assert plan.spec.hyperparams == {"one.scale": 1.0}
