"""The keeper step's script (``starforge.backends.slurm.KEEPER``) run by bash outside Slurm,
signalled the way slurmstepd signals a cancelled step: every process of the step at once,
so the keeper's own ``sleep`` may die of the SIGTERM before the keeper's shell gets it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.waiting import wait_for

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


def test_a_keeper_whose_sleep_dies_first_still_collects_and_removes_the_copy_on_sigterm(tmp_path):
    keeper, shared, local = start_keeper(tmp_path)
    try:
        [sleeper] = wait_for(lambda: children(keeper.pid), "the keeper's sleep started", timeout=10, interval=0.02)
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


# cp cut short at its N-th call, as SIGKILL cuts it (slurmstepd, once KillWait is over): its
# destination opened and half written, then the test kills the whole step
CUT_CP = """\
#!/bin/bash
n=$(( $(cat "$CUT_COUNT" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$CUT_COUNT"
if [ "$n" = "$CUT_AT" ]; then
    src=$1; dest=${@: -1}
    if [ -d "$dest" ]; then dest="$dest/${src##*/}"; fi
    head -c $(( $(stat -c %s "$src") / 2 )) "$src" > "$dest"
    touch "$CUT_MARK"
    exec sleep 300
fi
exec /bin/cp "$@"
"""


@pytest.mark.parametrize("cut_at", [1, 2, 3])
def test_a_collect_killed_at_any_copy_leaves_every_shared_record_whole(tmp_path, cut_at):
    # a cancel whose collect outlasts KillWait: SIGKILL, at the 1st, 2nd or 3rd copy
    keeper_dir = tmp_path / "k"
    keeper_dir.mkdir()
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cp").write_text(CUT_CP)
    (tools / "cp").chmod(0o755)
    shared, local = keeper_dir / "shared", keeper_dir / "local"
    (shared / "slurm" / "cleanup").mkdir(parents=True)
    (shared / "provenance").mkdir()
    record = json.dumps({"pid": 1, "role": "launcher", "patches": ["x"] * 200}, indent=2)
    (shared / "provenance" / "a0-node-1.json").write_text(record)  # the process wrote it there itself
    (shared / "status.json").write_text(json.dumps({"phase": "verify", "code": 0, "message": "m" * 200}))
    (local / "provenance").mkdir(parents=True)
    (local / "provenance" / "a0-node-1.json").write_text(record)
    (local / "status.json").write_text(json.dumps({"phase": "entrypoint", "code": 0, "message": "m" * 200}))
    mark = tmp_path / "cut"
    env = {**os.environ, "FORGE_ATTEMPT": "0", "PATH": f"{tools}:{os.environ['PATH']}", "CUT_AT": str(cut_at),
           "CUT_COUNT": str(tmp_path / "count"), "CUT_MARK": str(mark)}
    keeper = subprocess.Popen(["bash", "-c", KEEPER, "forge-keep", str(shared), str(local), COLLECT], env=env, start_new_session=True)
    try:
        wait_for(lambda: children(keeper.pid), "the keeper's sleep started", timeout=10, interval=0.02)
        os.kill(keeper.pid, signal.SIGTERM)  # the end of the job: the keeper collects ...
        wait_for(mark.exists, "the copy was cut", timeout=10, interval=0.02)
        os.killpg(keeper.pid, signal.SIGKILL)  # ... and Slurm's SIGKILL cuts that copy short
        keeper.wait(timeout=10)
    finally:
        if keeper.poll() is None:
            os.killpg(keeper.pid, signal.SIGKILL)
    assert json.loads((shared / "provenance" / "a0-node-1.json").read_text())["role"] == "launcher"
    for status in (shared / "status.json", shared / "slurm" / f"status-{os.uname().nodename.split('.')[0]}.json"):
        if status.exists():
            assert json.loads(status.read_text())["code"] == 0, status
    visible = [p.name for p in (shared / "provenance").iterdir() if not p.name.startswith(".")]
    assert visible == ["a0-node-1.json"]
