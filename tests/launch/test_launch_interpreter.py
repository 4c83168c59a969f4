"""The job's Python (SPEC §14): resolution from the JobSpec, the entrypoint and shebangs,
and the node entry's refusal of missing or old interpreters."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from starforge.cluster import interpreter
from starforge.cluster.interpreter import (
    JobPythonError,
    check_job_python,
    entrypoint_python,
    resolve_job_python,
    runs_in_job_python,
    same_interpreter,
    shebang_python,
)
from starforge.cluster.node_entry import ENTRY_MODULES

SOURCE = Path(interpreter.__file__)


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A venv-shaped folder whose bin/python is a symlink to this interpreter."""
    bin_dir = tmp_path / "trainenv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    return bin_dir


@pytest.mark.parametrize("name", ("node_entry.py",) + ENTRY_MODULES)
def test_entry_parses_on_old_interpreters(name: str):
    # The entry (the zip's stub and every module it runs) runs under any python3 of the
    # node: a 3.6 interpreter must get our exit 11, not a SyntaxError from f-strings,
    # annotations or the walrus.
    source = SOURCE.parent / name
    tree = ast.parse(source.read_text(), feature_version=(3, 4))
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.JoinedStr, ast.NamedExpr, ast.AnnAssign)), ast.dump(node)[:80]
        if isinstance(node, ast.arg):
            assert node.annotation is None, node.arg
        if isinstance(node, ast.ImportFrom):
            assert node.module != "__future__"


def test_spec_python_wins_and_is_not_realpathed(venv: Path, tmp_path: Path):
    got = resolve_job_python(str(venv / "python"), ["python3", "-m", "x"], str(tmp_path), "/usr/bin/python3")
    assert got == (str(venv / "python"), "spec")
    assert os.path.realpath(got[0]) != got[0]  # the venv's python, not its base interpreter


def test_spec_python_relative_to_recipe_and_expands_variables(tmp_path: Path, monkeypatch):
    assert resolve_job_python("../env/bin/python", [], "/job/recipe", "d") == ("/job/env/bin/python", "spec")
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda/envs/rl")
    assert resolve_job_python("$CONDA_PREFIX/bin/python", [], "/r", "d") == ("/opt/conda/envs/rl/bin/python", "spec")


def test_entrypoint_naming_an_interpreter(venv: Path, tmp_path: Path):
    py = str(venv / "python")
    assert entrypoint_python([py, "train.py"], str(tmp_path)) == py
    assert entrypoint_python(["env", "-u", "X", "A=1", py, "-m", "t"], str(tmp_path)) == py
    # a bare python names no interpreter in particular: it is the job's Python
    assert entrypoint_python(["python3", "t.py"], str(tmp_path)) is None
    assert resolve_job_python(None, ["python", "-m", "t"], str(tmp_path), "/usr/bin/python3") == ("/usr/bin/python3", "default")
    assert entrypoint_python(["./env/bin/python", "t.py"], str(tmp_path)) == str(tmp_path / "env/bin/python")
    # not an interpreter: a shell script, a missing command
    _script(tmp_path / "bin" / "run.sh", "#!/bin/sh\necho hi\n")
    assert entrypoint_python(["run.sh"], str(tmp_path), path=str(tmp_path / "bin")) is None
    assert entrypoint_python(["no-such-command"], str(tmp_path), path=str(tmp_path / "bin")) is None
    assert resolve_job_python(None, ["bash", "x.sh"], str(tmp_path), "/usr/bin/python3") == ("/usr/bin/python3", "default")


