"""Staging pieces: job ids, what the recipe copy leaves out, read-only trees, no half-staged job."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone

import pytest

from starforge.cluster.jobspec import PluginEntry
from starforge.errors import NotFoundError, RegistryError
from starforge.experiment.config import load_experiment
from starforge.experiment.lockfile import LockEntry, LockFile
from starforge.experiment.stage import copy_recipe, make_read_only, new_job_id, resolve_job, stage_job


def test_job_id_is_name_utc_time_and_a_short_random_part():
    when = datetime(2026, 11, 29, 12, 0, 5, tzinfo=timezone.utc)
    assert re.fullmatch(r"qwen3b-grpo-20261129-120005-[0-9a-f]{4}", new_job_id("qwen3b-grpo", when))
    # two submits in the same second get different ids (65536 random suffixes)
    assert len({new_job_id("x", when) for _ in range(50)}) > 40


def test_recipe_copy_leaves_out_debris_and_the_jobs_directory(tmp_path):
    src = tmp_path / "exp"
    for rel in ["train.py", "pkg/mod.py", "pkg/__pycache__/mod.cpython-311.pyc", "stray.pyc", ".git/HEAD",
                ".forge/jobs/old/jobspec.json", "sub/.forge/keep.txt", ".venv/bin/python", "x.egg-info/PKG-INFO", "data/a.csv"]:
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    os.symlink("train.py", src / "link.py")
    copy_recipe(src, tmp_path / "recipe")
    got = sorted(str(p.relative_to(tmp_path / "recipe")) for p in (tmp_path / "recipe").rglob("*") if not p.is_dir())
    assert got == ["data/a.csv", "link.py", "pkg/mod.py", "sub/.forge/keep.txt", "train.py"]
    assert os.readlink(tmp_path / "recipe" / "link.py") == "train.py"


def test_make_read_only_drops_every_write_bit(tmp_path):
    (tmp_path / "t" / "d").mkdir(parents=True)
    (tmp_path / "t" / "d" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "t" / "d" / "run.sh", 0o755)
    make_read_only(tmp_path / "t")
    assert os.stat(tmp_path / "t" / "d" / "run.sh").st_mode & 0o777 == 0o555
    assert os.stat(tmp_path / "t" / "d").st_mode & 0o777 == 0o555
    assert os.stat(tmp_path / "t").st_mode & 0o777 == 0o555
    for p in (tmp_path / "t", tmp_path / "t" / "d"):
        os.chmod(p, 0o755)


def test_a_failed_staging_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    (exp_dir / "forge.yaml").write_text("schema: forge/job/v1\nname: d\nentrypoint: python -m t\nplugins: [alice/gone@1.0.0]\n")
    entry = LockEntry(plugin=PluginEntry(name="gone", version="1.0.0", tree_digest="sf1:" + "1" * 64, kind="algorithm",
                                         load="eager", entrypoint="gone:install", owner="alice", top_level=("gone",)),
                      request="alice/gone@==1.0.0", artifact_digest="sha256:" + "2" * 64)
    (exp_dir / "plugins.lock.json").write_text(LockFile(plugins=(entry,)).to_json())
    plan = resolve_job(load_experiment(exp_dir))
    from starforge.registry.factory import open_registry

    job_dir = exp_dir / ".forge" / "jobs" / plan.spec.id
    with pytest.raises((NotFoundError, RegistryError)):
        stage_job(plan, job_dir, open_registry(str(tmp_path / "empty-registry")))
    assert os.listdir(exp_dir / ".forge" / "jobs") == []
