"""The training entrypoint: in-process forms, child processes, signals, sys.path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from launch_jobs import deferred_plugin, demo_plugin

NOT_INSTALLED = (
    "plugin  : alice/late-offset@1.0.0 not installed (deferred; the training entrypoint never called "
    "install_deferred('late-offset'))"
)

SHOW = """
import json, sys
from starforge.cluster import process_job as process
job = process.current_job()
print("ROLE", job.role if job else None)
print("WRITE_THROUGH", sys.stdout.write_through)
print("DONT_WRITE_BYTECODE", sys.dont_write_bytecode)
print("PATH", json.dumps(sys.path))
"""


def lines_with(result, prefix: str) -> list:
    return [line[len(prefix):] for line in result.stdout.splitlines() if line.startswith(prefix)]


def test_python_with_interpreter_flags_runs_in_process_and_strict_deferred_still_fails(builder):
    job = builder.job(plugins=[deferred_plugin()], recipe={"app/show.py": SHOW}, strict_deferred=True)
    result = job.launch("python3", "-u", "-B", "-W", "ignore::DeprecationWarning", "-m", "app.show")
    assert result.returncode == 14, result.stderr
    assert NOT_INSTALLED in result.stderr
    assert lines_with(result, "ROLE ") == ["launcher"]  # ran in the launcher, patches and all
    assert lines_with(result, "WRITE_THROUGH ") == ["True"]
    assert lines_with(result, "DONT_WRITE_BYTECODE ") == ["True"]
    assert job.status()["code"] == 14


def test_flags_that_need_their_own_interpreter_run_a_child(builder):
    job = builder.job(plugins=[demo_plugin()], recipe={"app/show.py": SHOW + "from app import algo\nprint('compute', algo.compute(1))\n"})
    result = job.launch(sys.executable, "-O", "-m", "app.show")
    assert result.returncode == 0, result.stderr
    assert lines_with(result, "ROLE ") == ["worker"]  # bootstrapped by the job's sitecustomize
    assert lines_with(result, "compute ") == ["20"]  # (1 + 1) * 10, patched in the child


def test_shell_entrypoint_exit_code_reaches_status_json(builder):
    job = builder.job(plugins=[demo_plugin()])
    result = job.launch("/bin/sh", "-c", "exit 5")
    assert result.returncode == 5, result.stderr
    status = job.status()
    assert (status["phase"], status["code"], status["plugin"]) == ("entrypoint", 5, None)


def test_strict_deferred_is_checked_after_a_shell_entrypoint(builder):
    job = builder.job(plugins=[deferred_plugin()], strict_deferred=True)
    result = job.launch("/bin/sh", "-c", "true")
    assert result.returncode == 14, result.stderr
    assert NOT_INSTALLED in result.stderr
    assert job.status()["code"] == 14


def test_deferred_installed_by_a_child_python_counts(builder):
    late = """
    from starforge import plugins
    from app import algo
    plugins.install_deferred("late-offset", offset=100)
    print("compute", algo.compute(1))
    """
    job = builder.job(plugins=[deferred_plugin()], recipe={"app/late.py": late}, strict_deferred=True)
    result = job.launch("/bin/sh", "-c", f"'{sys.executable}' -m app.late")
    assert result.returncode == 0, result.stderr
    assert "compute 102" in result.stdout  # (1 + 1) + 100
    assert "not installed" not in result.stderr
    assert job.status()["code"] == 0


def test_missing_command_is_127(builder):
    job = builder.job(plugins=[demo_plugin()])
    result = job.launch("no-such-command-anywhere")
    assert result.returncode == 127
    assert "error: cannot run 'no-such-command-anywhere'" in result.stderr
    assert (job.status()["phase"], job.status()["code"]) == ("entrypoint", 127)


def _launch_and_terminate(job, *cmd):
    argv = [sys.executable, "-m", "starforge.launch", "--spec", str(job.spec_path), "--", *cmd]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    env["FORGE_HOME"] = str(job.dir.parent / "forge-home")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert job.status()["code"] is None  # running
        proc.send_signal(signal.SIGTERM)  # to the launcher only, not its process group
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def test_sigterm_to_the_launcher_reaches_the_child(builder):
    job = builder.job(plugins=[demo_plugin()])
    script = "trap 'echo child got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
    code, out, err = _launch_and_terminate(job, "/bin/sh", "-c", script)
    assert code == 7, err
    assert "child got TERM" in out
    assert job.status()["code"] == 7


def test_child_killed_by_a_signal_exits_128_plus_n(builder):
    job = builder.job(plugins=[demo_plugin()])
    code, out, err = _launch_and_terminate(job, sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)")
    assert code == 128 + signal.SIGTERM, err
    assert job.status()["code"] == 128 + signal.SIGTERM


def _child_path(module_or_script: list) -> str:
    # The same program started by `python` itself in recipe/ with the job's environment.
    return (
        "import json, subprocess, sys\n"
        f"out = subprocess.run([sys.executable, *{module_or_script!r}, 'child'], capture_output=True, text=True).stdout\n"
        "print('CHILD', [l[5:] for l in out.splitlines() if l.startswith('PATH ')][0])\n"
    )


def test_trainer_sys_path_is_what_python_dash_m_in_recipe_gives(builder, tmp_path):
    show = SHOW + "import sys\nif sys.argv[1:] != ['child']:\n" + "".join(
        "    " + line + "\n" for line in _child_path(["-m", "app.show"]).splitlines())
    job = builder.job(plugins=[demo_plugin()], recipe={"app/show.py": show})
    result = job.launch("python", "-m", "app.show")
    assert result.returncode == 0, result.stderr
    (path,) = [json.loads(p) for p in lines_with(result, "PATH ")]
    (child,) = [json.loads(p) for p in lines_with(result, "CHILD ")]
    recipe = str(job.dir / "recipe")
    assert path[0] == recipe
    assert path == child
    # The launcher was started in tmp_path (`python -m starforge.launch`): not on the path.
    assert str(tmp_path) not in path


def test_trainer_script_sys_path_starts_with_the_script_directory(builder, tmp_path):
    show = SHOW + "import sys\nif sys.argv[1:] != ['child']:\n" + "".join(
        "    " + line + "\n" for line in _child_path(["app/show.py"]).splitlines())
    job = builder.job(plugins=[demo_plugin()], recipe={"app/show.py": show})
    result = job.launch("python", "app/show.py")
    assert result.returncode == 0, result.stderr
    (path,) = [json.loads(p) for p in lines_with(result, "PATH ")]
    (child,) = [json.loads(p) for p in lines_with(result, "CHILD ")]
    assert path[0] == str(job.dir / "recipe" / "app")
    assert path == child
    assert str(tmp_path) not in path
