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


def test_entry_parses_on_old_interpreters():
    # The entry runs under any python3 of the node: a 3.6 interpreter must get our exit 11,
    # not a SyntaxError from f-strings, annotations or the walrus.
    tree = ast.parse(SOURCE.read_text(), feature_version=(3, 4))
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