def test_console_script_shebangs(venv: Path, tmp_path: Path):
    py = str(venv / "python")
    bin_dir = tmp_path / "bin"
    # what pip writes for a short path
    _script(bin_dir / "torchrun", f"#!{py}\nimport sys\n")
    assert entrypoint_python(["torchrun", "--nproc-per-node=2", "t.py"], str(tmp_path), path=str(bin_dir)) == py
    # #!/usr/bin/env python3 -> PATH lookup
    _script(venv / "python3", "#!/bin/sh\n")
    _script(bin_dir / "accelerate", "#!/usr/bin/env python3\n")
    assert shebang_python(str(bin_dir / "accelerate"), path=str(venv)) == str(venv / "python3")
    assert shebang_python(str(bin_dir / "accelerate"), path=str(tmp_path / "empty")) is None
    # the /bin/sh + exec wrapper pip and conda write for long paths
    long_py = "/opt/" + "x" * 140 + "/bin/python3.11"
    _script(bin_dir / "deepspeed", f"#!/bin/sh\n'''exec' {long_py} \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert shebang_python(str(bin_dir / "deepspeed")) == long_py
    # relocatable: the interpreter beside the script's real location
    reloc = _script(venv / "reloc-tool", "#!/bin/sh\n'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n' '''\n")
    assert shebang_python(str(reloc)) == str(venv / "python")
    # a relative shebang is relative to the script's folder
    _script(venv / "rel-tool", "#!python\n")
    assert shebang_python(str(venv / "rel-tool")) == str(venv / "python")
    # a non-Python shebang
    _script(bin_dir / "tool", "#!/bin/bash\n")
    assert shebang_python(str(bin_dir / "tool")) is None


def test_which_python_entrypoints_run_in_the_job_python(venv: Path, tmp_path: Path):
    job_python = str(venv / "python")
    assert runs_in_job_python(["python", "-m", "t"], str(tmp_path), job_python)
    assert runs_in_job_python([job_python, "t.py"], str(tmp_path), job_python)
    assert not runs_in_job_python([os.path.realpath(sys.executable), "t.py"], str(tmp_path), job_python)
    assert not runs_in_job_python(["torchrun", "t.py"], str(tmp_path), job_python)


def test_same_interpreter_keeps_venvs_apart(venv: Path):
    assert same_interpreter(sys.executable, sys.executable)
    assert not same_interpreter(str(venv / "python"), os.path.realpath(sys.executable))


def test_missing_and_old_interpreters_are_refused(tmp_path: Path):
    with pytest.raises(JobPythonError, match="does not exist on this node"):
        check_job_python(str(tmp_path / "nope" / "python"))
    with pytest.raises(JobPythonError, match=r"\$TRL_PYTHON names an environment variable not set on this node"):
        check_job_python(resolve_job_python("$TRL_PYTHON", [], "/r", "d")[0])
    old = _script(tmp_path / "old" / "python3", "#!/bin/sh\nprintf 3.8\n")
    with pytest.raises(JobPythonError, match=r"is 3\.8; the StarForge launcher needs Python 3\.10"):
        check_job_python(str(old))
    assert check_job_python(sys.executable) == tuple(sys.version_info[:2])


def test_node_entry_exits_11_with_status_for_an_old_python(tmp_path: Path):
    old = _script(tmp_path / "old" / "python3", "#!/bin/sh\nprintf 3.8\n")
    job = tmp_path / "job"
    (job / "recipe").mkdir(parents=True)
    (job / "jobspec.json").write_text(json.dumps({"python": str(old), "entrypoint": ["python", "-m", "t"]}))
    proc = subprocess.run(
        [sys.executable, str(SOURCE), "--spec", str(job / "jobspec.json")], capture_output=True, text=True
    )
    assert proc.returncode == 11
    assert "is 3.8; the StarForge launcher needs Python 3.10" in proc.stderr
    status = json.loads((job / "status.json").read_text())
    assert status["phase"] == "requires" and status["code"] == 11 and status["plugin"] is None


def test_node_entry_refuses_an_unreadable_spec(tmp_path: Path):
    (tmp_path / "jobspec.json").write_text("[1]")
    proc = subprocess.run([sys.executable, str(SOURCE), "--spec", str(tmp_path / "jobspec.json")], capture_output=True, text=True)
    assert proc.returncode == 2 and "cannot read the JobSpec" in proc.stderr
    proc = subprocess.run([sys.executable, str(SOURCE)], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr


# -- proving the job's Python (SPEC §9): CPython >= 3.10, not what answers a probe ------------


def _entry_job(tmp_path: Path, python: str | None, entrypoint=("python", "-c", "print('TRAINED')")) -> Path:
    """A job with a runtime zip the node entry runs from, and a plugin-less spec."""
    from starforge.cluster import runtime_zip
    from starforge.cluster.jobspec import SCHEMA, JobSpec, write_spec

    job = tmp_path / "job"
    (job / "recipe").mkdir(parents=True)
    (job / "forge_plugins").mkdir()
    (job / ".forge-runtime").mkdir()
    runtime_zip.write_runtime_zip(str(job / ".forge-runtime" / "starforge-runtime.zip"))
    data = {"schema": SCHEMA, "id": "proof-1", "name": "proof", "created": "2026-11-29T12:00:00Z",
            "entrypoint": list(entrypoint), "hyperparams": {}, "plugins": [], "recipe": {"plugins": []},
            "core_version": "0.1.0", "backend": "local", "extra": {}}  # fmt: skip
    if python:
        data["python"] = python
    write_spec(JobSpec.from_dict(data), job / "jobspec.json")
    return job


def _run_entry(job: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(job / ".forge-runtime" / "starforge-runtime.zip"), "--spec", str(job / "jobspec.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )


def test_a_python_that_answers_the_probe_but_is_not_cpython_is_exit_11(tmp_path: Path):
    # It answers "3.11" to the version probe, and instead of the launcher it "trains" and
    # exits 0: before, the job succeeded with no plugin checked. It never confirms the
    # entry's nonce, so the job is an unmet requirement.
    marker = tmp_path / "impostor-ran"
    impostor = _script(tmp_path / "fake" / "python3", f"#!/bin/sh\ncase \"$*\" in *version_info*) printf 3.11; exit 0;; esac\ntouch {marker}\nexit 0\n")
    job = _entry_job(tmp_path, str(impostor))
    proc = _run_entry(job)
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert f"the job's Python {impostor} did not prove to be CPython 3.10 or newer running the StarForge launcher" in proc.stderr
    assert marker.exists()  # it did run; what changed is that the job does not pass as launched
    status = json.loads((job / "status.json").read_text())
    assert (status["phase"], status["code"]) == ("requires", 11)


def test_a_real_cpython_elsewhere_confirms_and_runs_the_launcher(tmp_path: Path, venv: Path):
    job = _entry_job(tmp_path, str(venv / "python"))
    proc = _run_entry(job)
    assert proc.returncode == 0, proc.stderr
    assert "TRAINED" in proc.stdout
    assert f"python  : {venv / 'python'}" in proc.stderr
    assert "FORGE_PYTHON_PROOF" not in json.dumps(dict(os.environ))  # (nothing leaked into this process)


def test_the_nonce_never_reaches_the_trainer(tmp_path: Path, venv: Path):
    job = _entry_job(tmp_path, str(venv / "python"),
                     ("python", "-c", "import os; print('PROOF', os.environ.get('FORGE_PYTHON_PROOF'))"))
    proc = _run_entry(job)
    assert proc.returncode == 0, proc.stderr
    assert "PROOF None" in proc.stdout


def test_the_entrys_own_interpreter_is_asked_without_starting_one(tmp_path: Path, monkeypatch):
    # The job's Python is the entry's own: its own sys.implementation decides, no process starts.
    import types

    job = _entry_job(tmp_path, None)
    from starforge.cluster import binding  # noqa: F401  (imported before the interpreter's name changes)

    monkeypatch.setattr(sys, "implementation", types.SimpleNamespace(**{**vars(sys.implementation), "name": "pypy"}))
    started = []
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: started.append(a) or (_ for _ in ()).throw(AssertionError("started")))
    assert interpreter.main(["--spec", str(job / "jobspec.json")]) == 11
    assert started == []
    status = json.loads((job / "status.json").read_text())
    assert status["code"] == 11 and "is pypy" in status["message"] and "needs CPython 3.10" in status["message"]


# -- the job directory and .forge-runtime are never followed through a symlink ----------------


@pytest.mark.parametrize("linked", [".forge-runtime", "job"])
def test_a_symlinked_runtime_or_job_directory_is_refused(tmp_path: Path, linked: str):
    job = _entry_job(tmp_path / "real", None)
    if linked == "job":
        link = tmp_path / "job-link"
        link.symlink_to(job)
        job = link
    else:
        elsewhere = tmp_path / "elsewhere"
        (job / ".forge-runtime").rename(elsewhere)
        (job / ".forge-runtime").symlink_to(elsewhere)
    for argv in ([sys.executable, str(job / ".forge-runtime" / "starforge-runtime.zip")], [sys.executable, "-m", "starforge.launch"]):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        proc = subprocess.run([*argv, "--spec", str(job / "jobspec.json")], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 10, proc.stderr
        assert "is a symbolic link; a job directory and its runtime are never followed through one" in proc.stderr
        assert "TRAINED" not in proc.stdout


def test_a_world_writable_runtime_directory_is_tightened_and_anothers_refused(tmp_path: Path):
    from starforge.cluster.environment import prepare_runtime

    job = _entry_job(tmp_path, None)
    (job / ".forge-runtime").chmod(0o777)
    (job / ".forge-runtime" / "bootstrap").mkdir(mode=0o777)
    (job / ".forge-runtime" / "bootstrap").chmod(0o777)
    prepare_runtime(str(job), {})
    assert (job / ".forge-runtime").stat().st_mode & 0o777 == 0o755
    assert (job / ".forge-runtime" / "bootstrap").stat().st_mode & 0o777 == 0o755
    if os.geteuid() == 0:  # another user's directory is not ours to use
        os.chown(job / ".forge-runtime", 65534, 65534)
        with pytest.raises(OSError, match="belongs to another user"):
            prepare_runtime(str(job), {})


def test_the_entry_passes_sigterm_on_to_the_proven_launcher(tmp_path):
    """Where the job's Python is another interpreter the entry stays as the launcher's
    parent: a SIGTERM to the entry (Slurm's, a user's kill) reaches the launcher."""
    import signal
    import time

    ready = tmp_path / "ready"
    fake = tmp_path / "python-launcher"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import os, pathlib, sys, time\n"
        f"fd, nonce = os.environ[{interpreter.PROOF_ENV!r}].split(':')\n"
        "os.write(int(fd), nonce.encode()); os.close(int(fd))\n"
        f"pathlib.Path({str(ready)!r}).write_text('up')\n"
        "time.sleep(60)\n"
    )
    fake.chmod(0o755)
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import os, sys; sys.path.insert(0, {str(Path(interpreter.__file__).parents[2])!r});"
         "from starforge.cluster.interpreter import run_proven;"
         f"print(run_proven({str(fake)!r}, [], dict(os.environ)))"],
        stdout=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists()
    parent.send_signal(signal.SIGTERM)  # the entry only, not its process group
    out, _ = parent.communicate(timeout=30)
    assert parent.returncode == 0 and out.strip() == str(128 + signal.SIGTERM)  # the launcher got it and ended by it
