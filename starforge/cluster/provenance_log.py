"""Provenance records sent through the job's log, for a backend with no shared file system.

On Ray the job directory is unpacked on every node at a path of its own, so the records
a process writes to ``provenance/`` stay on that node. With :data:`ENV` set to ``1`` (the
Ray backend sets it for the whole job), every time a process writes its record it also
prints it to its standard output as one framed line::

    @forge-provenance-v1:<base64 of the record's compact JSON>

The launcher's lines go straight into the job's log (its standard output is the log),
before any worker of the job starts, so even a job killed early has the launcher's
record there. A Ray worker's standard output is forwarded by Ray to the driver, which
prints it into the same log with Ray's ``(pid=…, ip=…)`` prefix. The frame is one word
that contains a digit, which Ray's log de-duplication never merges (it ignores such
words, and a line made only of them is always printed). Each later write of a process
repeats its whole record; the laptop keeps the last one of each process
(``starforge.jobs.log_provenance`` reads the lines, as untrusted input).

Cluster side: standard library only.
"""

from __future__ import annotations

import base64
import json
import os
import sys

from .provenance import LOG_ENV as ENV

MARKER = "@forge-provenance-v1:"


def enabled(environ=None) -> bool:
    """Whether this job's records also travel through the log (``FORGE_PROVENANCE_LOG=1``)."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV) == "1"


def frame(record: dict) -> str:
    """*record* as one framed line (no newline)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    return MARKER + base64.b64encode(text.encode("utf-8")).decode("ascii")


def emit(record: dict, stream=None) -> bool:
    """Print *record*'s framed line to *stream* (default: this process's standard output).

    Never raises: a closed or broken stream (a process at exit) loses only this copy.
    """
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(frame(record) + "\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):
        return False
    return True


# The end of an attempt's outputs manifest (:mod:`.lineage`) travels the same way, cut into
# numbered frames (a manifest of 10,000 files is about 0.8 MB of base64):
#     @forge-outputs-v1:<i>/<n>:<base64 piece i of n>
OUTPUTS_MARKER = "@forge-outputs-v1:"
OUTPUTS_CHUNK = 1 << 16  # base64 characters per frame
OUTPUTS_HOST_CAP = 8 << 20  # bytes of one host's manifest that travel (about 100,000 files)


def emit_outputs(text: str, stream=None) -> bool:
    """Print the manifest *text* as numbered frames on *stream* (default: standard output)."""
    stream = sys.stdout if stream is None else stream
    data = base64.b64encode(text.encode("utf-8")).decode("ascii")
    pieces = [data[i:i + OUTPUTS_CHUNK] for i in range(0, len(data), OUTPUTS_CHUNK)] or [""]
    try:
        for i, piece in enumerate(pieces):
            stream.write(f"{OUTPUTS_MARKER}{i}/{len(pieces)}:{piece}\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):
        return False
    return True
