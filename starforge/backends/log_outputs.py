"""Outputs manifests read back from a Ray job's log (SPEC §18).

On Ray the job directory is Ray's copy of the job package, deleted after the job, so the
launcher also prints its attempt's outputs manifest as numbered frames
(:func:`starforge.cluster.provenance_log.emit_outputs`). The log is the job's own output,
so the frames are untrusted input: at most :data:`MAX_BYTES` of them are read, a manifest
is kept only when its pieces come complete and in order, decode to JSON of a manifest's
shape (:func:`.outputs.valid_manifest`) and name this job, and it is written under a name
forge makes from its checked attempt number and host (never over a manifest already there).

Laptop side.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from pathlib import Path

from ..cluster.atomic import write_file
from ..cluster.jsonload import NestingError
from ..cluster.jsonload import loads as load_json
from ..cluster.lineage import LINEAGE_DIR, MANIFEST_SCHEMA, manifest_name
from ..cluster.provenance_log import OUTPUTS_MARKER
from .outputs import valid_manifest

MAX_BYTES = 16 << 20
_FRAME = re.compile(re.escape(OUTPUTS_MARKER) + r"(\d{1,6})/(\d{1,6}):([A-Za-z0-9+/=]*)\s*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def collect_outputs(text: str, job_id: str, max_bytes: int = MAX_BYTES) -> tuple:
    """``(manifests, refused)``: the manifests of job *job_id* framed in *text*; *refused*
    counts what was not kept, by reason."""
    manifests: list = []
    refused: dict = {}
    used = 0
    parts: list = []

    def refuse(reason: str) -> None:
        refused[reason] = refused.get(reason, 0) + 1

    for line in text.splitlines():
        at = line.find(OUTPUTS_MARKER)
        if at < 0:
            continue
        m = _FRAME.match(line, at)
        if not m:
            refuse("not a frame")
            continue
        i, n, piece = int(m.group(1)), int(m.group(2)), m.group(3)
        used += len(piece)
        if used > max_bytes:
            refuse(f"past {max_bytes} bytes")
            continue
        if i != len(parts) or i >= n:
            refuse("a piece out of order")
            parts = []
            if i != 0 or i >= n:  # a first piece starts a manifest again
                continue
        parts.append(piece)
        if len(parts) == n:
            doc = _decoded("".join(parts))
            parts = []
            if not (isinstance(doc, dict) and doc.get("schema") == MANIFEST_SCHEMA and valid_manifest(doc)):
                refuse("not an outputs manifest")
            elif doc["job_id"] != job_id:
                refuse("another job's")
            elif not _HOST.match(doc["host"]) or not 0 <= doc["attempt"] < 1_000_000:
                refuse("a host or attempt forge does not name files by")
            else:
                manifests.append(doc)
    if parts:
        refuse("cut short")
    return manifests, refused


def _decoded(payload: str):
    try:
        return load_json(base64.b64decode(payload.encode("ascii"), validate=True).decode("utf-8"))
    except (NestingError, binascii.Error, ValueError, UnicodeError):
        return None


def store_outputs(job_dir: str | Path, manifests: list) -> list:
    """Write *manifests* into ``<job_dir>/lineage/``; return the paths written."""
    folder = Path(job_dir) / LINEAGE_DIR
    written = []
    for doc in manifests:
        path = folder / manifest_name(doc["attempt"], doc["host"])
        if path.exists():
            continue
        folder.mkdir(exist_ok=True)
        write_file(path, json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
        written.append(path)
    return written
