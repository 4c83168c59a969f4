"""Provenance records framed in a job's log and read back on the laptop, as untrusted input."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from starforge.cluster import provenance_log
from starforge.cluster.provenance import summarize
from starforge.jobs.log_provenance import FETCH_FILE, MAX_BYTES, collect, read_summary, store

JOB = "exp-20261203-101010-abcd"


def _record(host="node-a", pid=100, role="worker", attempt=1, **extra) -> dict:
    rec = {"schema": "forge/provenance/v1", "job_id": JOB, "role": role, "mode": "launch", "host": host, "pid": pid,
           "attempt": attempt, "argv": ["python"], "python": "3.11.7", "executable": "/usr/bin/python3",
           "core_version": "0.1.0", "started": None, "written": None, "disabled": False,
           "plugins": [{"ref": "tester/mark@1.0.0", "status": "loaded", "verified": True}],
           "patches": [{"target": "m:f", "plugin": "tester/mark@1.0.0", "mode": "wrap", "status": "applied"}],
           "failure": None, "scheduler": {}, "environment": None, "replay_of": None}
    rec.update(extra)
    return rec


def _line(rec) -> str:
    out = io.StringIO()
    assert provenance_log.emit(rec, out)
    return out.getvalue()


def _raw_frame(obj) -> str:
    return provenance_log.MARKER + base64.b64encode(json.dumps(obj).encode()).decode() + "\n"


def test_frames_behind_ray_prefixes_are_read_and_the_last_frame_of_each_process_wins():
    first = _record(role="launcher", pid=1, environment={"python": "3.11.7"})
    later = _record(pid=7, patches=[])
    latest = _record(pid=7)  # the same process writes its record again, now patched
    log = ("plugin  : tester/mark@1.0.0 loaded\n" + _line(first)
           + "\x1b[36m(task pid=7, ip=10.1.0.2)\x1b[0m " + _line(later)
           + "training step 1\n"
           + "\x1b[36m(task pid=7, ip=10.1.0.2)\x1b[0m " + _line(latest))
    got = collect(log, JOB)
    assert got.frames == 3 and not got.refused and not got.cut
    assert [(r["role"], r["pid"]) for r in got.records] == [("launcher", 1), ("worker", 7)]
    assert got.records[1]["patches"] == latest["patches"]
    assert all(r["reported_via"] == "job log" for r in got.records)


def test_a_process_s_older_record_reaching_the_log_again_later_does_not_replace_its_latest():
    # Whatever order the log shows a process's frames in, the state it wrote last is kept: here the
    # record the worker wrote at its start appears again after the one it wrote once patched.
    booted = _record(pid=7, patches=[], written="2026-12-05T15:35:01.120Z")
    patched = _record(pid=7, written="2026-12-05T15:35:01.700Z")
    other = _record(pid=8, patches=[], written="2026-12-05T15:35:00.000Z")
    prefix = "\x1b[36m(pid=7, ip=10.1.0.2)\x1b[0m "
    log = prefix + _line(booted) + prefix + _line(patched) + _line(other) + prefix + _line(booted)
    got = collect(log, JOB)
    assert (got.frames, got.refused) == (4, {})
    kept = {r["pid"]: r for r in got.records}
    assert kept[7]["patches"] == patched["patches"] and kept[7]["written"] == patched["written"]
    assert kept[8]["patches"] == []
    # Written in the same millisecond (or not saying when): the later frame in the log is kept.
    again = _record(pid=7, patches=[], written=patched["written"])
    assert collect(log + prefix + _line(again), JOB).records[0]["patches"] == []


def test_bad_frames_are_refused_with_a_reason_and_unknown_fields_dropped():
    good = _record(extra_field="kept out")
    log = "".join([
        _line(good),
        _raw_frame(_record(job_id="another-job")),
        _raw_frame(_record(pid="12")),
        _raw_frame(_record(host="bad\nhost")),
        _raw_frame({"schema": "forge/plan-ledger/v1"}),
        _raw_frame([1, 2]),
        provenance_log.MARKER + "bm90IGpzb24=\n",  # base64 of "not json"
        _line(good)[:40] + "\n",  # a line cut short
    ])
    got = collect(log, JOB)
    assert len(got.records) == 1 and "extra_field" not in got.records[0]
    assert got.refused == {
        "a record of another job": 1,
        "field pid has the wrong type": 1,
        "bad host name": 1,
        "not a provenance record (schema)": 1,
        "not a JSON object": 1,
        "not base64 of JSON (cut or garbled)": 2,
    }


def test_a_frame_ray_forwarded_in_pieces_is_joined_again_and_one_cut_for_good_is_refused():
    # Ray's log monitor read worker 7's frame half-written: its halves reach the driver's log as
    # two lines of that worker, with another worker's line between them.
    seven = "\x1b[36m(Probe pid=7, ip=10.1.0.2)\x1b[0m "
    eight = "\x1b[36m(probe pid=8, ip=10.1.0.2)\x1b[0m "
    whole = _line(_record(pid=7)).rstrip("\n")
    cut = len(provenance_log.MARKER) + 101
    cut_for_good = _line(_record(pid=7, patches=[]))[:90]  # a later frame of 7, never continued
    log = (seven + whole[:cut] + "\n" + eight + _line(_record(pid=8)) + seven + whole[cut:] + "\n"
           + seven + cut_for_good + "\n" + seven + "training step 1\n")
    got = collect(log, JOB)
    assert sorted((r["pid"], r["patches"][0]["status"]) for r in got.records) == [(7, "applied"), (8, "applied")]
    assert got.frames == 3 and got.refused == {"not base64 of JSON (cut or garbled)": 1}
    # the same halves without Ray's prefix (not forwarded lines): not joined
    assert collect(whole[:cut] + "\n" + whole[cut:] + "\n", JOB).refused == {"not base64 of JSON (cut or garbled)": 1}


def test_a_deeply_nested_frame_is_one_refused_frame_and_the_good_records_are_kept(tmp_path):
    # 133 KB of base64, under the cap: json.loads alone ends in a RecursionError
    deep = provenance_log.MARKER + base64.b64encode(("[" * 100_000 + "]" * 100_000).encode()).decode() + "\n"
    nested = _record(pid=9, plugins=[{"ref": "x", "deep": json.loads("[" * 150 + "]" * 150)}])  # parses, too deep to keep
    seven = "\x1b[36m(task pid=7, ip=10.1.0.2)\x1b[0m "
    log = _line(_record(role="launcher", pid=1)) + deep + seven + deep + _raw_frame(nested) + seven + _line(_record(pid=7))
    got = collect(log, JOB)
    assert sorted(r["pid"] for r in got.records) == [1, 7]
    assert got.refused == {"JSON nested deeper than 100 levels": 3}
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    store(job_dir, got)
    assert read_summary(job_dir)["refused"] == {"JSON nested deeper than 100 levels": 3}
    assert summarize(str(job_dir))["processes"] == 2


def test_frames_past_the_cap_are_counted_not_read():
    big = _record(argv=["x" * 400_000])
    log = "".join(_line(_record(pid=p, argv=big["argv"])) for p in range(1, 5))
    got = collect(log, JOB)
    assert got.bytes_read <= MAX_BYTES
    assert len(got.records) == 1 and got.cut == 3  # each frame is ~0.5 MiB of base64


def test_records_are_stored_under_names_forge_makes_never_the_records_own(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    hostile = _record(host="../../escape", pid=5)
    got = collect(_line(_record(role="launcher", pid=1)) + _line(hostile), JOB)
    folder = store(job_dir, got)
    assert sorted(p.name for p in folder.iterdir()) == sorted([FETCH_FILE, "log-0001.json", "log-0002.json"])
    assert sorted(p.name for p in job_dir.iterdir()) == ["provenance"]  # nothing beside it, no temp dir left
    assert not list(tmp_path.glob("escape*"))
    summary = summarize(str(job_dir))
    assert set(summary["per_host"]) == {"node-a", "../../escape"}
    assert summary["reported_via"] == ["job log"]
    assert read_summary(job_dir)["records"] == 2


def test_launcher_node_list_names_the_hosts_without_a_record(tmp_path):
    job_dir = tmp_path / "job"
    (job_dir / "provenance").mkdir(parents=True)
    launcher = _record(role="launcher", pid=1, host="n1", scheduler={"slurm": {"job_id": "4", "nodes": ["n1", "n2"]}})
    Path(job_dir / "provenance" / "a1-n1-1.json").write_text(json.dumps(launcher))
    summary = summarize(str(job_dir))
    assert summary["expected_hosts"] == ["n1", "n2"] and summary["missing_hosts"] == ["n2"]


def test_the_log_reader_keeps_every_field_a_process_writes_and_the_record_has_one_definition():
    from starforge.cluster import provenance
    from starforge.jobs import log_provenance

    sample = {"job_id": "j-1", "role": "launcher", "mode": "launch", "host": "node-1", "pid": 42, "attempt": 0,
              "argv": ["train.py"], "python": "3.11.2", "executable": "/usr/bin/python3", "core_version": "1.0",
              "started": None, "written": None, "disabled": False, "plugins": [], "patches": [], "failure": None,
              "scheduler": {}, "environment": None, "replay_of": None}
    record = provenance.new_record(**sample)
    assert list(record) == list(provenance.FIELDS)
    kept, reason = log_provenance.check_record(record, "j-1")
    assert reason == "" and kept == {**record, "reported_via": "job log"}
    assert log_provenance.FIELDS is provenance.FIELDS and log_provenance.SCHEMA == record["schema"]
    for wrong in ({k: v for k, v in sample.items() if k != "host"}, {**sample, "hostname": "node-1"}):
        with pytest.raises(ValueError, match="a provenance record has the fields"):
            provenance.new_record(**wrong)
