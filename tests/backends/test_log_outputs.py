"""Outputs manifests framed in a Ray job's log, read back as untrusted input."""

from __future__ import annotations

import base64
import io
import json

from starforge.backends.log_outputs import collect_outputs, store_outputs
from starforge.cluster.lineage import MANIFEST_SCHEMA
from starforge.cluster.provenance_log import OUTPUTS_CHUNK, emit_outputs


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
