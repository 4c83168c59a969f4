"""The in-process ``forge`` of the tests (support.cli) reports what a ``forge`` process reports,
and leaves this process as it found it, also after commands that change the process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from support.cli import check_restored, dumpable, forge, forge_process, process_state, restore, unshielded
from support.experiment import Project


@pytest.mark.parametrize("args", [
    ["--version"],
    ["plugin", "checkk"],                                  # usage error: exit 2, error and hint lines
    ["-q", "plugin", "check", "no-such-dir"],              # -q: sets FORGE_VERBOSITY in the process
    ["plugin", "check", "no-such-dir", "--debug"],         # --debug: sets FORGE_DEBUG, prints a traceback
    ["-v", "jobs", "list"],
    ["jobs", "show", "nope", "--json"],
    ["help", "trust"],
])
def test_in_process_forge_reports_what_a_forge_process_reports(args, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(FORGE_HOME=str(tmp_path / "home"), NO_COLOR="1")
    before = process_state()
    inside = forge(*args, env=env, cwd=tmp_path)
    assert check_restored(before, process_state()) == []
    outside = forge_process(*args, env=env, cwd=tmp_path)
    assert (inside.returncode, inside.stdout, inside.stderr) == (outside.returncode, outside.stdout, outside.stderr)


def test_the_state_check_sees_what_the_credential_shield_changes_and_restore_puts_it_back(monkeypatch):
    from starforge.state.credentials import shield_credentials

    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "push-S3cr3t")
    with unshielded():
        before = process_state()
        assert before["dumpable"] in (1, None) and before["shield_mark"] is False
        try:
            shield_credentials()
            os.umask(0o077)
            # a change whatever this run was started with (SIGHUP is ignored under nohup)
            started = signal.getsignal(signal.SIGHUP)
            signal.signal(signal.SIGHUP, signal.SIG_DFL if started is signal.SIG_IGN else signal.SIG_IGN)
            changed = check_restored(before, process_state())
        finally:
            restore(before)
        expected = {"c_environ", "shield_mark", "umask", "signals"} | ({"dumpable"} if before["dumpable"] is not None else set())
        assert set(changed) == expected
        assert check_restored(before, process_state()) == []


def child_sees(name: str) -> str | None:
    """What a child started without ``env=`` (C's environment) sees of *name*."""
    out = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({name!r}))"], capture_output=True,
                         text=True, check=True).stdout.strip()
    return None if out == "None" else out


def test_a_local_job_submitted_in_process_leaves_the_process_as_it_found_it(tmp_path, monkeypatch):
    # forge submit shields its credentials (non-dumpable, C environment cut), a local job's
    # supervisor is a child of this process; the next test must see none of it.
    project = Project(tmp_path)
    project.env["FORGE_REGISTRY_PASSWORD"] = "push-S3cr3t"
    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "push-S3cr3t")
    project.publish(project.plugin("opsd-patch", params={"opsd.scale": ("float", 1.0)}))
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock")
    from starforge.state import credentials

    with unshielded():  # as a fresh forge process starts
        before = process_state()
        run = project.forge("submit", "--set", "opsd.scale=0.5")
        assert "opsd-patch 1.2.0 installed opsd.scale=0.5" in run.stdout  # the job ran, its output relayed
        assert check_restored(before, process_state()) == []
        assert child_sees("FORGE_REGISTRY_PASSWORD") == "push-S3cr3t"
        if before["dumpable"] is not None:
            assert dumpable() == 1
        assert getattr(credentials, "_shielded") is False  # the next in-process submit shields again
    job = json.loads(project.forge("jobs", "list", "--json").stdout)[-1]
    assert job["status"] == "succeeded"


def test_output_of_a_child_process_forge_starts_is_captured(tmp_path):
    # forge prep hands the plugin's prints to its own stderr descriptor: fd-level capture
    root = tmp_path / "chatty-prep"
    root.mkdir()
    (root / "plugin.yaml").write_text("schema: forge/plugin/v1\nname: chatty-prep\nversion: 1.0.0\nkind: data-prep\n"
                                      "entrypoint: chatty_prep:install\n")
    (root / "chatty_prep.py").write_text("def install(params):\n    print('from the child')\n    return lambda r: r\n")
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["FORGE_HOME"] = str(tmp_path / "home")
    done = forge("prep", root, "-i", tmp_path / "in.jsonl", "-o", tmp_path / "out.jsonl", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "from the child" in done.stderr and "from the child" not in done.stdout


def test_temporary_files_go_to_the_commands_tmpdir_as_in_a_process(tmp_path):
    # forge plan stages the job in a temporary folder and removes it: under the TMPDIR the
    # command was given (not the test process's cached one), and nothing is left there
    import tempfile

    project = Project(tmp_path / "world")
    project.publish(project.plugin("opsd-patch"))
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    project.env["TMPDIR"] = str(scratch)
    seen = []
    before = tempfile.tempdir
    original = tempfile.mkdtemp

    def recording(*args, **kwargs):
        made = original(*args, **kwargs)
        seen.append(made)
        return made

    tempfile.mkdtemp = recording
    try:
        project.forge("plan")
    finally:
        tempfile.mkdtemp = original
    assert any(path.startswith(str(scratch) + os.sep) for path in seen), seen
    assert list(scratch.iterdir()) == [] and tempfile.tempdir == before
