"""The ray backend against a real Ray head on 127.0.0.1 (one head for the whole session)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from starforge.backends.base import wait
from starforge.backends.ray import RayBackend, RayJobsClient, build_package, resolve_address
from starforge.errors import BackendError, ManifestError
from starforge.experiment.submit import submit_experiment
from starforge.jobs.store import JobStore

pytestmark = pytest.mark.ray


def _submit(exp: Path, tmp_path: Path, sets=()):
    sub = submit_experiment(exp, sets, backend="ray")  # the user's jobs store, under FORGE_HOME
    chunks: list[str] = []
    record = wait(sub.backend, sub.record, chunks.append)
    return sub, record, "".join(chunks)


def _results(log: str) -> list:
    line = next(l for l in log.splitlines() if l.startswith("RESULTS "))
    return json.loads(line[len("RESULTS ") :])


def _forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "forge"), *args], capture_output=True, text=True, timeout=60)


def _wait_for_ray_status(ray_head, record, status: str, timeout: float) -> None:
    """Wait until Ray's own Jobs API says the job of *record* is in *status* (asserted)."""
    client = RayJobsClient(ray_head.address, ray_head.token)
    try:
        deadline = time.monotonic() + timeout
        while client.job(record.backend_ref["submission_id"])["status"] != status and time.monotonic() < deadline:
            time.sleep(0.5)
        assert client.job(record.backend_ref["submission_id"])["status"] == status
    finally:
        client.close()


def _node_job_dir(ray_head, record) -> Path:
    """Where Ray unpacked the job package on this (only) node."""
    name = record.backend_ref["package"].removeprefix("gcs://").removesuffix(".zip")
    found = list(ray_head.temp_dir.glob(f"session_2*/runtime_resources/working_dir_files/{name}"))
    assert len(found) == 1, found
    return found[0]


def _folders_not_writable(top: Path) -> list:
    """The folders at and below *top* that their owner cannot write, as paths relative to *top*."""
    return [str(Path(d).relative_to(top)) for d, _, _ in os.walk(top) if not os.stat(d).st_mode & stat.S_IWUSR]


def _provenance(job_dir: Path) -> list:
    return [json.loads(p.read_text()) for p in sorted((job_dir / "provenance").glob("[!.]*.json"))]


def _patched_pids(records: list) -> set:
    return {r["pid"] for r in records if any(p.get("target") == "workload.algo:tag" for p in r["patches"])}


