"""A cancelled job leaves no code directory: the node entry removes it on SIGTERM and SIGHUP
(a cancel, a closed terminal) and on Ctrl-C, and still ends by that signal; what SIGKILL
leaves behind, the next launch on the node sweeps (this user's, this node's, dead pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from launch_jobs import demo_plugin

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
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    job = builder.job(plugins=[demo_plugin()], trainer=SLEEPER)
    proc = start(job, node_tmp)
    try:
        wait_ready(proc, node_tmp)
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    if signum == signal.SIGINT:
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
