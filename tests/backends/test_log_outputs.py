"""Outputs manifests framed in a Ray job's log, read back as untrusted input."""

from __future__ import annotations

import base64
import io
import itertools
import json

from starforge.cluster.lineage import MANIFEST_SCHEMA
from starforge.cluster.provenance_log import OUTPUTS_CHUNK, emit_outputs
from starforge.jobs.log_outputs import collect_outputs, read_outputs, store_outputs
from starforge.jobs.outputs import read_manifests


def _frames(doc) -> str:
    out = io.StringIO()
    emit_outputs(json.dumps(doc), out)
    return out.getvalue()


def _manifest(job_id="job-1", host="node-a", files=3):
    return {"schema": MANIFEST_SCHEMA, "job_id": job_id, "attempt": 0, "host": host, "ended": "t", "sample_above": 10,
            "dirs": [{"kind": "work", "declared": "work/", "path": "/w", "files": [[f"f{i}", i, i] for i in range(files)]}]}


def test_a_manifest_of_many_frames_comes_back_whole_and_is_stored_under_a_name_forge_makes(tmp_path):
    big = _manifest(files=5000)
    text = "trainer says hi\n" + _frames(big) + "more output\n"
    assert text.count("@forge-outputs-v1:") > 1 and len(max(text.splitlines(), key=len)) <= OUTPUTS_CHUNK + 40
    manifests, refused = collect_outputs(text, "job-1")
    assert manifests == [big] and refused == {}
    path, = store_outputs(tmp_path, manifests)
    assert path == tmp_path / "lineage" / "outputs-a0-node-a.json" and json.loads(path.read_text()) == big


def test_what_the_job_could_have_planted_is_refused_and_counted(tmp_path):
    cut = _frames(_manifest(files=5000)).splitlines()
    text = "\n".join([
        *_frames(_manifest(job_id="someone-else")).splitlines(),
        *_frames(_manifest(host="../../etc")).splitlines(),
        *_frames({"schema": MANIFEST_SCHEMA, "job_id": "job-1"}).splitlines(),
        "@forge-outputs-v1:0/1:!!!not base64",
        *cut[:1], *cut[2:],  # a piece missing
        "@forge-outputs-v1:0/1:" + base64.b64encode(b"[" * 100_000).decode(),  # nested past any reader
    ])
    manifests, refused = collect_outputs(text, "job-1")
    assert manifests == []
    assert refused == {"another job's": 1, "a host or attempt forge does not name files by": 1,
                       "not an outputs manifest": 2, "not a frame": 1, "a piece out of order": 1}
    manifests, refused = collect_outputs(_frames(_manifest(files=5000)), "job-1", max_bytes=1000)
    assert manifests == [] and set(refused) == {"past 1000 bytes"}


def _from(source: str, doc) -> list:
    """*doc*'s frames as Ray forwards a worker's lines into the job's log: behind its prefix."""
    return [f"\x1b[36m({source})\x1b[0m {line}" for line in _frames(doc).splitlines()]


def _interleaved(*sources: list) -> str:
    lines = []
    for row in itertools.zip_longest(*sources):
        lines += [line for line in row if line is not None]
    return "\n".join(lines) + "\n"


def test_each_hosts_manifest_is_kept_and_a_bad_one_among_them_spoils_none_of_the_others(tmp_path):
    # The launcher's own (no prefix), then workers' frames as Ray forwards them, line by line interleaved.
    text = _frames(_manifest(host="rh", files=3000)) + _interleaved(
        _from("host_manifest pid=11, ip=10.0.0.2", _manifest(host="rn1", files=3000)),
        _from("host_manifest pid=12, ip=10.0.0.3", _manifest(host="rn2 ; rm -rf", files=3000)),  # not a plain name
        _from("write pid=13, ip=10.0.0.4", _manifest(job_id="job-0", host="rn3", files=3000)),  # another job's
        _from("host_manifest pid=14, ip=10.0.0.5", _manifest(host="rn4", files=3000)),
    )
    assert text.count("@forge-outputs-v1:0/2:") == 5 and text.count("@forge-outputs-v1:1/2:") == 5  # two frames each
    found = read_outputs(text, "job-1")
    assert [m["host"] for m in found.manifests] == ["rh", "rn1", "rn4"]
    assert found.refused == {"a host or attempt forge does not name files by": 1, "another job's": 1}
    assert found.refused_from == ["host_manifest pid=12, ip=10.0.0.3", "write pid=13, ip=10.0.0.4"]
    written = store_outputs(tmp_path, found.manifests, found.summary())
    assert sorted(p.name for p in written) == ["outputs-a0-rh.json", "outputs-a0-rn1.json", "outputs-a0-rn4.json"]
    # forge jobs outputs lists the three hosts, and says what was not kept, and from where
    manifests, problems = read_manifests(tmp_path)
    assert [m["host"] for m in manifests] == ["rh", "rn1", "rn4"]
    [problem] = problems
    assert "2 frames of outputs manifests in the job's log not kept" in problem
    assert "another job's (1)" in problem and "from host_manifest pid=12, ip=10.0.0.3; write pid=13" in problem


def test_one_hosts_manifest_past_its_bound_is_refused_and_the_others_kept():
    text = _frames(_manifest(host="rh", files=10)) + "\n".join(
        _from("host_manifest pid=11, ip=10.0.0.2", _manifest(host="rn1", files=5000))) + "\n" + "\n".join(
        _from("host_manifest pid=12, ip=10.0.0.3", _manifest(host="rn2", files=10))) + "\n"
    found = read_outputs(text, "job-1", host_cap=4000)
    assert [m["host"] for m in found.manifests] == ["rh", "rn2"]
    assert found.refused == {"larger than 4000 bytes for one host": 1}
    assert found.refused_from == ["host_manifest pid=11, ip=10.0.0.2"]


def test_frames_past_the_bound_of_the_whole_log_are_counted_not_read():
    first, second = _frames(_manifest(host="rh", files=10)), _frames(_manifest(host="rn1", files=5000))
    found = read_outputs(first + second, "job-1", max_bytes=len(first) + 100)
    assert [m["host"] for m in found.manifests] == ["rh"]
    assert found.refused == {f"past {len(first) + 100} bytes": second.count("\n")}


def test_a_second_manifest_of_the_same_host_and_a_manifest_cut_short_are_refused():
    cut = _from("host_manifest pid=12, ip=10.0.0.3", _manifest(host="rn2", files=5000))[:-1]
    text = _frames(_manifest(host="rh")) + _frames(_manifest(host="rh", files=1)) + "\n".join(cut) + "\n"
    found = read_outputs(text, "job-1")
    assert [(m["host"], len(m["dirs"][0]["files"])) for m in found.manifests] == [("rh", 3)]
    assert found.refused == {"a second manifest of the same attempt and host": 1, "cut short": 1}
    assert found.refused_from == ["the launcher", "host_manifest pid=12, ip=10.0.0.3"]
