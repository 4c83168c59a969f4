"""The suite runs on every core (``pytest -n auto``): what keeps that safe and cheap.

Session fixtures are per worker process (free loopback ports, their own temp dirs, stopped
by their own PIDs). The tests that use an expensive service — the Ray head, the Slurm
cluster, the trainer venvs' Ray heads — are put in one xdist group per service
(tests/conftest.py) that ``-n N`` schedules as one unit each, so each service starts
once per run and its tests never race each other for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytest.importorskip("xdist", reason="pytest-xdist is part of the test extra (pip install '.[test]')")

PROBE = '''
import json, os

def pytest_collection_finish(session):
    out = [{"id": item.nodeid, "fixtures": sorted(item.fixturenames),
            "markers": sorted(m for m in ("slurm", "ray", "frameworks") if item.get_closest_marker(m) is not None)}
           for item in session.items]
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(out, f)
'''


def _pytest(args, cwd, env_extra=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "FORGE_", "STARFORGE_"))}
    env.update(env_extra or {})
    # hypothesis's plugin (imported by every pytest process, ~1 s each) is not what these runs are about
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_every_test_of_a_service_is_in_that_services_group(tmp_path):
    """The real suite's tests, collected the way a worker does: the groups it reports to the scheduler."""
    (tmp_path / "group_probe.py").write_text(PROBE)
    out, groups_dir = tmp_path / "items.json", tmp_path / "groups"
    groups_dir.mkdir()
    proc = _pytest(["--collect-only", "-q", "-p", "group_probe", "tests/backends", "tests/frameworks"], REPO,
                   {"PROBE_OUT": str(out), "PYTHONPATH": str(tmp_path), "PYTEST_XDIST_WORKER": "gw7",
                    "STARFORGE_TEST_GROUPS_DIR": str(groups_dir)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    items = json.loads(out.read_text())
    groups = json.loads((groups_dir / "gw7.json").read_text())
    counts = Counter(groups.values())
    assert counts["ray"] >= 3 and counts["slurm"] >= 3 and counts["frameworks"] >= 3, counts
    # a parameter that asks for a service at run time carries its marker (test_binding's backends)
    assert any("ray" in item["markers"] and "ray_head" not in item["fixtures"] for item in items)
    for item in items:
        group = groups.get(item["id"])
        if "slurm_cluster" in item["fixtures"]:
            assert group == "slurm", item
        elif "ray_head" in item["fixtures"]:
            assert group == "ray", item
        elif "ray_head_in" in item["fixtures"]:
            assert group == "frameworks", item
        elif "slurm_two_hosts" in item["fixtures"]:  # the multi-host clusters: one worker each
            assert group == "slurm-two-hosts", item
        elif "ray_two_hosts" in item["fixtures"]:
            assert group == "ray-two-hosts", item
        elif item["markers"]:
            assert group == next(g for g in ("slurm", "ray", "frameworks") if g in item["markers"]), item
        else:
            assert group is None, item


SUITE = '''
import os, time
import pytest

def _record(kind):
    with open(os.path.join(os.environ["RECORD_DIR"], f"{kind}-{os.getpid()}-{time.monotonic_ns()}"), "w") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none"))

@pytest.fixture(scope="session")
def ray_head():
    _record("start")
    yield "head"

@pytest.mark.parametrize("i", range(8))
def test_uses_the_service(ray_head, i):
    _record("ray")
    time.sleep(0.05)

@pytest.mark.parametrize("i", range(8))
def test_plain(i):
    _record("plain")
    time.sleep(0.05)
'''


def test_n_alone_runs_a_services_tests_on_one_worker_and_starts_it_once(tmp_path):
    """``pytest -n 2`` with the suite's conftest: the session service starts once, all its tests on one worker."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_service.py").write_text(SUITE)
    record = tmp_path / "record"
    record.mkdir()
    proc = _pytest(["-q", "-n", "2", "--rootdir", str(suite), str(suite)], suite, {"RECORD_DIR": str(record)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "16 passed" in proc.stdout
    seen: dict = {}
    for path in record.iterdir():
        seen.setdefault(path.name.split("-")[0], []).append(path.read_text())
    assert len(seen["ray"]) == 8 and len(seen["plain"]) == 8
    assert all(w.startswith("gw") for w in seen["ray"] + seen["plain"])  # it did run distributed
    assert len(set(seen["ray"])) == 1, seen["ray"]  # every test of the service on one worker
    assert len(seen["start"]) == 1, seen["start"]  # so the service started once


ASKS_AT_RUN_TIME = '''
import pytest


@pytest.fixture(scope="session")
def ray_head():
    yield "head"


@pytest.fixture
def engine(request):
    if request.param == "ray":
        request.getfixturevalue("ray_head")
    return request.param


@pytest.mark.parametrize("engine", ["local", "ray"], indirect=True)
def test_unmarked(engine):
    pass


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.ray)], indirect=True)
def test_marked(engine):
    pass
'''


def test_a_service_asked_for_at_run_time_must_carry_its_marker(tmp_path):
    """The edit loop (-m 'not slow') never starts a cluster by accident: an unmarked test that
    reaches a service's session fixture through getfixturevalue fails and says how to mark it."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_engines.py").write_text(ASKS_AT_RUN_TIME)
    proc = _pytest(["-q", "-n", "0", "-m", "not slow", "--rootdir", str(suite), str(suite)], suite)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "2 passed, 1 deselected" in proc.stdout and "1 error" in proc.stdout, proc.stdout[-3000:]
    assert "test_unmarked[ray] starts the session's ray_head but is not marked 'ray'" in proc.stdout
