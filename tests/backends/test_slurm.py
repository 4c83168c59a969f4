"""The slurm backend against a real one-node Slurm (munged + slurmctld + slurmd on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from starforge.backends.base import wait
from starforge.backends.slurm import SlurmBackend, batch_script, node_job_dir, query_state
from starforge.errors import ManifestError
from starforge.experiment.submit import submit_experiment

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


@pytest.fixture
def slurm_job_env(slurm_env, monkeypatch):
    """Jobs inherit the submitting environment (sbatch --export=ALL): the venv's python3 first on PATH."""
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("FORGE_SLURM_STAGING", raising=False)
    return slurm_env


def _run(exp: Path):
    sub = submit_experiment(exp, (), backend="slurm")
    chunks: list[str] = []
    record = wait(sub.backend, sub.record, chunks.append)
    return sub, record, "".join(chunks)


def _results(log: str) -> list:
    return [json.loads(l[len("RESULTS ") :]) for l in log.splitlines() if l.startswith("RESULTS ")]


def _forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "forge"), *args], capture_output=True, text=True, timeout=60)


def test_job_runs_once_with_plugins_in_every_process(slurm_job_env, make_experiment, tmp_path):
    shared = tmp_path / "shared"
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(shared)})
    sub, record, log = _run(exp)

    assert (record.status, record.exit_code) == ("succeeded", 0), log
    job_dir = shared / sub.spec.id
    assert record.dir == str(job_dir)
    [res] = _results(log)  # launch: once
    assert res["driver"].startswith("patched:plain:") and res["child"].startswith("patched:plain:"), res
    local = node_job_dir({}, sub.spec.id)
    assert res["cwd"] == f"{local}/recipe"  # the training ran on the node-local copy, read-only
    assert res["cwd_mode"] == "0o555"
    assert not os.path.exists(local)  # ...which the collect step removed
    assert res["slurm"]["SLURM_JOB_ID"] == record.backend_ref["job_id"]
    assert "plugin  : tester/mark-worker@1.0.0 loaded" in log

    # Provenance came back to the shared directory: the launcher and the spawned child
    # both patched workload.algo:tag; the prepare step's launcher pass is recorded too.
    records = [json.loads(p.read_text()) for p in (job_dir / "provenance").glob("*.json")]
    patched = {r["pid"]: r["role"] for r in records if any(p.get("target") == "workload.algo:tag" for p in r["patches"])}
    child_pid = int(res["child"].rsplit(":", 1)[1])
    driver_pid = int(res["driver"].rsplit(":", 1)[1])
    assert patched.get(driver_pid) == "launcher" and child_pid in patched, records
    assert json.loads((job_dir / "status.json").read_text())["code"] == 0
    assert (job_dir / "slurm" / "exit_code").read_text().strip() == "0"

    # The CLI sees the same job through the jobs store and the backend.
    shown = _forge("jobs", "show", record.id, "--json")
    assert shown.returncode == 0, shown.stderr
    details = json.loads(shown.stdout)
    assert (details["status"], details["exit_code"], details["backend"], details["dir"]) == ("succeeded", 0, "slurm", str(job_dir))
    logs = _forge("jobs", "logs", record.id)
    assert logs.returncode == 0 and "RESULTS " in logs.stdout


def test_per_node_launch_runs_in_an_srun_step_and_passes_the_exit_code(slurm_job_env, make_experiment, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKLOAD_EXIT", "7")  # reaches the job through sbatch's exported environment
    monkeypatch.setenv("FORGE_SLURM_STAGING", str(tmp_path / "from-env"))
    exp = make_experiment("python -m workload.train", "slurm", {"launch": "per-node", "staging": str(tmp_path / "ignored")})
    sub, record, log = _run(exp)

    assert (record.status, record.exit_code) == ("failed", 7), log
    assert record.dir == str(tmp_path / "from-env" / sub.spec.id)
    [res] = _results(log)  # one node in this allocation: one run
    # not the batch step: a job step started by srun, task 0 on node 0
    assert res["slurm"]["SLURM_STEP_ID"] not in (None, "batch") and res["slurm"]["SLURM_STEP_ID"].isdigit(), res
    assert (res["slurm"]["SLURM_NODEID"], res["slurm"]["SLURM_PROCID"]) == ("0", "0")
    assert res["driver"].startswith("patched:")
    state = query_state(record.backend_ref["job_id"], Path(record.dir))
    assert (state["state"], state["exit_code"]) == ("FAILED", 7)
    # Provenance names the Slurm job, node and task of each launcher (prepare step and run).
    records = [json.loads(p.read_text()) for p in (Path(record.dir) / "provenance").glob("*.json")]
    launchers = {r["mode"]: r["scheduler"]["slurm"] for r in records if r["role"] == "launcher"}
    assert set(launchers) == {"verify-only", "launch"}, records
    for ids in launchers.values():
        assert ids["job_id"] == record.backend_ref["job_id"]
        assert (ids["node_id"], ids["proc_id"]) == ("0", "0")
    assert launchers["launch"]["step_id"] == res["slurm"]["SLURM_STEP_ID"]


def test_tampered_plugin_stops_the_job_before_the_entrypoint(slurm_job_env, make_experiment, tmp_path):
    from starforge.backends.store import JobStore
    from starforge.experiment.lock import open_experiment_registry
    from starforge.experiment.stage import load_plan, stage_job

    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(tmp_path / "shared")})
    plan = load_plan(exp, backend="slurm")
    backend = SlurmBackend(plan.experiment.slurm, JobStore())
    job_dir = backend.staging_dir(exp, plan.spec.id)
    stage_job(plan, job_dir, open_experiment_registry(plan.experiment))
    target = job_dir / "forge_plugins" / "mark-worker" / "mark_worker.py"
    target.chmod(0o644)
    target.write_text(target.read_text().replace("label + ", "'evil:' + label + "))

    record = wait(backend, backend.submit(job_dir, plan.spec, detach=False), lambda _: None)
    log = "".join(backend.logs(record))
    assert (record.status, record.exit_code) == ("failed", 10), log
    assert "mark_worker.py" in log
    assert _results(log) == []
    assert json.loads((job_dir / "status.json").read_text())["phase"] == "verify"