def test_tasks_actor_and_entrypoint_all_run_the_patched_function(ray_client, make_experiment, tmp_path):
    ray_head = ray_client
    exp = make_experiment("python -m workload.ray_train", "ray")
    sub, record, log = _submit(exp, tmp_path)

    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert "plugin  : tester/mark-worker@1.0.0 loaded" in log
    results = _results(log)
    assert [r["where"] for r in results] == ["task", "task", "actor", "driver"]
    assert all(r["tag"] == f"patched:plain:{r['pid']}" for r in results), results
    # Ray workers (their environment fixed at submission) find the job's code directory on
    # this node through the job directory's pointer: they run the entry's compiled code.
    for r in results[:3]:
        assert "/forge-code-" in r["runtime"] and r["runtime"].endswith("/runtime-code.zip/starforge/__init__.pyc"), r

    # The record is in the store with the Ray handle; `forge jobs` reads it from there.
    stored = JobStore().get(record.id)
    assert stored.status == "succeeded" and stored.backend_ref["submission_id"] == f"forge-{record.id}"
    shown = _forge("jobs", "show", record.id, "--json")
    assert shown.returncode == 0, shown.stderr
    details = json.loads(shown.stdout)
    assert (details["status"], details["exit_code"], details["backend"]) == ("succeeded", 0, "ray")
    logs = _forge("jobs", "logs", record.id)
    assert logs.returncode == 0 and "RESULTS " in logs.stdout

    # Ray's copy of the job on the node: read-only plugin folders while the job ran, each
    # folder writable by its owner again once it ended, so Ray's plain rmtree of the copy
    # works when Ray runs as an ordinary user.
    node_copy = _node_job_dir(ray_head, record)
    assert results[-1]["plugins_mode"] == 0o555, results[-1]
    assert _folders_not_writable(node_copy) == []
    assert stat.S_IMODE((node_copy / "forge_plugins" / "mark-worker" / "plugin.yaml").stat().st_mode) == 0o444

    # Provenance on the node: the launcher and every worker process that ran the function.
    records = _provenance(node_copy)
    worker_pids = {r["pid"] for r in results if r["where"] != "driver"}
    assert worker_pids <= _patched_pids(records), records
    roles = {r["pid"]: r["role"] for r in records}
    assert roles[results[-1]["pid"]] == "launcher"
    for pid in worker_pids:
        rec = next(r for r in records if r["pid"] == pid)
        assert [(p["ref"], p["status"]) for p in rec["plugins"]] == [("tester/mark-worker@1.0.0", "loaded")]
        # written again at exit, inside Ray: the job and worker ids from Ray's runtime context
        assert set(rec["scheduler"].get("ray", {})) == {"job_id", "worker_id"}, rec["scheduler"]

    # The same records came back to this machine through the job's log (no shared file
    # system): the launcher's first, each worker's as it was patched.
    back = details["provenance"]
    assert back["reported_via"] == ["job log"] and back["from_log"]["refused"] == {}, back
    assert back["launcher"]["pid"] == results[-1]["pid"] and back["launcher"]["environment"]
    host = back["hosts"][0]
    assert back["per_host"][host]["patched"] >= len(worker_pids) + 1, back["per_host"]
    laptop_records = _provenance(Path(record.dir))
    assert worker_pids <= _patched_pids(laptop_records)
    assert sorted(p.name for p in (Path(record.dir) / "provenance").glob("[!.]*.json")) == [
        f"log-{i:04d}.json" for i in range(1, len(laptop_records) + 1)]
    text = _forge("jobs", "show", record.id).stdout
    assert "source  : reported by the job itself, through its log" in text, text
    assert f"  host    : {host}: {len(laptop_records)} process(es) (launcher 1, worker " in text, text
    # `forge jobs replay` has the environment fingerprint the Ray job recorded: --strict accepts.
    replay = _forge("jobs", "replay", record.id, "--dry-run", "--strict")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout[replay.stdout.index("{"):])["replay"]["environment"] == back["launcher"]["environment"]
    # The end of the attempt: Ray deletes its copy of the job package, so the launcher's outputs
    # manifest came back through the log too, into the laptop's job directory
    manifest, = [json.loads(p.read_text()) for p in (Path(record.dir) / "lineage").glob("outputs-a*-*.json")]
    assert (manifest["job_id"], manifest["attempt"], manifest["host"]) == (record.id, 0, host)
    assert manifest["dirs"][0]["kind"] == "work" and manifest["dirs"][0]["files"], manifest


