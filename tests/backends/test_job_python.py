"""The job's Python (SPEC §14) on every backend: a trainer venv with nothing of StarForge.

The trainer venv is a bare ``python -m venv --without-pip``: no starforge-core, no
``packaging``, plus one distribution the launcher's own venv lacks (``trainerdep``). A job
whose entrypoint names that venv's interpreter runs there: the launcher starts under it
from the job's runtime zip, checks ``requires.packages`` there (so ``trainerdep`` is found
and a missing one fails with exit 11, naming it), and the eager plugin installs in the
process that trains.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.workload import locked_recipe

from starforge.backends.base import wait
from starforge.experiment.submit import submit_experiment

PLUGIN = {
    "plugin.yaml": (
        "schema: forge/plugin/v1\nname: {name}\nversion: 1.0.0\nkind: algorithm\n"
        "entrypoint: {module}:install\nrequires:\n  packages: {{{package}: \">=1.0\"}}\n"
    ),
    "{module}.py": (
        "import sys\n\n\ndef install(params):\n"
        "    print('PLUGIN installed in', sys.executable, flush=True)\n"
    ),
}

TRAINER = """\
import importlib.util, json, sys
import starforge
from starforge import plugins
print("TRAINER " + json.dumps({
    "executable": sys.executable,
    "starforge": starforge.__file__,
    "packaging": importlib.util.find_spec("packaging") is not None,
    "label": plugins.hyperparams().get("label"),
}), flush=True)
"""


@pytest.fixture(scope="module")
def trainer_venv(tmp_path_factory) -> Path:
    """A venv without pip, starforge-core or packaging, holding the distribution ``trainerdep 1.2``."""
    root = tmp_path_factory.mktemp("trainenv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    info = Path(purelib) / "trainerdep-1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trainerdep\nVersion: 1.2\n")
    (Path(purelib) / "trainerdep.py").write_text("")
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([str(python), "-c", "import starforge"], capture_output=True, text=True, cwd=root, env=bare)
    assert probe.returncode != 0, "the trainer venv must not hold starforge"
    return root


def _plugin(root: Path, name: str, package: str) -> Path:
    module = name.replace("-", "_")
    src = root / name
    src.mkdir(parents=True)
    for rel, text in PLUGIN.items():
        (src / rel.format(module=module)).write_text(text.format(name=name, module=module, package=package))
    return src


@pytest.fixture
def experiment(tmp_path, forge_home, trainer_venv):
    """``make(backend, package, settings) -> experiment``: the trainer named by the venv's python."""
    from starforge.registry.factory import open_registry
    from starforge.registry.publish import publish_plugin

    registry = str(tmp_path / "registry")

    def make(backend: str, package: str = "trainerdep", settings: dict | None = None) -> Path:
        name = f"needs-{package}"
        publish_plugin(_plugin(tmp_path / "src", name, package), open_registry(registry), "tester")
        root = tmp_path / f"exp-{backend}-{package}"
        root.mkdir()
        (root / "train.py").write_text(TRAINER)
        return locked_recipe(root, registry, name=f"jobpython-{backend}", entrypoint=f"{trainer_venv}/bin/python train.py",
                             plugins=[f"tester/{name}@1.0.0"], config={"label": "from-config"}, backend=backend,
                             settings=settings)

    return make


def _run(exp: Path, backend: str):
    sub = submit_experiment(exp, (), backend=backend)
    chunks: list[str] = []
    record = wait(sub.backend, sub.record, chunks.append)
    return sub, record, "".join(chunks)


def _trainer(log: str) -> dict:
    (line,) = [x for x in log.splitlines() if x.startswith("TRAINER ")]
    return json.loads(line[len("TRAINER "):])


def _check_ran_in_the_venv(log: str, trainer_venv: Path) -> None:
    python = f"{trainer_venv}/bin/python"
    seen = _trainer(log)
    assert seen["executable"] == python  # not realpath'd: the venv, not its base interpreter
    # the job's runtime zip, as the node entry unpacked it into the job's code directory on the node
    assert re.search(r"/forge-code-[a-z0-9_]+/starforge/__init__\.py$", seen["starforge"]), seen
    assert seen["packaging"] is False  # the zip's packaging is vendored: the trainer's namespace is its own
    assert seen["label"] == "from-config"
    assert f"PLUGIN installed in {python}" in log  # eager: in the process that trains
    assert "plugin  : tester/needs-trainerdep@1.0.0 loaded" in log
    assert f"python  : {python} (" in log and "named by the entrypoint" in log