def test_cancel_stops_the_job_with_scancel(slurm_job_env, make_experiment, tmp_path):
    exp = make_experiment(
        "python -c 'import time; print(\"sleeping\", flush=True); time.sleep(300)'", "slurm", {"staging": str(tmp_path / "s")}
    )
    sub = submit_experiment(exp, (), backend="slurm", detach=True)
    backend, record = sub.backend, sub.record
    deadline = time.monotonic() + 60
    while "sleeping" not in "".join(backend.logs(record)) and time.monotonic() < deadline:
        time.sleep(0.3)
    record = backend.cancel(record)
    assert record.status == "cancelled"
    deadline = time.monotonic() + 30
    while (state := query_state(record.backend_ref["job_id"], Path(record.dir)))["state"] != "CANCELLED":
        assert time.monotonic() < deadline, state
        time.sleep(0.3)
    assert backend.refresh(record).status == "cancelled"


def test_a_job_slurm_forgot_is_read_from_its_exit_code_file(slurm_job_env, tmp_path):
    job_dir = tmp_path / "job"
    (job_dir / "slurm").mkdir(parents=True)
    # scontrol does not know this id and this cluster has no accounting (sacct fails)
    assert query_state("987654", job_dir)["state"] is None
    (job_dir / "slurm" / "exit_code").write_text("3\n")
    assert query_state("987654", job_dir) == {"state": "FAILED", "exit_code": 3, "reason": ""}


def test_batch_script_and_settings(tmp_path):
    from starforge.cluster.jobspec import JobSpec, example

    spec = JobSpec.from_dict(example())
    text = batch_script(tmp_path / "job dir", spec, {"launch": "per-node", "nodes": 2, "partition": "gpu", "time": "01:00:00"})
    assert f"#SBATCH --output='{tmp_path}/job dir/slurm/output.log'" in text
    assert "#SBATCH --nodes=2" in text and "#SBATCH --partition=gpu" in text and "#SBATCH --time=01:00:00" in text
    entry = 'python3 "$LOCAL/.forge-runtime/starforge-runtime.zip" --spec "$LOCAL/jobspec.json"'
    assert f"on_each_node {entry}" in text
    assert 'exec python3 "$local/.forge-runtime/starforge-runtime.zip" --spec "$local/jobspec.json" --verify-only' in text
    once = batch_script(tmp_path, spec, {"launch": "once"})
    assert f"\n    {entry}" in once and "one_step" not in once
    # srun options and a container image apply to every step, the single run included
    boxed = batch_script(tmp_path, spec, {"launch": "once", "container": "nvcr.io/rl:24.05",
                                          "srun_args": ["--mpi=none"], "container_mounts": ["/data:/data"]})
    opts = f"--mpi=none --container-image=nvcr.io/rl:24.05 --container-mounts={tmp_path}:{tmp_path},/tmp:/tmp,/data:/data"
    assert f"--kill-on-bad-exit=1 {opts} \"$@\"; }}" in boxed
    assert f'one_step() {{ srun --nodes=1 --ntasks=1 {opts} "$@"; }}' in boxed and f"\n    one_step {entry}" in boxed
    with pytest.raises(ManifestError, match="slurm.srun_args: expected a list of strings"):
        SlurmBackend({"srun_args": "--mpi=none"})
    with pytest.raises(ManifestError, match="did you mean 'slurm.launch'"):
        SlurmBackend({"lanch": "once"})
    with pytest.raises(ManifestError, match="once or per-node"):
        SlurmBackend({"launch": "everywhere"})
    with pytest.raises(ManifestError, match="positive integer"):
        SlurmBackend({"nodes": 0})


@pytest.mark.parametrize("said, hint", [
    ("sbatch: error: Batch job submission failed: Invalid partition name specified", "sinfo -s"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified", "--account=NAME"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available", "cpus_per_task"),
    ("sbatch: error: Batch job submission failed: something new", "slurm: settings in forge.yaml"),
])
def test_an_sbatch_refusal_comes_with_a_hint(said, hint):
    from starforge.backends.slurm import sbatch_hint

    assert hint in sbatch_hint(said)
