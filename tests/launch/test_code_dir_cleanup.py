"""A cancelled job leaves no code directory: the node entry removes it on SIGTERM and SIGHUP
(a cancel, a closed terminal) and on Ctrl-C, and still ends by that signal; what SIGKILL
leaves behind, the next launch on the node sweeps (this user's, this node's, dead pid)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from launch_jobs import demo_plugin
from support.processes import kernel_signal_state

from starforge.cluster import runtime_zip
from starforge.cluster.codedir import CODE_KEY, node_tag, sweep_dead_code_dirs

ZIP = Path(".forge-runtime") / "starforge-runtime.zip"

SLEEPER = """
import sys, time
print("ready", flush=True)
time.sleep(120)
"""


def start(job, node_tmp: Path) -> subprocess.Popen:
    """The node entry of *job*'s runtime zip, as the backends start it, with TMPDIR=*node_tmp*."""
    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    runtime_zip.write_runtime_zip(str(zip_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env.update(FORGE_HOME=str(job.dir.parent / "forge-home"), TMPDIR=str(node_tmp))
    return subprocess.Popen([sys.executable, str(zip_path), "--spec", str(job.spec_path)], env=env, cwd=str(job.dir.parent),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def code_dirs(node_tmp: Path) -> list:
    return sorted(p.name for p in node_tmp.iterdir() if p.name.startswith("forge-code-"))


def wait_ready(proc: subprocess.Popen, node_tmp: Path) -> None:
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.poll() is not None else "")
    assert len(code_dirs(node_tmp)) == 1  # the entry made the job's code directory, and the trainer runs


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signalled_job_removes_its_code_directory(builder, tmp_path, signum):
    """The job inherits this test run's dispositions (docs/launcher.md, "Signals"): a signal
    the run was started with ignored (SIGHUP under nohup) is ignored by the job too, which
    then ends by the SIGTERM sent after it and still removes its code directory."""
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    job = builder.job(plugins=[demo_plugin()], trainer=SLEEPER)
    ignored, blocked = kernel_signal_state(signum)  # what the job inherits, set in Python or not
    assert not blocked, f"signal {signum} is blocked in this test process: the job would inherit it blocked"
    proc = start(job, node_tmp)
    try:
        wait_ready(proc, node_tmp)
        proc.send_signal(signum)
        if ignored:  # discarded when sent: the SIGTERM after it is what ends the job
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    if ignored:
        assert code == -signal.SIGTERM, proc.stderr.read()
    elif signum == signal.SIGINT:
        assert code == 130, proc.stderr.read()  # KeyboardInterrupt in the trainer: the launcher's 130
    else:
        assert code == -signum  # still ended by the signal, as a cancelled job always was
    assert code_dirs(node_tmp) == []


def test_what_sigkill_leaves_the_next_launch_sweeps(builder, tmp_path):
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    job = builder.job(plugins=[demo_plugin()], trainer=SLEEPER)
    proc = start(job, node_tmp)
    try:
        wait_ready(proc, node_tmp)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    [left] = code_dirs(node_tmp)
    # beside it: one whose process lives (this test's), one of another node: neither is swept
    for name, key in (("forge-code-alive", {"pid": os.getpid(), "node": node_tag()}),
                      ("forge-code-othernode", {"pid": 2 ** 22 + 1, "node": "elsewhere+1"})):
        (node_tmp / name).mkdir(mode=0o700)
        (node_tmp / name / CODE_KEY).write_text(json.dumps({"schema": "forge/code-dir/v1", **key}))
    again = start(builder.job(plugins=[demo_plugin()], trainer="print('ready', flush=True)\n"), node_tmp)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and out.startswith("ready"), err
    assert left not in code_dirs(node_tmp)
    assert code_dirs(node_tmp) == ["forge-code-alive", "forge-code-othernode"]


def test_the_sweep_leaves_directories_without_a_readable_key(tmp_path):
    (tmp_path / "forge-code-nokey").mkdir()
    (tmp_path / "forge-code-garbled").mkdir()
    (tmp_path / "forge-code-garbled" / CODE_KEY).write_text("{not json")
    assert sweep_dead_code_dirs(str(tmp_path)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forge-code-garbled", "forge-code-nokey"]


# A process a backend starts in its own unpacked copy of the job directory (FORGE_JOB_DIR
# relative, as Ray starts a worker on a host where no node entry ran): it reports where its
# runtime came from, then stays up until told, so two of them overlap.
WORKER_PROBE = """
import os, sys
import starforge
from app import algo
print("worker", algo.compute(1), starforge.__file__, flush=True)
sys.stdin.readline()
"""


def start_worker(job, node_tmp: Path) -> subprocess.Popen:
    from starforge.launch import bootstrap_env

    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    runtime_zip.write_runtime_zip(str(zip_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env.update(bootstrap_env(job.dir, relative=True), FORGE_HOME=str(job.dir.parent / "forge-home"), TMPDIR=str(node_tmp))
    return subprocess.Popen([sys.executable, "-c", WORKER_PROBE], env=env, cwd=str(job.dir), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_workers_on_a_node_without_an_entry_share_one_code_directory_that_a_later_launch_sweeps(builder, tmp_path):
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    job = builder.job(plugins=[demo_plugin()], trainer=SLEEPER)
    first = start_worker(job, node_tmp)
    try:
        line = first.stdout.readline()
        [made] = code_dirs(node_tmp)
        code = node_tmp / made
        # the first worker made it (this node's pointer names it) and runs the code compiled there
        assert line.startswith("worker 20 ") and line.split()[2] == str(code / "runtime-code.zip" / "starforge" / "__init__.pyc"), (
            line, first.stderr.read() if first.poll() is not None else "")
        assert stat.S_IMODE(code.stat().st_mode) == 0o700 and code.stat().st_uid == os.getuid()
        [pointer] = [p for p in (job.dir / ".forge-runtime").iterdir() if p.name.startswith("code-dir@")]
        assert pointer.read_text() == str(code)
        second = start_worker(job, node_tmp)
        try:
            assert second.stdout.readline().split()[2] == line.split()[2]  # the same directory
            assert code_dirs(node_tmp) == [made]
            first.communicate("\n", timeout=60)  # the maker ends; the second worker still uses it
            assert sweep_dead_code_dirs(str(node_tmp)) == 0 and code_dirs(node_tmp) == [made]
        finally:
            second.communicate("\n", timeout=60)
    finally:
        first.kill()
    # Every process that used it has ended, and nothing removes it at once (no process on
    # such a node lives as long as the job); the next launch on the node sweeps it. Beside it,
    # what the sweep must leave: another user's directory and a link to one of this user's.
    other = node_tmp / "forge-code-otheruser"
    other.mkdir(mode=0o700)
    (other / CODE_KEY).write_text(json.dumps({"schema": "forge/code-dir/v1", "pid": 2 ** 22 + 1, "node": node_tag()}))
    os.chown(other, 65534, 65534)
    target = tmp_path / "linked"
    target.mkdir(mode=0o700)
    (target / CODE_KEY).write_text(json.dumps({"schema": "forge/code-dir/v1", "pid": 2 ** 22 + 1, "node": node_tag()}))
    (node_tmp / "forge-code-link").symlink_to(target)
    try:
        again = start(builder.job(plugins=[demo_plugin()], trainer="print('ready', flush=True)\n"), node_tmp)
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0 and out.startswith("ready"), err
        assert code_dirs(node_tmp) == ["forge-code-link", "forge-code-otheruser"]
        assert (target / CODE_KEY).exists()
    finally:
        shutil.rmtree(other)
        (node_tmp / "forge-code-link").unlink()


def test_a_worker_where_the_code_directory_cannot_be_made_safely_compiles_from_the_zip(builder, tmp_path):
    node_tmp = tmp_path / "shared-tmp"
    node_tmp.mkdir()
    node_tmp.chmod(0o777)  # writable by all without the sticky bit, as Ray's session directory is
    job = builder.job(plugins=[demo_plugin()], trainer=SLEEPER)
    worker = start_worker(job, node_tmp)
    out, err = worker.communicate("\n", timeout=60)
    assert worker.returncode == 0, err
    assert out.split()[:3] == ["worker", "20", str(job.dir / ZIP / "starforge" / "__init__.py")], out
    assert "makes no code directory on this node" in err and "without the sticky bit" in err, err
    assert list(node_tmp.iterdir()) == []
