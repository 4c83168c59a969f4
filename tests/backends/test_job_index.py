"""The job index (SPEC §18 "Which jobs ran it"): records hold pins and parameters, the SQLite
index answers --plugin/--param over them, follows record changes, survives removal
(tombstones), corruption (rebuilt, said once), unreadable records (named, others listed), a
network file system (moved to local disk, else the records are read) and racing processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from support.experiment import Project

from starforge.errors import UsageError
from starforge.experiment.job_query import find_jobs
from starforge.jobs import jobindex
from starforge.jobs.jobindex import JobIndex, param_matches, pin_matches
from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore

D1 = "sf1:" + "1" * 64
D2 = "sf1:" + "2" * 64
D3 = "sf1:" + "3" * 64


def _record(job_id, plugins=(("alice/dr-grpo@1.0.0", D1),), params=None, created="2026-12-01T10:00:00Z", **kw):
    pins = None if plugins is None else [{"ref": r, "digest": d} for r, d in plugins]
    return JobRecord(id=job_id, name="exp", backend="local", status="succeeded", dir=f"/nonexistent/{job_id}",
                     created=created, plugins=pins, params=params if params is not None or plugins is None else {}, **kw)


def _ids(jobs):
    return [j.record.id for j in jobs]


@pytest.fixture
def store(tmp_path):
    store = JobStore(tmp_path / "jobs")
    store.save(_record("a", params={"grpo.lr": 1e-6, "opsd.scale": 0.5, "tag": "0.5", "on": True},
                       created="2026-12-01T10:00:01Z"))
    store.save(_record("b", plugins=(("alice/dr-grpo@1.1.0", D2), ("recipe:toy@0.1", D3)),
                       params={"grpo.lr": 1e-5, "opsd.scale": 1.0}, created="2026-12-01T10:00:02Z"))
    store.save(_record("c", plugins=(("bob/dr-grpo@1.0.0", D3),), params={"opsd.scale": 1}, created="2026-12-01T10:00:03Z"))
    return store


def test_a_version_any_version_and_a_digest_find_the_jobs_that_ran_them(store):
    index = JobIndex(store)
    assert _ids(index.query(plugin="alice/dr-grpo@1.0.0")[1]) == ["a"]
    assert _ids(index.query(plugin="alice/dr-grpo")[1]) == ["a", "b"]
    assert _ids(index.query(plugin=D3)[1]) == ["b", "c"]
    assert _ids(index.query(plugin="bob/dr-grpo@1.1.0")[1]) == []


def test_no_filter_gives_every_job_and_a_yank_check_keeps_the_jobs_that_ran_a_yanked_pin(store):
    found = find_jobs(yanked=True, store=store, yank_check=lambda pins: ({D3: f"ran {D3}: yanked: bad"}, []))
    assert _ids(found.matches) == ["b", "c"] and found.ran["c"] == [f"ran {D3}: yanked: bad"]
    assert _ids(JobIndex(store).query()[1]) == ["a", "b", "c"]


def test_parameters_are_compared_as_typed(store):
    index = JobIndex(store)
    assert _ids(index.query(params=[("opsd.scale", "1")])[1]) == ["b", "c"]  # float 1.0 and int 1
    assert _ids(index.query(params=[("opsd.scale", "0.5")])[1]) == ["a"]
    assert _ids(index.query(params=[("tag", "0.5")])[1]) == ["a"]  # a string parameter: the text as written
    assert _ids(index.query(params=[("grpo.lr", "1e-6")])[1]) == ["a"]
    assert _ids(index.query(params=[("grpo.lr", "1e-6"), ("opsd.scale", "1")])[1]) == []
    assert param_matches({"on": True}, "on", "true") and not param_matches({"on": True}, "on", "1")
    assert not param_matches({"n": 2}, "n", "2.5") and param_matches({"n": 2}, "n", "2")
    assert not param_matches({"x": 1}, "y", "1")


def test_pin_matching_reads_refs_exactly():
    pin = {"ref": "alice/dr-grpo@1.0.0", "digest": D1}
    assert pin_matches(pin, "alice/dr-grpo") and pin_matches(pin, D1) and pin_matches(pin, "alice/dr-grpo@1.0.0")
    assert not pin_matches(pin, "alice/dr-grp") and not pin_matches(pin, "alice/dr-grpo@1.0") and not pin_matches(pin, "dr-grpo")
    assert not pin_matches({"ref": "recipe:dr-grpo@1.0.0", "digest": D1}, "alice/dr-grpo")


def test_the_index_follows_new_changed_and_removed_records_and_keeps_tombstones(store):
    index = JobIndex(store)
    assert _ids(index.query(plugin="alice/dr-grpo")[1]) == ["a", "b"]
    store.save(_record("d", plugins=(("alice/dr-grpo@1.0.0", D1),), created="2026-12-01T10:00:04Z"))
    store.update("b", lambda r: r.with_changes(plugins=[{"ref": "carol/other@1.0.0", "digest": D2}]))
    sync, matches, _ = index.query(plugin="alice/dr-grpo")
    assert _ids(matches) == ["a", "d"] and sync.read == 2  # only the two files that changed were read
    store.remove("a")
    assert not (store.root / "a.json").exists()
    sync, matches, _ = index.query(plugin="alice/dr-grpo@1.0.0")
    assert [(j.record.id, j.removed) for j in matches] == [("a", True), ("d", False)]
    assert json.loads((store.root / "removed" / "a.json").read_text())["plugins"][0]["digest"] == D1
    assert [r.id for r in store.list()] == ["b", "c", "d"]  # the tombstone is no job to list


def test_a_settled_store_is_checked_by_its_folders_alone_and_a_new_record_is_still_seen(store, monkeypatch):
    JobIndex(store).sync()  # makes the index's own folder
    old = os.stat(store.root).st_mtime - 30  # settled: no write pending within the folder clock's tick
    os.utime(store.root, (old, old))
    JobIndex(store).sync()
    listed = []
    real = jobindex._listing
    monkeypatch.setattr(jobindex, "_listing", lambda st: listed.append(1) or real(st))
    sync, jobs = JobIndex(store).sync()
    assert not listed and sync.read == 0 and len(jobs) == 3  # the folders as the index last saw them: nothing read
    store.save(_record("d", created="2026-12-01T10:00:09Z"))  # a rename into the folder changes its time
    sync, jobs = JobIndex(store).sync()
    assert listed and sync.read == 1 and [j.record.id for j in jobs][-1] == "d"


def test_a_corrupt_or_truncated_index_is_rebuilt_and_says_so_once(store):
    index = JobIndex(store)
    sync, _ = index.sync()
    assert sync.rebuilt == "missing" and index.path.is_file()
    assert JobIndex(store).sync()[0].rebuilt == ""
    data = index.path.read_bytes()
    index.path.write_bytes(data[: len(data) // 3])
    sync, jobs = JobIndex(store).sync()
    assert sync.rebuilt and "rebuilt" not in sync.rebuilt and len(jobs) == 3
    assert JobIndex(store).sync()[0].rebuilt == ""  # once
    index.path.write_bytes(b"not a database at all" * 100)
    found = find_jobs(plugin="alice/dr-grpo", store=store)
    assert _ids(found.matches) == ["a", "b"]
    assert len([n for n in found.notes if "job index" in n and "rebuilt from 3" in n]) == 1


def test_an_unreadable_record_is_named_and_the_others_are_listed(store):
    (store.root / "broken.json").write_text('{"id": "broken", "na')
    found = find_jobs(plugin="alice/dr-grpo", store=store)
    assert _ids(found.matches) == ["a", "b"]
    assert any(str(store.root / "broken.json") in n and "unreadable" in n for n in found.notes)


def test_old_records_are_backfilled_from_their_jobspec_or_listed_as_pins_unknown(tmp_path, store):
    job_dir = tmp_path / "old-job"
    job_dir.mkdir()
    (job_dir / "jobspec.json").write_text(json.dumps({
        "plugins": [{"ref": "alice/dr-grpo@1.0.0", "digest": D1, "name": "dr-grpo", "owner": "alice", "version": "1.0.0"}],
        "recipe": {"plugins": []}, "hyperparams": {"opsd.scale": 2.0}}))
    old = {k: v for k, v in _record("old").to_dict().items() if k not in ("plugins", "params")}
    (store.root / "old.json").write_text(json.dumps(dict(old, dir=str(job_dir))))
    gone = {k: v for k, v in _record("gone").to_dict().items() if k not in ("plugins", "params")}
    (store.root / "gone.json").write_text(json.dumps(gone))
    found = find_jobs(plugin="alice/dr-grpo@1.0.0", store=store)
    assert _ids(found.matches) == ["old", "a"] and _ids(found.unknown) == ["gone"]
    assert json.loads((store.root / "old.json").read_text())["params"] == {"opsd.scale": 2.0}  # backfilled in the record
    assert _ids(find_jobs(params=("opsd.scale=2",), store=store).matches) == ["old"]


def test_queries_are_checked():
    with pytest.raises(UsageError, match="expected owner/name"):
        find_jobs(plugin="dr-grpo")
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        find_jobs(params=("opsd.scale",))


def test_on_a_network_file_system_the_index_moves_to_local_disk_or_the_records_are_read(store, monkeypatch):
    real = jobindex.filesystem_type
    store_root = os.path.realpath(store.root)
    monkeypatch.setattr(jobindex, "filesystem_type",
                        lambda p: "nfs4" if os.path.realpath(p).startswith(store_root) else real(p))
    index = JobIndex(store)
    assert index.path is not None and str(index.path).startswith("/var/tmp/starforge-")
    try:
        sync, matches, _ = index.query(plugin="alice/dr-grpo")
        assert _ids(matches) == ["a", "b"] and not (store.root / ".index").exists()
        assert os.stat(index.path.parent).st_mode & 0o777 == 0o700
    finally:
        index.path.unlink(missing_ok=True)
    monkeypatch.setattr(jobindex, "filesystem_type", lambda p: "nfs4")  # no local folder either
    index = JobIndex(store)
    assert index.path is None
    sync, matches, _ = index.query(plugin="alice/dr-grpo")
    assert _ids(matches) == ["a", "b"] and sync.where.startswith("records")


RACER = textwrap.dedent("""\
    import sys
    from starforge.jobs.jobindex import JobIndex
    from starforge.jobs.jobrecord import JobRecord
    from starforge.jobs.store import JobStore
    store = JobStore(sys.argv[1]); who = sys.argv[2]
    for i in range(25):
        pin = [{"ref": "alice/dr-grpo@1.0.0", "digest": "sf1:" + "1" * 64}]
        store.save(JobRecord(id=f"{who}-{i}", name="r", backend="local", status="succeeded", dir="/x",
                             created=f"2026-12-01T10:00:{i:02d}Z", plugins=pin, params={"i": i}))
        JobIndex(store).query(plugin="alice/dr-grpo")
    print("ok")
