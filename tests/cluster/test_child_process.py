"""``run_child``: an entrypoint run as a child process, its exit code and the launcher's signals passed on."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap

from starforge.cluster.child_process import run_child


def test_the_childs_exit_code_is_returned_without_a_failure(tmp_path):
    assert run_child(["/bin/sh", "-c", "exit 0"]) == (0, None)
    assert run_child(["/bin/sh", "-c", "exit 42"]) == (42, None)


def test_the_child_gets_the_launchers_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_CHILD_PROBE", "value seen")
    out = tmp_path / "out"
    code, failure = run_child(["/bin/sh", "-c", f'printf %s "$FORGE_CHILD_PROBE" > {out}'])
    assert (code, failure) == (0, None)
    assert out.read_text() == "value seen"


def test_a_child_ended_by_a_signal_returns_128_plus_the_signal():
    code, failure = run_child(["/bin/sh", "-c", "kill -KILL $$"])
    assert (code, failure) == (128 + signal.SIGKILL, None)


def test_a_missing_program_is_127_with_an_entrypoint_failure(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    code, failure = run_child([str(tmp_path / "no-such-trainer"), "--lr", "1"])
    assert {s: signal.getsignal(s) for s in before} == before  # the launcher's handlers are back
    assert code == 127
    assert (failure.phase, failure.code, failure.plugin) == ("entrypoint", 127, None)
    assert failure.message.startswith(f"cannot run '{tmp_path / 'no-such-trainer'}': ")


def test_a_program_that_cannot_be_executed_is_126(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(script, stat.S_IRUSR | stat.S_IWUSR)  # no execute bit, even for root
    code, failure = run_child([str(script)])
    assert code == 126
    assert failure.code == 126 and failure.phase == "entrypoint"
    assert "Permission denied" in failure.message


DRIVER = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from starforge.cluster.child_process import run_child

    ready = sys.argv[1]
    if sys.argv[2] == "ignore-hup":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    child = ("trap 'echo child got TERM; exit 42' TERM; trap 'echo child got HUP; exit 43' HUP; "
             "touch " + ready + "; while :; do sleep 0.05; done")

    def send():
        while not os.path.exists(ready):
            time.sleep(0.02)
        for name in sys.argv[3:]:
            os.kill(os.getpid(), getattr(signal, name))

    threading.Thread(target=send, daemon=True).start()
    code, failure = run_child(["/bin/sh", "-c", child])
    print("code", code, failure)
    names = {signal.SIG_DFL: "default", signal.SIG_IGN: "ignored", signal.default_int_handler: "python"}
    print("handlers", *(names.get(signal.getsignal(s), "other") for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)))
    """
)


def drive(tmp_path, mode: str, *signals: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "ready"), mode, *signals],
                          capture_output=True, text=True, timeout=60)


def started_with(signum) -> str:
    """The disposition the driver starts with: this process's own, SIG_IGN surviving the
    driver's start (under nohup, SIGHUP), a handler of this process becoming the default."""
    return "ignored" if signal.getsignal(signum) is signal.SIG_IGN else "default"


def test_sigterm_sent_to_the_launcher_reaches_the_child_and_handlers_are_restored(tmp_path):
    proc = drive(tmp_path, "default", "SIGTERM")
    assert proc.returncode == 0, proc.stderr
    # SIGINT: Python's own handler (tests/conftest.py gives the run one); SIGHUP as this run was started
    handlers = f"handlers {started_with(signal.SIGTERM)} python {started_with(signal.SIGHUP)}"
    assert proc.stdout.splitlines() == ["child got TERM", "code 42 None", handlers]


def test_a_nohup_launcher_does_not_pass_sighup_on(tmp_path):
    proc = drive(tmp_path, "ignore-hup", "SIGHUP", "SIGTERM")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["child got TERM", "code 42 None", "handlers default python ignored"]
