"""The keeper step's script (``starforge.backends.slurm.KEEPER``) run by bash outside Slurm,
signalled the way slurmstepd signals a cancelled step: every process of the step at once,
so the keeper's own ``sleep`` may die of the SIGTERM before the keeper's shell gets it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from starforge.backends.slurm import COLLECT, KEEPER


def start_keeper(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    shared, local = tmp_path / "shared", tmp_path / "local"
    (shared / "slurm" / "cleanup").mkdir(parents=True)
    (local / "provenance").mkdir(parents=True)
    (local / "provenance" / "a0-node-1.json").write_text("{}")
    (local / "status.json").write_text("{}")
    (local / "plugin.py").write_text("x = 1\n")
    for path in (local / "provenance", local):  # the node-local copy is read-only
        path.chmod(0o500)
    keeper = subprocess.Popen(["bash", "-c", KEEPER, "forge-keep", str(shared), str(local), COLLECT],
                              env={**os.environ, "FORGE_ATTEMPT": "0"}, start_new_session=True)
    return keeper, shared, local


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait_for(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("not within %s s" % timeout)


def test_a_keeper_whose_sleep_dies_first_still_collects_and_removes_the_copy_on_sigterm(tmp_path):
    keeper, shared, local = start_keeper(tmp_path)
    try:
        [sleeper] = wait_for(lambda: children(keeper.pid))
        os.kill(sleeper, signal.SIGTERM)  # the step's signal reaches the sleep first ...
        time.sleep(0.3)
        assert keeper.poll() is None, "the keeper ended before its own SIGTERM: it would never collect"
        os.kill(keeper.pid, signal.SIGTERM)  # ... then the keeper's shell
        assert keeper.wait(timeout=10) == 0
    finally:
        if keeper.poll() is None:
            os.killpg(keeper.pid, signal.SIGKILL)
    host = os.uname().nodename.split(".")[0]
    assert not local.exists()
    assert (shared / "provenance" / "a0-node-1.json").exists()
    assert (shared / "slurm" / f"status-{host}.json").exists()
    assert (shared / "slurm" / "cleanup" / f"a0-{host}.done").read_text() == "removed\n"