def _check_unmet(record, log: str) -> None:
    assert record.exit_code == 11, log
    assert "needs-nosuchdep@1.0.0 failed (requirement not met, exit 11)" in log
    assert "nosuchdep" in log and "TRAINER" not in log


def test_local_runs_the_trainer_venv(experiment, trainer_venv):
    sub, record, log = _run(experiment("local"), "local")
    assert record.status == "succeeded", log
    _check_ran_in_the_venv(log, trainer_venv)
    status = json.loads((Path(record.dir) / "status.json").read_text())
    assert status["phase"] == "entrypoint" and status["code"] == 0


def test_local_requirement_checked_in_the_trainer_venv(experiment):
    sub, record, log = _run(experiment("local", "nosuchdep"), "local")
    _check_unmet(record, log)


def test_python_key_names_the_job_python_for_a_bare_python_entrypoint(experiment, trainer_venv, tmp_path):
    exp = experiment("local")
    text = (exp / "forge.yaml").read_text().replace(f"{trainer_venv}/bin/python train.py", "python train.py")
    (exp / "forge.yaml").write_text(text + f"python: {trainer_venv}/bin/python\n")
    sub, record, log = _run(exp, "local")
    assert record.status == "succeeded", log
    assert _trainer(log)["executable"] == f"{trainer_venv}/bin/python"
    assert "(3." in log and "forge.yaml python" in log


def test_a_missing_job_python_is_an_unmet_requirement(experiment, tmp_path):
    exp = experiment("local")
    (exp / "forge.yaml").write_text((exp / "forge.yaml").read_text() + f"python: {tmp_path}/nowhere/bin/python\n")
    sub, record, log = _run(exp, "local")
    assert record.exit_code == 11, log
    assert f"the job's Python {tmp_path}/nowhere/bin/python does not exist on this node" in log
    status = json.loads((Path(record.dir) / "status.json").read_text())
    assert status["phase"] == "requires" and status["code"] == 11


def test_an_unset_variable_in_python_is_refused_at_submit_on_local(experiment, monkeypatch):
    from starforge.errors import UsageError

    exp = experiment("local")
    (exp / "forge.yaml").write_text((exp / "forge.yaml").read_text() + "python: $FORGE_TEST_TRAINER_PYTHON\n")
    monkeypatch.delenv("FORGE_TEST_TRAINER_PYTHON", raising=False)
    with pytest.raises(UsageError) as err:
        submit_experiment(exp, (), backend="local")
    assert err.value.message == "python: $FORGE_TEST_TRAINER_PYTHON: FORGE_TEST_TRAINER_PYTHON is not set"
    assert "export FORGE_TEST_TRAINER_PYTHON=" in err.value.hint
    staged = exp / ".forge" / "jobs"
    assert not staged.exists() or not any(staged.iterdir())  # refused before anything was staged


def test_a_remote_backend_says_the_variable_is_resolved_on_the_node():
    from starforge.backends.base import get_backend

    ray = get_backend("ray", {"address": "http://127.0.0.1:1"})
    assert ray.check_job_python("$TRL_PYTHON") == "python: $TRL_PYTHON is resolved on the node, from the job's environment there"
    assert ray.check_job_python("/opt/venv/bin/python") is None
    assert get_backend("local", {}).check_job_python("${HOME}/bin/python") is None  # set here: fine


@pytest.mark.ray
def test_ray_runs_the_trainer_venv(ray_client, experiment, trainer_venv):
    sub, record, log = _run(experiment("ray"), "ray")
    assert record.status == "succeeded", (record, log)
    _check_ran_in_the_venv(log, trainer_venv)


@pytest.mark.ray
def test_ray_requirement_checked_in_the_trainer_venv(ray_client, experiment):
    sub, record, log = _run(experiment("ray", "nosuchdep"), "ray")
    _check_unmet(record, log)


@pytest.mark.slurm
def test_slurm_runs_the_trainer_venv(slurm_job_env, experiment, trainer_venv):
    sub, record, log = _run(experiment("slurm"), "slurm")
    assert record.status == "succeeded", log
    _check_ran_in_the_venv(log, trainer_venv)


@pytest.mark.slurm
def test_slurm_requirement_checked_in_the_trainer_venv(slurm_job_env, experiment):
    sub, record, log = _run(experiment("slurm", "nosuchdep"), "slurm")
    _check_unmet(record, log)
