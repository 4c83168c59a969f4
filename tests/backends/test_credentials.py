"""Credentials stay on the laptop: on every backend, the job cannot read the variables
forge reads for credentials, while the user's own variables reach it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.experiment import submit_and_wait

from starforge.state.credentials import CREDENTIAL_VARIABLES, without_credentials

SECRETS = {
    "FORGE_REGISTRY_USER": "ci-pusher",
    "FORGE_REGISTRY_PASSWORD": "push-S3cr3t",
    "FORGE_KEY_PASSPHRASE": "sign-S3cr3t",
}
USER_VARS = {"WANDB_API_KEY": "wandb-key-123", "HF_TOKEN": "hf-token-456"}


@pytest.fixture
def secrets(monkeypatch):
    for name, value in {**SECRETS, **USER_VARS}.items():
        monkeypatch.setenv(name, value)


def _run(exp: Path, backend: str):
    sub, record, log = submit_and_wait(exp, backend)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    [line] = [l for l in log.splitlines() if l.startswith("ENV ")]
    return sub, json.loads(line[len("ENV "):])


def test_the_list_is_the_documented_one():
    assert set(CREDENTIAL_VARIABLES) == {"FORGE_REGISTRY_USER", "FORGE_REGISTRY_PASSWORD", "FORGE_KEY_PASSPHRASE", "FORGE_RAY_TOKEN"}
    doc = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    for name in CREDENTIAL_VARIABLES:
        assert f"`{name}`" in doc
    assert without_credentials({**SECRETS, **USER_VARS}) == USER_VARS


def test_local_job_sees_the_users_variables_but_no_credentials(make_experiment, secrets):
    exp = make_experiment("python -m workload.show_env", "local")
    _, seen = _run(exp, "local")
    assert seen == {**{n: None for n in CREDENTIAL_VARIABLES}, **USER_VARS}


ANCESTORS = """\
import json, os

seen, pid = {}, os.getppid()
while pid > 1:  # every process above the trainer, the forge process that submitted it among them
    with open(f"/proc/{pid}/environ", "rb") as f:
        seen[pid] = f.read().decode("utf-8", "replace").split("\\0")
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
print("ANCESTORS " + json.dumps(seen), flush=True)
"""


def test_a_local_job_cannot_read_the_credentials_from_forges_proc_environ(make_experiment):
    # The job runs below the forge process that read the credentials (forge, the job's
    # supervisor, the node entry): what /proc shows of each ancestor's environment holds none.
    import subprocess

    exp = make_experiment("python -m workload.ancestors", "local")
    (exp / "workload" / "ancestors.py").write_text(ANCESTORS)
    env = {**os.environ, **SECRETS, **USER_VARS, "FORGE_RAY_TOKEN": "ray-T0ken"}
    forge = subprocess.Popen([sys.executable, "-m", "starforge", "submit", str(exp)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out, err = forge.communicate(timeout=300)
    assert forge.returncode == 0, out + err
    [line] = [ln for ln in out.splitlines() if ln.startswith("ANCESTORS ")]
    seen = json.loads(line[len("ANCESTORS "):])
    assert "HF_TOKEN=hf-token-456" in seen[str(forge.pid)]  # forge's own block was read: the user's variables are there
    leaked = [e for environ in seen.values() for e in environ
              if any(v in e for v in [*SECRETS.values(), "ray-T0ken"])]
    assert leaked == []


@pytest.mark.slurm
def test_slurm_job_and_slurmctld_never_see_credentials(slurm_env, make_experiment, tmp_path, secrets, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("FORGE_SLURM_STAGING", raising=False)
    exp = make_experiment("python -m workload.show_env", "slurm", {"staging": str(tmp_path / "shared")})
    _, seen = _run(exp, "slurm")
    assert seen == {**{n: None for n in CREDENTIAL_VARIABLES}, **USER_VARS}
    # slurmctld keeps each job's submit environment in its state directory.
    for path in (slurm_env.root / "state").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"push-S3cr3t" not in data and b"sign-S3cr3t" not in data, path


@pytest.mark.ray
def test_ray_job_request_and_job_carry_no_credentials(ray_client, make_experiment, secrets, monkeypatch):
    from starforge.backends.ray import RayJobsClient

    sent = []
    original = RayJobsClient.submit

    def recording(self, request):
        sent.append(request)
        return original(self, request)

    monkeypatch.setattr(RayJobsClient, "submit", recording)
    exp = make_experiment("python -m workload.show_env", "ray")
    _, seen = _run(exp, "ray")
    assert len(sent) == 1
    for name in CREDENTIAL_VARIABLES:
        assert seen[name] is None, name
    for request in sent:
        assert not set(request["runtime_env"]["env_vars"]) & set(CREDENTIAL_VARIABLES)
        assert "S3cr3t" not in json.dumps(request) and ray_client.token not in json.dumps(request)
