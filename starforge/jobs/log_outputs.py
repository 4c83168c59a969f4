"""Outputs manifests read back from a Ray job's log (SPEC §18).

On Ray the job directory is Ray's copy of the job package, one per node, deleted after the
job, so the launcher prints its attempt's outputs manifest, then those of the job's other
hosts (:mod:`starforge.cluster.ray_outputs`), as numbered frames
(:func:`starforge.cluster.provenance_log.emit_outputs`). The log is the job's own output,
and any process of the job can print into it (a Ray worker's lines come with Ray's
``(pid=…, ip=…)`` prefix), so the frames are untrusted input:

- frames are followed per source (the launcher's own lines, or each prefix Ray put before a
  worker's): one source's broken or interleaved frames never spoil another's;
- at most :data:`MAX_BYTES` of frames are read in all, and a manifest larger than
  :data:`~starforge.cluster.provenance_log.OUTPUTS_HOST_CAP` is not assembled;
- a manifest is kept only when its pieces come complete and in order, decode to JSON of a
  manifest's shape (:func:`.outputs.valid_manifest`), name this job, and name a host that
  is a plain name (letters, digits, ``.``, ``_``, ``-``) and an attempt forge can name a
  file by; one manifest per attempt and host, the first;
- what is not kept is counted by reason, with the sources it came from
  (:class:`FromLog`), and :func:`store_outputs` writes that summary beside the manifests
  (``lineage/.from-log.json``, which ``forge jobs outputs`` reports);
- each manifest is written under a name forge makes from its checked attempt number and
  host (never over a manifest already there).

Laptop side.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..cluster.atomic import write_file
from ..cluster.jsonload import NestingError
from ..cluster.jsonload import loads as load_json
from ..cluster.lineage import LINEAGE_DIR, MANIFEST_SCHEMA, manifest_name
from ..cluster.provenance_log import OUTPUTS_HOST_CAP, OUTPUTS_MARKER
from .log_provenance import RAY_SOURCE
from .outputs import SUMMARY, valid_manifest

MAX_BYTES = 16 << 20  # base64 characters of frames read from one log
HOST_PIECES_CAP = (OUTPUTS_HOST_CAP + 2) // 3 * 4  # base64 characters of one manifest
LAUNCHER = "the launcher"  # the source of lines with no prefix of Ray's
_FRAME = re.compile(re.escape(OUTPUTS_MARKER) + r"(\d{1,6})/(\d{1,6}):([A-Za-z0-9+/=]*)\s*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SOURCES_NAMED = 20  # sources of refused frames named in the summary


@dataclass
class FromLog:
    """What a log's frames held: the manifests kept, and what was refused (reason -> count),
    with the sources of the refused frames (Ray's prefix without its colours, or the launcher)."""

    manifests: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)
    refused_from: list = field(default_factory=list)

    def refuse(self, reason: str, source: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        if source not in self.refused_from and len(self.refused_from) < _SOURCES_NAMED:
            self.refused_from.append(source)

    def summary(self) -> dict:
        return {"source": "job log", "manifests": [manifest_name(m["attempt"], m["host"]) for m in self.manifests],
                "refused": dict(sorted(self.refused.items())), "refused_from": list(self.refused_from)}


def read_outputs(text: str, job_id: str, max_bytes: int = MAX_BYTES, host_cap: int = HOST_PIECES_CAP) -> FromLog:
    """The manifests of job *job_id* framed in the log *text*, checked (see the module doc)."""
    out = FromLog()
    used = 0
    kept: set = set()
    pending: dict = {}  # source -> [pieces so far, n, size]; a source whose manifest broke maps to None

    for line in text.splitlines():
        at = line.find(OUTPUTS_MARKER)
        if at < 0:
            continue
        prefix = RAY_SOURCE.match(line)
        source = _plain(prefix.group(0)) if prefix else LAUNCHER
        m = _FRAME.match(line, at)
        if not m:
            out.refuse("not a frame", source)
            continue
        i, n, piece = int(m.group(1)), int(m.group(2)), m.group(3)
        used += len(piece)
        if used > max_bytes:
            out.refuse(f"past {max_bytes} bytes", source)
            continue
        state = pending.get(source)
        if i == 0 and i < n:
            if state:  # a manifest of this source left unfinished
                out.refuse("cut short", source)
            state = pending[source] = [[], n, 0]
        elif state is None:
            if source not in pending:  # not a manifest's first piece, and none was begun
                out.refuse("a piece out of order", source)
                pending[source] = None
            continue  # the rest of a manifest already refused
        elif i != len(state[0]) or n != state[1]:
            out.refuse("a piece out of order", source)
            pending[source] = None
            continue
        state[0].append(piece)
        state[2] += len(piece)
        if state[2] > host_cap:
            out.refuse(f"larger than {host_cap} bytes for one host", source)
            pending[source] = None
            continue
        if len(state[0]) == n:
            del pending[source]
            _check(_decoded("".join(state[0])), job_id, source, out, kept)
    for source, state in pending.items():
        if state:
            out.refuse("cut short", source)
    return out


def _check(doc, job_id: str, source: str, out: FromLog, kept: set) -> None:
    if not (isinstance(doc, dict) and doc.get("schema") == MANIFEST_SCHEMA and valid_manifest(doc)):
        out.refuse("not an outputs manifest", source)
    elif doc["job_id"] != job_id:
        out.refuse("another job's", source)
    elif not _HOST.match(doc["host"]) or not 0 <= doc["attempt"] < 1_000_000:
        out.refuse("a host or attempt forge does not name files by", source)
    elif (doc["attempt"], doc["host"]) in kept:
        out.refuse("a second manifest of the same attempt and host", source)
    else:
        kept.add((doc["attempt"], doc["host"]))
        out.manifests.append(doc)


def _plain(prefix: str) -> str:
    """Ray's prefix of a line, without its colours and brackets: ``name pid=…, ip=…``."""
    return re.sub(r"\x1b\[[0-9;]*m", "", prefix).strip()[1:-1][:200]


def collect_outputs(text: str, job_id: str, max_bytes: int = MAX_BYTES) -> tuple:
    """``(manifests, refused)`` of :func:`read_outputs`."""
    found = read_outputs(text, job_id, max_bytes)
    return found.manifests, found.refused


def _decoded(payload: str):
    try:
        return load_json(base64.b64decode(payload.encode("ascii"), validate=True).decode("utf-8"))
    except (NestingError, binascii.Error, ValueError, UnicodeError):
        return None


def store_outputs(job_dir: str | Path, manifests: list, summary: dict | None = None) -> list:
    """Write *manifests* into ``<job_dir>/lineage/``, and *summary* (:meth:`FromLog.summary`)
    as ``lineage/.from-log.json`` when it says something was refused; return the manifests'
    paths written."""
    folder = Path(job_dir) / LINEAGE_DIR
    written = []
    if summary and summary.get("refused"):
        folder.mkdir(exist_ok=True)
        write_file(folder / SUMMARY, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    for doc in manifests:
        path = folder / manifest_name(doc["attempt"], doc["host"])
        if path.exists():
            continue
        folder.mkdir(exist_ok=True)
        write_file(path, json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
        written.append(path)
    return written
