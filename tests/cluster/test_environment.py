"""``environment``: the job's runtime files under ``.forge-runtime/`` and the variables every process gets."""

from __future__ import annotations

import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

import starforge.cluster
from starforge.cluster.environment import job_environment, prepare_runtime, runtime_paths
from starforge.cluster.jobspec import JobSpec, write_spec

HYPER = {"opsd.scale": 0.5, "grpo.group_size": 8, "nested": {"b": [1, 2], "a": "x"}}


@pytest.fixture
def umask0():
    old = os.umask(0)
    yield
    os.umask(old)


def test_runtime_paths_are_absolute_and_under_the_job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = runtime_paths("job")
    base = str(tmp_path / "job" / ".forge-runtime")
    assert paths == {
        "dir": base,
        "bootstrap": os.path.join(base, "bootstrap"),
        "zip": os.path.join(base, "starforge-runtime.zip"),
        "hyperparams": os.path.join(base, "hyperparams.json"),
    }


def test_prepare_runtime_writes_the_bootstrap_the_zip_and_the_hyperparams(tmp_path, umask0):
    paths = prepare_runtime(str(tmp_path), HYPER)
    assert paths == runtime_paths(str(tmp_path))
    for folder in (paths["dir"], paths["bootstrap"]):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755  # never writable by others, even under umask 0
    own = Path(starforge.cluster.__file__).parent / "bootstrap" / "sitecustomize.py"
    assert Path(paths["bootstrap"], "sitecustomize.py").read_bytes() == own.read_bytes()
    text = Path(paths["hyperparams"]).read_text()
    assert json.loads(text) == HYPER
    assert text == json.dumps(HYPER, indent=2, sort_keys=True) + "\n"
    with zipfile.ZipFile(paths["zip"]) as z:
        names = set(z.namelist())
        assert z.testzip() is None
    assert {"__main__.py", "starforge/__init__.py", "starforge/cluster/requires.py",
            "starforge/cluster/_vendor/packaging/specifiers.py"} <= names
    assert not [n for n in names if n.endswith(".pyc")]  # sources only


def test_without_hyperparams_they_are_read_from_the_jobspec(tmp_path):
    spec = JobSpec("j-0001", "j", "2026-01-01T00:00:00Z", ["python", "-m", "t"], hyperparams={"lr": 1e-6})
    write_spec(spec, tmp_path / "jobspec.json")
    paths = prepare_runtime(str(tmp_path))
    assert json.loads(Path(paths["hyperparams"]).read_text()) == {"lr": 1e-6}


def test_unchanged_files_are_left_in_place_and_changed_ones_replaced(tmp_path):
    paths = prepare_runtime(str(tmp_path), HYPER)
    boot = Path(paths["bootstrap"], "sitecustomize.py")
    hyper = Path(paths["hyperparams"])
    before = (os.stat(boot).st_ino, os.stat(hyper).st_ino)
    zip_bytes = Path(paths["zip"]).read_bytes()
    prepare_runtime(str(tmp_path), HYPER)
    assert (os.stat(boot).st_ino, os.stat(hyper).st_ino) == before
    assert Path(paths["zip"]).read_bytes() == zip_bytes  # built deterministically
    prepare_runtime(str(tmp_path), {"lr": 2})
    assert json.loads(hyper.read_text()) == {"lr": 2}
    boot.write_bytes(b"print('tampered')\n")
    prepare_runtime(str(tmp_path), {"lr": 2})
    assert boot.read_bytes() != b"print('tampered')\n"


def test_job_environment_names_the_job_and_puts_bootstrap_and_recipe_first(tmp_path):
    job = tmp_path / "job"
    base = {"PYTHONPATH": os.pathsep.join(["/opt/lib", str(job / "recipe"), "", "/opt/other"])}
    env = job_environment(str(job), str(job / "jobspec.json"), "j-0001", base)
    paths = runtime_paths(str(job))
    assert env == {
        "FORGE_JOBSPEC": str(job / "jobspec.json"),
        "FORGE_JOB_DIR": str(job),
        "FORGE_JOB_ID": "j-0001",
        "FORGE_HYPERPARAMS": paths["hyperparams"],
        "FORGE_RUNTIME": paths["zip"],
        "FORGE_PYTHON": sys.executable,
        # ours first, each once; the rest kept in order, empty entries dropped
        "PYTHONPATH": os.pathsep.join([paths["bootstrap"], str(job / "recipe"), "/opt/lib", "/opt/other"]),
    }


def test_job_environment_without_a_base_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = job_environment("job", "job/jobspec.json", "j-2")
    assert env["PYTHONPATH"] == os.pathsep.join([runtime_paths("job")["bootstrap"], str(tmp_path / "job" / "recipe")])
    assert env["FORGE_JOBSPEC"] == str(tmp_path / "job" / "jobspec.json")


def test_a_runtime_directory_others_may_write_is_tightened(tmp_path, umask0):
    base = tmp_path / ".forge-runtime"
    base.mkdir(mode=0o777)
    (base / "bootstrap").mkdir(mode=0o775)
    os.chmod(base, 0o777)
    paths = prepare_runtime(str(tmp_path), HYPER)
    assert stat.S_IMODE(os.stat(paths["dir"]).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(paths["bootstrap"]).st_mode) == 0o755


def test_a_symlinked_runtime_directory_is_refused_and_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    (job / ".forge-runtime").symlink_to(elsewhere)
    with pytest.raises(OSError, match=r"\.forge-runtime is a symbolic link; the job's runtime directory is never followed"):
        prepare_runtime(str(job), HYPER)
    assert list(elsewhere.iterdir()) == []


def test_a_file_where_the_runtime_directory_goes_is_refused(tmp_path):
    (tmp_path / ".forge-runtime").write_text("")
    with pytest.raises(OSError, match=r"\.forge-runtime is not a directory"):
        prepare_runtime(str(tmp_path), HYPER)


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another user needs root")
def test_a_runtime_directory_of_another_user_is_refused(tmp_path):
    base = tmp_path / ".forge-runtime"
    base.mkdir()
    os.chown(base, 65534, 65534)
    with pytest.raises(OSError, match=r"\.forge-runtime belongs to another user \(uid 65534\)"):
        prepare_runtime(str(tmp_path), HYPER)
