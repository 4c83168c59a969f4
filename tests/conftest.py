"""Every test runs with its own FORGE_HOME, so no test reads or writes the user's state."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile

import pytest


@pytest.fixture(autouse=True)
def isolated_forge_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("forge-home")
    monkeypatch.setenv("FORGE_HOME", str(home))
    for name in ("FORGE_REGISTRY", "FORGE_OWNER", "FORGE_DEBUG", "FORGE_DISABLE", "FORGE_JOBS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


# Under pytest-xdist (`pytest -n auto`, as .ci/run and the README run the suite), the tests
# that use one of the session's expensive services run on one worker per service: one Ray
# head, one Slurm cluster and one set of trainer-venv Ray heads per run, not one per worker.
# The services are per process (session fixtures on free loopback ports, in their own temp
# dirs, stopped by their own PIDs), so any split of the tests is correct; the groups save
# start-ups and keep the torch-heavy framework checks from competing with each other for the
# cores. tests/test_xdist_safety.py checks both.
#
# How: each worker writes which of its collected tests belong to which service to a folder
# the controller made (STARFORGE_TEST_GROUPS_DIR); the controller's scheduler (xdist's load-by-scope,
# each other test a scope of its own) reads it. xdist's own `loadgroup` cannot be used: it
# renames node ids, which pytest 9.2 no longer lets a plugin do.
# The quickstart's shared run (tests/examples/test_quickstart.py) is grouped the same way: one
# run of the script for the tests that read the checkout it leaves.
SERVICE_GROUPS = (("slurm_cluster", "slurm"), ("ray_head", "ray"), ("ray_head_in", "frameworks"),
                  ("slurm_two_hosts", "slurm-two-hosts"), ("ray_two_hosts", "ray-two-hosts"),
                  ("quickstart_run", "quickstart"), ("browser", "browser"))
GROUPS_ENV = "STARFORGE_TEST_GROUPS_DIR"


# A test that asks for a service at run time (``request.getfixturevalue``, e.g. a fixture
# parametrized over backends) names it with the service's marker on that parameter
# (``pytest.param("ray", marks=pytest.mark.ray)``): the marker puts it in the group too.
MARKER_GROUPS = (("slurm", "slurm"), ("ray", "ray"), ("frameworks", "frameworks"), ("browser", "browser"))


def service_group(item) -> str | None:
    """The service group of a collected test: the first expensive service it uses, or None."""
    group = next((g for fixture, g in SERVICE_GROUPS if fixture in item.fixturenames), None)
    if group is None:
        group = next((g for marker, g in MARKER_GROUPS if item.get_closest_marker(marker) is not None), None)
    return group


# The jobs the tests start get a TMPDIR of the run's own (STARFORGE_TEST_TMPDIR, made by the
# controller, inherited by the workers and every process they start); pytest and the test
# fixtures keep the machine's temp folder (short socket paths). A job's node entry makes its
# code directory (forge-code-*) there and must remove it however the job ends, cancelled
# included: the run fails when any is left at the end.
TMP_ENV = "STARFORGE_TEST_TMPDIR"
BASE_TMP_ENV = "STARFORGE_TEST_BASE_TMPDIR"


def pytest_configure(config):
    # A runner started in the background without job control inherits SIGINT ignored, and so
    # would every process a test starts; tests of signal handling assume an ordinary start,
    # where Python installs its own handler and children begin with the default.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    numprocesses = getattr(config.option, "numprocesses", None)
    if numprocesses and not worker:
        # The controller, before it starts the workers (they inherit the environment).
        os.environ[GROUPS_ENV] = tempfile.mkdtemp(prefix="forge-test-groups-")
    if not worker:
        os.environ[BASE_TMP_ENV] = tempfile.gettempdir()
        os.environ[TMP_ENV] = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="forge-test-tmp-")
    tempfile.tempdir = os.environ.get(BASE_TMP_ENV) or None


def leftover_code_dirs() -> tuple[list, list]:
    """The job code directories in the run's TMPDIR: ``(left behind, still in use)``, as
    ``name (job dir)``; in use means the process that made it still runs (a job left running)."""
    folder = os.environ.get(TMP_ENV, "")
    names = sorted(n for n in os.listdir(folder) if n.startswith("forge-code-")) if os.path.isdir(folder) else []
    dead, alive = [], []
    for name in names:
        try:
            with open(os.path.join(folder, name, "forge-code.json")) as f:
                key = json.load(f)
            os.kill(int(key["pid"]), 0)
        except ProcessLookupError:
            dead.append(f"{name} ({key.get('job_dir')})")
        except (OSError, ValueError, KeyError, TypeError):
            dead.append(name)  # no readable key: nothing can ever claim or remove it
        else:
            alive.append(f"{name} ({key.get('job_dir')})")
    return dead, alive


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    dead, alive = leftover_code_dirs()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if alive:
        reporter.write_line(f"warning: {len(alive)} jobs still run at the end of the run (a test left them running): "
                            f"{', '.join(alive[:3])}{' ...' if len(alive) > 3 else ''}", yellow=True)
    if dead:
        reporter.write_line(
            f"error: the run left {len(dead)} job code directories in its TMPDIR {os.environ[TMP_ENV]}: "
            f"{', '.join(dead[:5])}{' ...' if len(dead) > 5 else ''} (a job's node entry must remove its own)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for env in (GROUPS_ENV, TMP_ENV):
        folder = os.environ.get(env)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


# `slow`: left out of the edit loop (`bash .ci/run --quick`, i.e. `pytest -m "not slow"`),
# chosen by what a test needs, never by how long it takes: the edit loop needs only the
# project's .venv. Left out: the tests of a real service (markers `oci`: the docker-registry
# binary; `ray`: a Ray head; `slurm`: a Slurm cluster; `frameworks`: the trainer venvs;
# `netns`: network namespaces of its own; `index`: a download from the package index;
# `browser`: the headless chromium the catalogue's pages are opened in) and
# the tests that use a service's session fixture. A test that starts one of those fixtures
# without being marked (a service asked for at run time, unmarked) is an error, so the edit
# loop never starts a cluster by accident. CI runs everything.
SLOW_MARKERS = ("oci", "ray", "slurm", "frameworks", "netns", "index", "browser")
# session fixture -> the marker a test using it (perhaps through getfixturevalue) must carry
SERVICE_FIXTURES = {
    "oci_registry": "oci", "oci_registry_auth": "oci", "ray_head": "ray", "slurm_cluster": "slurm",
    "ray_head_in": "frameworks", "browser": "browser",
}


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    marker = SERVICE_FIXTURES.get(fixturedef.argname)
    item = getattr(request, "_pyfuncitem", None)
    if marker is None or item is None or item.get_closest_marker("slow") is not None:
        return
    pytest.fail(
        f"{item.nodeid} starts the session's {fixturedef.argname} but is not marked '{marker}': the edit loop "
        f"(-m 'not slow') would start it; mark the test, or the parameter that asks for it "
        f"(pytest.param(..., marks=pytest.mark.{marker}))", pytrace=False,
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (any(item.get_closest_marker(m) for m in SLOW_MARKERS) or service_group(item) is not None
                or any(f in SERVICE_FIXTURES for f in item.fixturenames)):
            item.add_marker(pytest.mark.slow)
    worker, folder = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(GROUPS_ENV)
    if not (worker and folder):
        return
    groups = {item.nodeid: g for item in items if (g := service_group(item)) is not None}
    tmp = os.path.join(folder, f".{worker}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(groups, f)
    os.replace(tmp, os.path.join(folder, f"{worker}.json"))


# `-n auto`: one worker more than the cores this process may run on. Many tests wait on a
# service or a job (a Ray job's status, a Slurm step, a child process) with the CPU idle: with one
# worker per core, a full run left the 2 cores of these machines idle about 22% of its time (vmstat),
# and one more worker fills that (docs/performance.md, "Test loop"). PYTEST_XDIST_AUTO_NUM_WORKERS,
# where set, decides instead, as pytest-xdist documents.
@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: no error where xdist is not installed
def pytest_xdist_auto_num_workers(config):
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: no error where xdist is not installed
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "load":  # another mode asked for by name: as asked
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ServiceGroupScheduling(LoadScopeScheduling):
        """xdist's ``load``, except that the tests of one service are one unit of work."""

        _groups: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = {}
                folder = os.environ.get(GROUPS_ENV, "")
                for name in sorted(os.listdir(folder)) if folder else ():
                    if name.endswith(".json") and not name.startswith("."):
                        with open(os.path.join(folder, name)) as f:
                            self._groups.update(json.load(f))
            group = self._groups.get(nodeid)
            return f"service:{group}" if group else nodeid

    return ServiceGroupScheduling(config, log)
