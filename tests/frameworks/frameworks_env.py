"""The trainer venvs (.venv-trl, .venv-verl, .venv-cosmos, made by .ci/setup) and ways to run code in them.

The venvs hold a training framework and no starforge-core, like a user's training
environment. ``forge`` itself runs from the project's venv and names a trainer venv as the
job's Python; the in-venv checks reach the installed ``starforge`` package through
``runtime_path`` (a directory holding just that package, what the job's runtime zip
carries) on ``PYTHONPATH``.

A missing venv fails the test when ``CI`` is set and skips it otherwise.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.need import need
from support.processes import descendants, free_port, session_pids, terminate

import starforge

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENVS = {"trl": REPO / ".venv-trl", "verl": REPO / ".venv-verl", "cosmos": REPO / ".venv-cosmos"}
#: First on PYTHONPATH of the Cosmos venv's processes: its sitecustomize lets cosmos_rl import on CPU
COSMOS_CPU = HERE / "cosmos_cpu"


def trainer_python(name: str) -> Path:
    python = VENVS[name] / "bin" / "python"
    need(python.exists(), f"{VENVS[name].name} is missing (bash .ci/setup creates it)")
    return python


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FORGE_", "VIRTUAL_ENV", "RAY_")) and k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               TOKENIZERS_PARALLELISM="false", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def runtime_path(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("runtime")
    (dest / "starforge").symlink_to(Path(starforge.__file__).parent)
    return dest


def run_checks(name: str, script: str, cases: list, runtime: Path, timeout: int = 240, path: tuple = ()) -> str:
    """Run ``script CASE...`` in the *name* trainer venv; fail with its output unless every case passed.

    *path*: directories put on ``PYTHONPATH`` before the runtime's.
    """
    pythonpath = os.pathsep.join([*map(str, path), str(runtime)])
    proc = subprocess.run([str(trainer_python(name)), str(HERE / script), *cases], capture_output=True, text=True,
                          cwd=str(HERE), env=clean_env(PYTHONPATH=pythonpath), timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for case in cases:
        assert f"ok {case}" in proc.stdout.splitlines(), out[-6000:]
    return out


@pytest.fixture(scope="module")
def ray_head_in():
    """``start(venv name) -> (gcs address, env)``: a Ray head on 127.0.0.1 started from that venv's
    own ``ray`` (so its workers run the venv's Python); stopped by its session's PIDs when the
    module that asked for it ends (an idle head costs CPU for as long as it runs)."""
    import secrets
    import shutil
    import tempfile

    heads: list = []

    def start(name: str):
        ray = VENVS[name] / "bin" / "ray"
        need(ray.exists(), f"{VENVS[name].name} has no ray (verl depends on it; bash .ci/setup)")
        temp_dir = Path(tempfile.mkdtemp(prefix="sfvray", dir="/tmp"))  # Ray's socket paths must stay short
        gcs_port, client_port, agent_port, metrics_port = (free_port() for _ in range(4))
        # no idle workers started ahead (Ray's system config, read from RAY_<name>): the tests' actors
        # carry a runtime environment of their own and never use one; each imports ray for nothing
        env = clean_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
                        RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_enable_worker_prestart="0",
                        RAY_prestart_worker_first_driver="0",
                        PATH=f"{ray.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        cmd = [str(ray), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs_port),
               "--ray-client-server-port", str(client_port), "--dashboard-agent-listen-port", str(agent_port),
               "--metrics-export-port", str(metrics_port), "--include-dashboard", "false", "--num-cpus", "2",
               "--temp-dir", str(temp_dir), "--disable-usage-stats", "--object-store-memory", "200000000"]
        proc = subprocess.Popen(cmd, env=env, cwd=temp_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        heads.append((proc.pid, temp_dir))
        out, _ = proc.communicate(timeout=180)
        if proc.returncode != 0:
            pytest.fail(f"ray start failed ({proc.returncode}):\n{out[-4000:]}")
        return f"127.0.0.1:{gcs_port}", env

    try:
        yield start
    finally:
        for sid, temp_dir in heads:
            terminate(descendants(session_pids(sid)))
            shutil.rmtree(temp_dir, ignore_errors=True)