""")


def test_processes_that_submit_and_list_at_once_agree_with_the_records(tmp_path):
    store = JobStore(tmp_path / "jobs")
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(store.root), f"p{n}"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for n in range(4)]
    results = [p.communicate(timeout=120) for p in racers]
    assert all(p.returncode == 0 and out.strip() == "ok" for p, (out, _) in zip(racers, results)), results
    sync, matches, _ = JobIndex(store).query(plugin="alice/dr-grpo")
    assert len(matches) == 100 and sync.rebuilt == ""
    with sqlite3.connect(JobIndex(store).path) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 100


def test_submit_records_pins_and_parameters_and_the_cli_finds_them_after_rm(tmp_path):
    p = Project(tmp_path)
    p.publish(p.plugin("dr-grpo", "1.0.0", params={"opsd.scale": ("float", 1.0)}))
    p.experiment(plugins=["alice/dr-grpo@1.0.0"])
    p.forge("lock")
    run = p.forge("submit", "--set", "opsd.scale=0.5", "--json")
    job = json.loads(run.stdout)
    digest = json.loads(p.lock.read_text())["plugins"][0]["digest"]
    assert job["plugins"] == [{"ref": "alice/dr-grpo@1.0.0", "digest": digest}]
    assert job["params"]["opsd.scale"] == 0.5 and job["params"]["grpo.lr"] == 1e-6
    shown = p.forge("jobs", "show", job["id"]).stdout
    assert f"pins     : alice/dr-grpo@1.0.0  {digest}" in shown and "opsd.scale = 0.5" in shown
    listed = p.forge("jobs", "list", "--plugin", "alice/dr-grpo", "--param", "opsd.scale=0.5").stdout
    assert job["id"] in listed and f"ran alice/dr-grpo@1.0.0 {digest}" in listed
    assert p.forge("jobs", "list", "--param", "opsd.scale=1").stdout == ""
    p.forge("jobs", "rm", job["id"])
    after = json.loads(p.forge("jobs", "list", "--plugin", digest, "--json").stdout)
    assert [(j["id"], j["removed"]) for j in after] == [(job["id"], True)]
