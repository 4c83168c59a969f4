"""A backend is one module plus one line: ``tiny`` (tests/backends/tiny_backend.py), defined
and registered here without an edit under ``starforge/``, gets its ``forge.yaml`` section
parsed and checked, is offered by ``--backend`` and named in the errors that list backends,
and runs a job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_backend import REGISTRATION

from starforge.backends import BACKENDS
from starforge.backends.base import get_backend
from starforge.errors import ManifestError, UsageError
from starforge.experiment.config import load_experiment

HERE = Path(__file__).resolve().parent
TRAINER = """\
import json, os
spec = json.load(open(os.environ["FORGE_JOBSPEC"]))
print("backend %s says %s" % (spec["backend"], spec["extra"]["tiny"]["greeting"]), flush=True)
"""
FORGE_YAML = "schema: forge/job/v1\nname: tiny-demo\nentrypoint: python -m trainer\nbackend: tiny\n"


@pytest.fixture
def tiny(monkeypatch):
    """``tiny`` registered in this process, as the one line of the table."""
    name, entry = REGISTRATION
    monkeypatch.setitem(BACKENDS, name, entry)
    return name


@pytest.fixture
def exp(tmp_path):
    d = tmp_path / "exp"
    d.mkdir()
    (d / "trainer.py").write_text(TRAINER)
    (d / "forge.yaml").write_text(FORGE_YAML + "tiny: {greeting: hi}\n")
    return d


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    e.update(FORGE_HOME=str(tmp_path / "home"), PYTHONPATH=str(HERE))
    return e


def forge(env, cwd, *args, registered=True, code=0):
    """``forge ARGS`` in a new process, with ``tiny`` registered there (or not)."""
    start = ["-c", "import tiny_backend; tiny_backend.main()"] if registered else ["-m", "starforge"]
    proc = subprocess.run([sys.executable, *start, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    return proc


def test_its_forge_yaml_section_is_parsed_and_checked_by_the_backend(tiny, exp):
    loaded = load_experiment(exp)
    assert (loaded.backend, loaded.backend_settings("tiny")) == ("tiny", {"greeting": "hi"})
    # defaults and checks are the backend's, applied when it is opened
    assert get_backend("tiny", {}).settings == {"greeting": "hello"}
    with pytest.raises(ManifestError, match=r"^forge.yaml: unknown key 'tiny.gretting' \(did you mean 'tiny.greeting'\?\)$") as info:
        get_backend("tiny", {"gretting": "hi"})
    assert info.value.hint == "tiny settings: greeting, python"
    with pytest.raises(ManifestError, match="tiny.greeting: expected a non-empty string, got 3"):
        get_backend("tiny", {"greeting": 3})
    # the section's shape, and its place among forge.yaml's keys
    (exp / "forge.yaml").write_text(FORGE_YAML + "tiny: [hi]\n")
    with pytest.raises(ManifestError, match=r"forge.yaml:5: tiny: expected a mapping of tiny backend settings, got a list$"):
        load_experiment(exp)
    (exp / "forge.yaml").write_text(FORGE_YAML + "tinny: {}\n")
    with pytest.raises(ManifestError, match=r"unknown key 'tinny' \(did you mean 'tiny'\?\)") as info:
        load_experiment(exp)
    assert info.value.hint.endswith("backend, strict_deferred, ray, slurm, tiny, registry, python, plan, outputs")
    # the errors that list backends name it
    (exp / "forge.yaml").write_text(FORGE_YAML.replace("backend: tiny", "backend: tinny"))
    with pytest.raises(ManifestError, match=r"expected one of local, ray, slurm, tiny, got 'tinny' \(did you mean 'tiny'\?\)") as info:
        load_experiment(exp)
    assert info.value.hint == "backends: local, ray, slurm, tiny (default local)"
    with pytest.raises(UsageError, match=r"unknown backend 'tinny' \(did you mean 'tiny'\?\)") as info:
        get_backend("tinny")
    assert info.value.hint == "backends: local, ray, slurm, tiny"


def test_without_the_line_there_is_no_such_backend_nor_section(exp):
    assert "tiny" not in BACKENDS
    with pytest.raises(ManifestError, match=r"unknown key 'tiny'$"):
        load_experiment(exp)
    (exp / "forge.yaml").write_text(FORGE_YAML)
    with pytest.raises(ManifestError, match="backend: expected one of local, ray, slurm, got 'tiny'"):
        load_experiment(exp)


def test_the_cli_offers_it_and_runs_a_job_on_it(exp, env):
    for command in ("submit", "plan"):
        assert "--backend [local|ray|slurm|tiny]" in forge(env, exp, command, "--help").stdout
    bad = forge(env, exp, "submit", "--backend", "k8s", code=2)
    assert "'k8s' is not one of 'local', 'ray', 'slurm', 'tiny'" in bad.stderr
    forge(env, exp, "lock")
    assert "tiny-demo on the tiny backend" in forge(env, exp, "plan", "--backend", "tiny").stdout
    spec = json.loads(forge(env, exp, "submit", "--dry-run").stdout)
    assert (spec["backend"], spec["extra"]) == ("tiny", {"tiny": {"greeting": "hi"}})
    run = forge(env, exp, "submit")
    job_id = run.stdout.splitlines()[0].split(": ", 1)[1]
    assert "backend tiny says hi" in run.stdout
    shown = json.loads(forge(env, exp, "jobs", "show", job_id, "--json").stdout)
    assert (shown["backend"], shown["status"], shown["exit_code"]) == ("tiny", "succeeded", 0)
    # the section is checked by the backend before anything is staged
    (exp / "forge.yaml").write_text(FORGE_YAML + "tiny: {gretting: hi}\n")
    refused = forge(env, exp, "submit", code=3)
    assert refused.stderr.splitlines()[0] == "error: forge.yaml: unknown key 'tiny.gretting' (did you mean 'tiny.greeting'?)"
    assert [p.name for p in (exp / ".forge" / "jobs").iterdir()] == [job_id]
    # plain forge, without the line: forge.yaml's tiny: is an unknown key
    plain = forge(env, exp, "lock", registered=False, code=3)
    assert "unknown key 'tiny'" in plain.stderr
