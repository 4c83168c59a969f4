"""Provenance records read back from a job's log (a backend with no shared file system).

The job's processes print their records as framed lines
(:mod:`starforge.cluster.provenance_log`); once the job has ended the backend fetches the
log and hands it to :func:`collect`, before the job's record is final (a failed read is
tried again: ``starforge.backends.ray.after_log_read``). The log is the job's own output, so everything
in it is untrusted input:

- at most :data:`MAX_BYTES` (1 MiB) of framed records are read per job; frames past the
  cap are counted, not decoded;
- a frame Ray forwarded in two or more pieces is joined again (:func:`frames`);
- each frame must be base64 of a JSON object nested at most 100 levels deep
  (:mod:`starforge.cluster.jsonload`: a frame of ``[`` x 100,000 is one refused frame, not
  a ``RecursionError`` that loses every record) with the provenance schema, this job's id
  and fields of the expected types (:func:`check_record`); only those fields are kept,
  anything else in a frame is dropped, and a refused frame is counted with its reason;
- a process writes its record several times: of each (attempt, host, pid) the accepted
  frame the process wrote last is kept (the latest ``written`` time; of equal times, or
  without one, the later frame in the log). The order of the log's lines is the order
  in which Ray forwarded them to the driver, which the reader does not rely on;
- :func:`store` writes the kept records into the job directory's ``provenance/`` under
  names forge makes (``log-0001.json``, …; never from a record's fields), each marked
  ``"reported_via": "job log"``, with a summary of what was read in
  ``provenance/.from-log.json``. The folder is built beside and renamed into place.

Laptop side.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..cluster.atomic import write_file
from ..cluster.jsonload import MAX_DEPTH, NestingError
from ..cluster.jsonload import loads as load_json
from ..cluster.provenance import DIRNAME, FIELDS, REQUIRED, SCHEMA
from ..cluster.provenance_log import MARKER
from ..cluster.utctime import utc_now

MAX_BYTES = 1 << 20
FETCH_FILE = ".from-log.json"  # dot-named: provenance readers skip it
REPORTED_VIA = "job log"
_B64 = re.compile(r"[A-Za-z0-9+/=]*")
TOO_DEEP = f"JSON nested deeper than {MAX_DEPTH} levels"
_MAX_STR = 4096
_MAX_HOST = 253


@dataclass
class Collected:
    """What a log held: the records kept, and what was not."""

    records: list = field(default_factory=list)
    frames: int = 0
    bytes_read: int = 0
    refused: dict = field(default_factory=dict)  # reason -> count
    cut: int = 0  # frames past MAX_BYTES, not read

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def summary(self) -> dict:
        return {
            "source": REPORTED_VIA,
            "fetched": utc_now(),
            "frames": self.frames,
            "bytes": self.bytes_read,
            "records": len(self.records),
            "refused": dict(sorted(self.refused.items())),
            "cut_at_bytes": MAX_BYTES if self.cut else None,
            "frames_past_cap": self.cut,
            "hosts": sorted({r["host"] for r in self.records}),
        }


# Ray's prefix of a line it forwarded from a worker: "(<name> pid=<pid>, ip=<ip>) ", with colours
RAY_SOURCE = re.compile(r"(?:\x1b\[[0-9;]*m)?\([^()\n]*pid=[^()\n]*\)(?:\x1b\[[0-9;]*m)? ")
_GARBLED = object()  # what a payload that is not base64 of JSON decodes to
_TOO_DEEP = object()  # what a payload of JSON nested deeper than jsonload allows decodes to
_PAST_CAP = object()  # a payload past the cap: not decoded
_PIECES = 4  # at most this many lines joined into one frame (a half-written frame is 2)


def frames(text: str, max_bytes: int = MAX_BYTES):
    """``(payload, value)`` for every framed line in *text* (after any prefix Ray put before
    it): *value* is the JSON the payload holds, ``_GARBLED``, or ``_PAST_CAP`` for a payload
    past *max_bytes* of payloads (not decoded).

    Ray's log monitor reads a worker's log file while the worker writes it, and forwards what
    it has read as a line: a frame read half-written reaches the driver's log as two lines of
    the same source (the same ``(pid=…, ip=…)`` prefix), not always next to each other. So a
    forwarded frame that does not decode and ends its line is held back, and the next line of
    the same source is joined to it when that line is all base64, up to :data:`_PIECES`
    pieces; a frame that stays cut is given as it is (and refused). A frame cut inside its
    marker is not seen.
    """
    held: dict[str, tuple[str, int]] = {}  # a source's prefix -> its frame's payload so far, pieces
    used = 0

    def give(payload: str, value=None):  # (value None: decode the payload)
        nonlocal used
        if used + len(payload) > max_bytes:
            return payload, _PAST_CAP
        used += len(payload)
        return payload, _value_of(payload) if value is None else value

    def hold_or_give(prefix: str, payload: str, pieces: int = 1):
        value = _value_of(payload) if used + len(payload) <= max_bytes else _PAST_CAP
        if value is _GARBLED and pieces < _PIECES:
            held[prefix] = (payload, pieces)
            return None
        return give(payload, value)

    for line in text.splitlines():
        source = RAY_SOURCE.match(line)
        prefix = source.group(0) if source else ""
        if prefix in held:
            (start, pieces), rest = held.pop(prefix), line[len(prefix):]
            if rest and _B64.fullmatch(rest):
                given = hold_or_give(prefix, start + rest, pieces + 1)
                if given:
                    yield given
                continue
            yield give(start, _GARBLED)
        at = line.find(MARKER)
        if at < 0:
            continue
        match = _B64.match(line, at + len(MARKER))
        payload = match.group(0) if match else ""
        if prefix and at + len(MARKER) + len(payload) == len(line):
            given = hold_or_give(prefix, payload)
        else:
            given = give(payload)
        if given:
            yield given
    for start, _ in held.values():
        yield give(start, _GARBLED)


def _value_of(payload: str):
    try:
        return load_json(base64.b64decode(payload.encode("ascii"), validate=True).decode("utf-8"))
    except NestingError:
        return _TOO_DEEP
    except (binascii.Error, ValueError, UnicodeError):
        return _GARBLED


def collect(text: str, job_id: str, max_bytes: int = MAX_BYTES) -> Collected:
    """The records of job *job_id* framed in the log *text*, checked (see the module doc)."""
    out = Collected()
    latest: dict = {}
    for payload, value in frames(text, max_bytes):
        out.frames += 1
        if value is _PAST_CAP:
            out.cut += 1
            continue
        out.bytes_read += len(payload)
        if value is _GARBLED:
            out.refuse("not base64 of JSON (cut or garbled)")
            continue
        if value is _TOO_DEEP:
            out.refuse(TOO_DEEP)
            continue
        record, reason = check_record(value, job_id)
        if record is None:
            out.refuse(reason)
            continue
        key = (record["attempt"], record["host"], record["pid"])
        if key in latest and _written(record) < _written(latest[key]):
            continue  # an older state of a process whose later one was read already
        latest.pop(key, None)  # re-inserted: the order is that of each process's last frame
        latest[key] = record
    out.records = list(latest.values())
    return out


def _written(record: dict) -> str:
    """When the process wrote *record* (UTC, to the millisecond, a string that sorts by time),
    or "" when it did not say."""
    return record.get("written") or ""


def check_record(data, job_id: str) -> tuple[dict | None, str]:
    """The known fields of *data* when it is a provenance record of *job_id*, else a reason."""
    if not isinstance(data, dict):
        return None, "not a JSON object"
    if data.get("schema") != SCHEMA:
        return None, "not a provenance record (schema)"
    if data.get("job_id") != job_id:
        return None, "a record of another job"
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        return None, f"missing field {missing[0]}"
    out = {}
    for key, kinds in FIELDS.items():
        if key not in data:
            continue
        value = data[key]
        if not _has_type(value, kinds):
            return None, f"field {key} has the wrong type"
        out[key] = value
    if out["pid"] <= 0 or out["attempt"] < 0:
        return None, "pid or attempt out of range"
    host = out["host"]
    if not host or len(host) > _MAX_HOST or not host.isprintable() or host.strip() != host:
        return None, "bad host name"
    for key in ("role", "mode", "python", "core_version"):
        if isinstance(out.get(key), str) and len(out[key]) > _MAX_STR:
            return None, f"field {key} too long"
    for key in ("plugins", "patches"):
        if not all(isinstance(x, dict) for x in out[key]):
            return None, f"field {key} holds a non-object"
    out["reported_via"] = REPORTED_VIA
    return out, ""


def _has_type(value, kinds) -> bool:
    for kind in kinds:
        if kind is None and value is None:
            return True
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind is not None and kind is not int and isinstance(value, kind):
            return True
    return False


def fetched(job_dir: str | os.PathLike) -> bool:
    """Whether this job's log was already read for provenance."""
    return (Path(job_dir) / DIRNAME / FETCH_FILE).is_file()


def store(job_dir: str | os.PathLike, collected: Collected) -> Path:
    """Write *collected* into ``<job_dir>/provenance/`` (see the module doc); return that folder."""
    job_dir = Path(job_dir)
    folder = job_dir / DIRNAME
    files = {f"log-{i:04d}.json": rec for i, rec in enumerate(collected.records, 1)}
    encoded = {name: (json.dumps(rec, indent=2, sort_keys=True) + "\n").encode("utf-8") for name, rec in files.items()}
    summary = (json.dumps(collected.summary(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    if not folder.exists():
        tmp = Path(tempfile.mkdtemp(prefix=".provenance-", dir=job_dir))
        try:
            for name, data in encoded.items():
                (tmp / name).write_bytes(data)
            (tmp / FETCH_FILE).write_bytes(summary)
            tmp.chmod(0o755)
            os.rename(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder
    for name, data in encoded.items():  # a folder already there: file by file, the summary last
        write_file(str(folder / name), data)
    write_file(str(folder / FETCH_FILE), summary)
    return folder


def read_summary(job_dir: str | os.PathLike) -> dict | None:
    """``provenance/.from-log.json`` of a job, or None."""
    try:
        data = json.loads((Path(job_dir) / DIRNAME / FETCH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
