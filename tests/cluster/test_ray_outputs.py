"""The outputs manifest of a Ray job's other host, made there when the launcher asks."""

from __future__ import annotations

import json
import os

from starforge.cluster import ray_init
from starforge.cluster.jobspec import JobSpec, example, write_spec
from starforge.cluster.lineage import short_host
from starforge.cluster.ray_outputs import RECORDED_BY, OtherHosts, host_manifest, ran_here


def _copy(tmp_path):
    """A host's copy of the job package, as Ray unpacks it: jobspec.json, work/, provenance/."""
    job_dir = tmp_path / "starforge_0123"
    (job_dir / "work").mkdir(parents=True)
    (job_dir / "provenance").mkdir()
    spec = JobSpec.from_dict(example())
    write_spec(spec, job_dir / "jobspec.json")
    return spec, job_dir


def test_a_host_where_only_the_asking_task_ran_lists_nothing(tmp_path, monkeypatch):
    spec, job_dir = _copy(tmp_path)
    monkeypatch.setenv("FORGE_JOB_DIR", str(job_dir))
    (job_dir / "provenance" / f"a1-{short_host()}-{os.getpid()}.json").write_text("{}")  # the task's own worker
    assert not ran_here(str(job_dir)) and host_manifest(1) is None
    assert not (job_dir / "lineage").exists()


def test_a_host_where_a_worker_of_the_job_ran_lists_its_copy_of_work(tmp_path, monkeypatch):
    spec, job_dir = _copy(tmp_path)
    monkeypatch.setenv("FORGE_JOB_DIR", str(job_dir))
    monkeypatch.delenv("FORGE_WORK_DIR", raising=False)
    (job_dir / "provenance" / f"a0-{short_host()}-{os.getpid() + 1}.json").write_text("{}")  # a worker of the job
    (job_dir / "work" / "rollouts.jsonl").write_text("{}\n")
    doc = json.loads(host_manifest(3))
    assert (doc["job_id"], doc["attempt"], doc["host"], doc["recorded_by"]) == (spec.id, 3, short_host(), RECORDED_BY)
    [work] = doc["dirs"]
    assert (work["path"], [f[:2] for f in work["files"]]) == (str(job_dir / "work"), [["rollouts.jsonl", 3]])
    assert work["node_local"] is True  # each host's copy, perhaps at the same path as another's
    assert (job_dir / "lineage" / f"outputs-a3-{short_host()}.json").is_file()  # kept on that host too


def test_without_ray_connected_nothing_is_asked_or_said(capsys):
    said = []
    other_hosts = OtherHosts(1, say=said.append)
    assert other_hosts.gather() == 0 and not other_hosts.asked and said == []
    assert capsys.readouterr().out == ""


def test_the_launchers_question_runs_before_the_entrypoints_ray_shutdown(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", ray.init)
    monkeypatch.setattr(ray_init, "_BEFORE_SHUTDOWN", [])
    calls = []
    original = ray.shutdown
    monkeypatch.setattr(ray, "shutdown", lambda *a, **k: (calls.append("shutdown"), original(*a, **k))[1])
    ray_init.before_ray_shutdown(lambda: calls.append("asked"))
    ray_init.watch_ray_init()  # ray is imported: wrapped now
    ray.shutdown()
    assert calls == ["asked", "shutdown"]