def test_entrypoint_own_setup_hook_runs_after_the_forge_hook(ray_client, make_experiment, tmp_path, monkeypatch):
    ray_head = ray_client
    # Address from forge.yaml this time (no FORGE_RAY_ADDRESS), token from Ray's own variable.
    monkeypatch.delenv("FORGE_RAY_ADDRESS")
    monkeypatch.delenv("FORGE_RAY_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_head.token)
    exp = make_experiment("python -m workload.ray_train --own-hook", "ray", {"address": ray_head.address})
    sub, record, log = _submit(exp, tmp_path)

    assert (record.status, record.exit_code) == ("succeeded", 0), log
    workers = [r for r in _results(log) if r["where"] != "driver"]
    assert all(r["tag"].startswith("patched:") for r in workers), workers
    # the hook the entrypoint passed to ray.init ran in each worker, as well as ours
    assert all(r["own_hook"] == str(r["pid"]) for r in workers), workers
    assert {r["pid"] for r in workers} <= _patched_pids(_provenance(_node_job_dir(ray_head, record)))


def test_tampered_plugin_fails_the_job_with_the_verification_code(ray_client, make_experiment, tmp_path):
    from starforge.experiment.lock import open_experiment_registry
    from starforge.experiment.stage import resolve_job_in, stage_job

    exp = make_experiment("python -m workload.ray_train", "ray")
    plan = resolve_job_in(exp, backend="ray")
    backend = RayBackend({}, JobStore(tmp_path / "jobs"))
    job_dir = backend.staging_dir(exp, plan.spec.id)
    staged = stage_job(plan, job_dir, open_experiment_registry(plan.experiment))
    target = job_dir / "forge_plugins" / "mark-worker" / "mark_worker.py"
    target.chmod(0o644)
    target.write_text(target.read_text() + "\nEXTRA = 1\n")

    record = backend.submit(staged, detach=False)
    chunks: list[str] = []
    record = wait(backend, record, chunks.append)
    log = "".join(chunks)
    assert (record.status, record.exit_code) == ("failed", 10), log
    assert "mark_worker.py" in log  # the mismatch report names the changed file
    assert "RESULTS" not in log  # the training entrypoint never ran


def test_resubmitting_a_staged_job_gets_a_new_submission_id(ray_client, make_experiment, tmp_path):
    exp = make_experiment("python -c 'import sys; sys.exit(4)'", "ray")
    sub, first, log = _submit(exp, tmp_path)
    assert (first.status, first.exit_code) == ("failed", 4), log

    again = sub.backend.submit(sub.staged, detach=True)
    assert again.backend_ref["submission_id"] == f"forge-{sub.spec.id}-2"
    # same directory, same bytes: the package is content-addressed and not uploaded twice
    assert again.backend_ref["package"] == first.backend_ref["package"]
    assert wait(sub.backend, again, lambda _: None).exit_code == 4


def test_cancel_stops_a_running_job(ray_client, make_experiment, tmp_path):
    ray_head = ray_client
    exp = make_experiment("python -c 'import time; print(\"sleeping\", flush=True); time.sleep(300)'", "ray")
    sub = submit_experiment(exp, (), backend="ray", detach=True)
    backend = sub.backend
    deadline = time.monotonic() + 60
    while "sleeping" not in "".join(backend.logs(sub.record)) and time.monotonic() < deadline:
        time.sleep(0.5)
    cancelled = _forge("jobs", "cancel", sub.record.id, "--json")  # through the CLI, from another process
    assert cancelled.returncode == 0, cancelled.stderr
    record = JobStore().get(sub.record.id)
    assert record.status == "cancelled"
    _wait_for_ray_status(ray_head, record, "STOPPED", 30)
    assert backend.refresh(record).status == "cancelled"
    # Stopped (SIGTERM), the launcher still gave the plugin folders of Ray's copy back to their owner.
    assert _folders_not_writable(_node_job_dir(ray_head, record)) == []
    # A stopped job still has the launcher's own record: it was in the log before the entrypoint started.
    launchers = [r for r in _provenance(Path(record.dir)) if r["role"] == "launcher"]
    assert len(launchers) == 1 and launchers[0]["reported_via"] == "job log", launchers


# A trainer that prints one frame of [ x 100,000 (133 KB of base64, under the cap) after the launcher's good frames.
DEEP_FRAME = '''\
import base64
import sys

sys.stdout.write("@forge-provenance-v1:" + base64.b64encode(("[" * 100000 + "]" * 100000).encode()).decode() + "\\n")
sys.stdout.flush()
'''


def test_a_deeply_nested_frame_loses_no_record_and_the_job_ends_only_once_its_log_is_read(
        ray_client, make_experiment, tmp_path, monkeypatch):
    from starforge.backends import ray as ray_backend

    ray_head = ray_client
    exp = make_experiment("python -m workload.deep_frame", "ray")
    (exp / "workload" / "deep_frame.py").write_text(DEEP_FRAME)
    sub = submit_experiment(exp, (), backend="ray", detach=True)
    record, job_dir = sub.record, Path(sub.record.dir)
    _wait_for_ray_status(ray_head, record, "SUCCEEDED", 120)

    # The job ended on Ray, but its records cannot be kept here yet (a file where provenance/ goes):
    # the record stays open, saying why, and the next look reads the log again.
    (job_dir / "provenance").write_text("in the way\n")
    first = _forge("jobs", "show", record.id)
    assert first.returncode == 0 and "Traceback" not in first.stderr, first.stderr
    assert "status   : succeeded" not in first.stdout, first.stdout
    assert "message  : ended on Ray (succeeded); its log could not be read for provenance yet (try 1 of 5" in first.stdout
    assert "provenance: Not a directory" in first.stdout, first.stdout
    assert not JobStore().get(record.id).final
    (job_dir / "provenance").unlink()
    time.sleep(ray_backend.LOG_RETRY_GAP)
    shown = _forge("jobs", "show", record.id, "--json")
    assert shown.returncode == 0, shown.stderr
    details = json.loads(shown.stdout)
    assert (details["status"], details["exit_code"], details["message"]) == ("succeeded", 0, "Job finished successfully."), details
    back = details["provenance"]
    assert back["reported_via"] == ["job log"] and back["launcher"]["pid"] and back["processes"] >= 1, back  # the good frames kept
    assert back["from_log"]["refused"] == {"JSON nested deeper than 100 levels": 1}, back["from_log"]
    text = _forge("jobs", "show", record.id).stdout
    assert "  refused : 1 x JSON nested deeper than 100 levels" in text, text

    # A log that stays unreadable: after LOG_TRIES reads the job ends anyway, saying why.
    monkeypatch.setattr(ray_backend, "LOG_RETRY_GAP", 0.0)
    other_dir = tmp_path / "jobs" / "again"
    other_dir.mkdir(parents=True)
    (other_dir / "provenance").write_text("in the way\n")
    store = JobStore()
    again = record.with_changes(id="again", dir=str(other_dir), status="running", exit_code=None, finished=None)
    store.save(again)
    backend = RayBackend({}, store)
    for _ in range(ray_backend.LOG_TRIES - 1):
        again = backend.refresh(again)
        assert not again.final and again.backend_ref["log_read"]["tries"] >= 1
    again = backend.refresh(again)
    assert (again.status, again.exit_code) == ("succeeded", 0) and "log_read" not in again.backend_ref
    assert again.message.startswith("Job finished successfully; its provenance was not read: the job's log could not be "
                                     "read (5 tries in "), again.message
    assert again.message.endswith(": Not a directory"), again.message
    assert store.get("again").final


def test_reads_of_an_ended_jobs_log_are_bounded_in_count_and_time():
    from starforge.backends.ray import LOG_DEADLINE, LOG_RETRY_GAP, LOG_TRIES, after_log_read
    from starforge.jobs.jobrecord import JobRecord

    live = JobRecord(id="j", name="j", backend="ray", status="running", dir="/nowhere/j", created="2026-01-01T00:00:00Z",
                     backend_ref={"address": "http://127.0.0.1:1", "submission_id": "forge-j"})
    ended = live.with_changes(status="failed", exit_code=3, message="boom.")
    waiting = after_log_read(live, ended, "HTTP 500", now=1000.0)
    assert not waiting.final and waiting.backend_ref["log_read"] == {"tries": 1, "first": 1000.0,
                                                                    "next": 1000.0 + LOG_RETRY_GAP, "error": "HTTP 500"}
    assert after_log_read(waiting, ended, None, now=1001.0) == ended  # read at last: final, no trace of the waiting
    late = after_log_read(waiting, ended, "HTTP 500", now=1000.0 + LOG_DEADLINE)  # the second try, past the deadline
    assert late.final and late.message.startswith("boom; its provenance was not read: the job's log could not be read (2 tries")
    for _ in range(LOG_TRIES - 2):
        waiting = after_log_read(waiting, ended, "HTTP 500", now=1001.0)
        assert not waiting.final
    assert after_log_read(waiting, ended, "HTTP 500", now=1001.0).final


class _HeadLosingAnswers:
    """The Jobs API as a head that creates each submitted job and then, for the first
    *lost* submits, never answers (what a timeout after the head acted looks like); jobs
    named in *taken* are another client's. A fault a real head cannot be made to give on cue."""

    def __init__(self, lost: int = 0, taken: tuple = ()):
        self.jobs = {sid: {"submission_id": sid, "metadata": {"forge_job_id": "someone-else"}} for sid in taken}
        self.lost = lost

    def job(self, sid):
        return self.jobs.get(sid)

    def submit(self, request):
        self.jobs[request["submission_id"]] = dict(request)
        if self.lost:
            self.lost -= 1
            raise BackendError("cannot reach the Ray Jobs API at http://head:8265: timed out")
        return request["submission_id"]


def test_a_submit_whose_answer_was_lost_is_not_started_a_second_time():
    from starforge.backends.ray import SUBMIT_TOKEN, _submit_unique

    request = {"entrypoint": "python3 -c pass", "metadata": {"forge_job_id": "j"}}
    head = _HeadLosingAnswers(lost=1)
    assert _submit_unique(head, "forge-j", request) == "forge-j"
    assert list(head.jobs) == ["forge-j"]  # one job, not forge-j and forge-j-2
    assert head.jobs["forge-j"]["metadata"]["forge_job_id"] == "j" and len(head.jobs["forge-j"]["metadata"][SUBMIT_TOKEN]) == 32
    # An id another client holds is passed over, before the submit or after a failed one.
    head = _HeadLosingAnswers(taken=("forge-j",))
    assert _submit_unique(head, "forge-j", request) == "forge-j-2"
    # Each submission has a token of its own: a job of an earlier submission is never taken for this one's.
    earlier = _HeadLosingAnswers(lost=1)
    _submit_unique(earlier, "forge-j", request)
    assert earlier.jobs["forge-j"]["metadata"][SUBMIT_TOKEN] != head.jobs["forge-j-2"]["metadata"][SUBMIT_TOKEN]
    class Raced(_HeadLosingAnswers):  # another client takes the id between the look and the submit
        def submit(self, request):
            if request["submission_id"] == "forge-j":
                self.jobs["forge-j"] = {"submission_id": "forge-j", "metadata": {"forge_job_id": "j"}}
                raise BackendError("Ray Jobs API POST /api/jobs/: HTTP 500: job forge-j already exists")
            return super().submit(request)
    raced = Raced()
    assert _submit_unique(raced, "forge-j", request) == "forge-j-2" and SUBMIT_TOKEN not in raced.jobs["forge-j"]["metadata"]
    # A failed submit that left no job says why.
    class Refusing(_HeadLosingAnswers):
        def submit(self, request):
            raise BackendError("Ray Jobs API POST /api/jobs/: HTTP 400: bad runtime_env")
    with pytest.raises(BackendError, match="HTTP 400"):
        _submit_unique(Refusing(), "forge-j", request)


def test_clients_of_the_jobs_api_load_the_ca_bundle_once_and_follow_ssl_cert_file(monkeypatch, tmp_path):
    """Each look at a job opens a client: the CA bundle is loaded once per process (a
    noticeable part of a second each time), again only when SSL_CERT_FILE names another."""
    import certifi
    import httpx

    import starforge.backends.ray as ray_backend

    made = []
    real = httpx.create_ssl_context

    def counted(*args, **kwargs):
        made.append(os.environ.get("SSL_CERT_FILE"))
        return real(*args, **kwargs)

    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    monkeypatch.setattr(ray_backend, "_TLS", {}, raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    for _ in range(3):
        RayJobsClient("http://127.0.0.1:1", "t").close()
    assert made == [None]
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    RayJobsClient("http://127.0.0.1:1", "t").close()
    RayJobsClient("http://127.0.0.1:1", "t").close()
    assert made == [None, str(bundle)]


def test_package_is_deterministic_and_holds_exactly_the_files(tmp_path):
    job = tmp_path / "job"
    (job / "forge_plugins" / "p").mkdir(parents=True)
    (job / "jobspec.json").write_text("{}")
    (job / "forge_plugins" / "p" / "m.py").write_text("x = 1\n")
    (job / "run.sh").write_text("#!/bin/sh\n")
    (job / "run.sh").chmod(0o755)
    name1, data1 = build_package(job)
    os.utime(job / "jobspec.json", (1, 1))  # times do not matter
    name2, data2 = build_package(job)
    assert (name1, data1) == (name2, data2)
    assert name1.startswith("starforge_") and name1.endswith(".zip")
    with zipfile.ZipFile(BytesIO(data1)) as zf:
        infos = {i.filename: i for i in zf.infolist()}
    assert sorted(infos) == ["forge_plugins/p/m.py", "jobspec.json", "run.sh"]
    assert stat.S_IMODE(infos["run.sh"].external_attr >> 16) == 0o755
    assert stat.S_IMODE(infos["jobspec.json"].external_attr >> 16) == 0o644
    # records read back from an earlier run's log are not shipped again: the same package
    (job / "provenance").mkdir()
    (job / "provenance" / "log-0001.json").write_text("{}")
    assert build_package(job) == (name1, data1)
    (job / "forge_plugins" / "p" / "m.py").chmod(0o400)  # staged read-only: stays read-only
    with zipfile.ZipFile(BytesIO(build_package(job)[1])) as zf:
        assert stat.S_IMODE(zf.getinfo("forge_plugins/p/m.py").external_attr >> 16) == 0o444
    (job / "link").symlink_to("jobspec.json")
    with pytest.raises(BackendError, match="not a regular file"):
        build_package(job)


def test_address_resolution_and_settings(monkeypatch):
    assert resolve_address({}, {}) == "http://127.0.0.1:8265"
    assert resolve_address({"address": "10.1.2.3:8265/"}, {}) == "http://10.1.2.3:8265"
    assert resolve_address({"address": "http://a:1"}, {"FORGE_RAY_ADDRESS": "http://b:2"}) == "http://b:2"
    with pytest.raises(BackendError, match="Ray Client address"):
        resolve_address({"address": "ray://head:10001"}, {})
    with pytest.raises(ManifestError, match="did you mean 'ray.address'"):
        RayBackend({"adress": "x"})


def test_a_head_with_token_auth_refuses_a_missing_or_wrong_token(ray_client, make_experiment, tmp_path, monkeypatch):
    exp = make_experiment("python -m workload.ray_train", "ray")
    monkeypatch.setenv("FORGE_RAY_TOKEN", "0" * 64)
    with pytest.raises(BackendError, match="refused the request") as info:
        submit_experiment(exp, (), backend="ray", store=JobStore(tmp_path / "jobs"))
    assert "FORGE_RAY_TOKEN" in info.value.hint
    assert JobStore(tmp_path / "jobs").list() == []  # nothing recorded for a job that never started


def test_unreachable_head_is_a_clear_error(make_experiment, tmp_path, monkeypatch, unused_port):
    monkeypatch.setenv("FORGE_RAY_ADDRESS", f"http://127.0.0.1:{unused_port}")
    exp = make_experiment("python -m workload.ray_train", "ray")
    with pytest.raises(BackendError, match="cannot reach the Ray Jobs API"):
        submit_experiment(exp, (), backend="ray", store=JobStore(tmp_path / "jobs"))
