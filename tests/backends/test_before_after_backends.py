"""`forge plan --backend` and `forge jobs replay` on the real Ray head and Slurm cluster of
the backend tests: the load phase as a short job whose ledger comes back through the log,
and a replay of a job that ran there."""

from __future__ import annotations

import json

import pytest

from starforge.backends.base import wait
from starforge.experiment.patchplan import plan_on_backend
from starforge.experiment.replay import replay_job
from starforge.experiment.submit import submit_experiment
from starforge.jobs.store import JobStore


def _results(log: str) -> list:
    return [json.loads(ln[len("RESULTS "):]) for ln in log.splitlines() if ln.startswith("RESULTS ")]


def _ledger_patches(outcome) -> list:
    [plugin] = outcome.to_dict()["plugins"]
    return [(p["how"], p["target"]) for p in plugin["patches"]]


@pytest.mark.slurm
def test_plan_and_replay_on_slurm(slurm_job_env, make_experiment, tmp_path):
    shared = tmp_path / "shared"
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(shared)})
    outcome = plan_on_backend(exp, backend="slurm")
    assert outcome.backend == "the slurm backend" and outcome.clean
    assert ("wrap", "workload.algo:tag") in _ledger_patches(outcome)
    assert not shared.exists() and JobStore().list() == []  # nothing left behind (not even the folder it made), no record

    sub = submit_experiment(exp, (), backend="slurm")
    first = wait(sub.backend, sub.record, lambda _c: None)
    assert first.status == "succeeded"
    done = replay_job(first.id)
    chunks: list = []
    record = wait(done.backend, done.record, chunks.append)
    log = "".join(chunks)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert f"replay  : of job {first.id}" in log
    assert [r["driver"].split(":")[0] for r in _results(log)] == ["patched"]
    assert JobStore().get(record.id).replay_of == first.id


@pytest.mark.ray
def test_plan_and_replay_on_ray(ray_client, make_experiment, tmp_path):
    exp = make_experiment("python -m workload.ray_train", "ray")
    outcome = plan_on_backend(exp, backend="ray")
    assert outcome.backend == "the ray backend" and outcome.clean
    assert ("wrap", "workload.algo:tag") in _ledger_patches(outcome)
    assert JobStore().list() == [] and not list((exp / ".forge").glob("jobs/*"))

    sub = submit_experiment(exp, (), backend="ray")
    first = wait(sub.backend, sub.record, lambda _c: None)
    assert first.status == "succeeded"
    # The Ray job's provenance came back through its log: its fingerprint is compared, so
    # --strict accepts the replay (same cluster, same environment: no difference).
    done = replay_job(first.id, strict=True)
    assert not done.notes, done.notes
    assert done.spec.replay["environment"]["python"]["version"]
    chunks: list = []
    record = wait(done.backend, done.record, chunks.append)
    log = "".join(chunks)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert f"replay  : of job {first.id}" in log
    assert "environment differs" not in log and "recorded no environment fingerprint" not in log, log
    assert JobStore().get(record.id).replay_of == first.id
