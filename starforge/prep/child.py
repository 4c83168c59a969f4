"""The child process of ``forge prep``: one data-prep plugin mapped over a JSONL file.

Started by :mod:`starforge.prep.run` as ``PYTHON -m starforge.prep.child RESULT_FD OUTPUT_FD``
under forge's Python or ``--python``, with the job-style runtime zip (plus this module)
first on ``PYTHONPATH`` and none of the credential variables in its environment. It reads
one JSON header on stdin — the plugin's verified files (base64), its entrypoint, the
params, the input path — imports the plugin from those bytes only (the snapshot finder of
:mod:`starforge.cluster.loader`: nothing is read from the plugin's directory), calls
``entrypoint(params)`` for the per-record function, and streams the input through it into
the already-open temporary output file (``OUTPUT_FD``; the parent renames it into place).

On ``RESULT_FD`` it writes ``progress BYTES RECORDS`` lines while it works, then one
``result {json}`` line: counts and sha256 of the bytes it read and wrote, or the error
(``line``, ``message``, ``detail``). Exit status 0 on success, 1 on a refused record or
plugin. Standard library and ``starforge.cluster`` only: it runs in interpreters where
nothing of StarForge is installed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time

CHUNK = 1 << 20  # input read and output written in blocks of about this size
PROGRESS_EVERY = 0.2  # seconds between progress lines


class Refused(Exception):
    """A record or the plugin stops the run: *line* (1-based, 0 when not a record) and why."""

    def __init__(self, line: int, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.detail = detail


def _describe(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    if value is None:
        return "null"
    return names.get(type(value), f"a {type(value).__name__}")


def load_step(header: dict):
    """Import the plugin from the header's bytes and return ``entrypoint(params)``."""
    import importlib

    from starforge.cluster.loader import SnapshotFinder

    contents = {rel: base64.b64decode(data) for rel, data in header["files"].items()}
    label = header["label"]
    module_name, _, func_name = header["entrypoint"].partition(":")
    finder = SnapshotFinder(header["root"], contents, (), label=label)
    if module_name not in finder.modules:
        raise Refused(0, f"{label}: entrypoint module '{module_name}' is not in the plugin tree")
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        raise Refused(0, f"{label}: importing '{module_name}' raised {type(exc).__name__}: {exc}", _trace(exc)) from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise Refused(0, f"{label}: '{module_name}' has no callable '{func_name}'")
    from starforge.cluster.hyperparams_and_deferred import freeze

    params = freeze(header["params"])  # read-only, nested values too
    try:
        step = func(params)
    except Exception as exc:
        raise Refused(0, f"{label}: {header['entrypoint']}(params) raised {type(exc).__name__}: {exc}", _trace(exc)) from None
    if not callable(step):
        raise Refused(0, f"{label}: {header['entrypoint']}(params) returned {_describe(step)}, "
                         "not the function to apply to each record")
    return step


def run(step, input_path: str, out_fd: int, report) -> dict:
    """Map every JSON line of *input_path* through *step* into *out_fd*; return the counts."""
    sha_in, sha_out = hashlib.sha256(), hashlib.sha256()
    records_in = records_out = 0
    bytes_in = bytes_out = 0
    number = 0  # the input line number
    pending: list = []
    pending_size = 0
    loads, dumps = json.loads, json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
    last = time.monotonic()

    def flush() -> None:
        nonlocal pending, pending_size, bytes_out
        data = "".join(pending).encode("utf-8")
        sha_out.update(data)
        view = memoryview(data)
        while view:
            view = view[os.write(out_fd, view):]
        bytes_out += len(data)
        pending, pending_size = [], 0

    with open(input_path, "rb") as f:
        rest = b""
        while True:
            chunk = f.read(CHUNK)
            if chunk:
                sha_in.update(chunk)
                bytes_in += len(chunk)
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
            elif rest:
                lines, rest = [rest], b""
            else:
                break
            for line in lines:
                number += 1
                if not line.strip():
                    continue
                try:
                    record = loads(line)
                except ValueError as exc:
                    raise Refused(number, f"not valid JSON ({_json_reason(exc)})") from None
                if type(record) is not dict:
                    raise Refused(number, f"expected a JSON object, got {_describe(record)}")
                records_in += 1
                try:
                    result = step(record)
                except Exception as exc:
                    raise Refused(number, f"the plugin raised {type(exc).__name__}: {exc}", _trace(exc)) from None
                if result is None:
                    continue
                if type(result) is not dict:
                    raise Refused(number, f"the plugin returned {_describe(result)}, not a JSON object (or None to drop the record)")
                try:
                    text = dumps(result)
                except (TypeError, ValueError) as exc:
                    raise Refused(number, f"the plugin's result cannot be written as JSON: {exc}") from None
                pending.append(text)
                pending.append("\n")
                pending_size += len(text)
                records_out += 1
                if pending_size >= CHUNK:
                    flush()
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY:
                last = now
                report(f"progress {bytes_in} {records_in}")
    flush()
    os.fsync(out_fd)
    return {
        "input": {"sha256": sha_in.hexdigest(), "records": records_in, "bytes": bytes_in, "lines": number},
        "output": {"sha256": sha_out.hexdigest(), "records": records_out, "bytes": bytes_out},
    }


def _json_reason(exc: ValueError) -> str:
    msg = getattr(exc, "msg", None)
    col = getattr(exc, "colno", None)
    return f"{msg} at column {col}" if msg and col else str(exc)


def _trace(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def main(argv: list) -> int:
    result_fd, out_fd = int(argv[0]), int(argv[1])
    # Only the plugin's own modules and what this interpreter has installed: never the
    # directory forge was started in.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", cwd)]
    results = os.fdopen(result_fd, "w", buffering=1, encoding="utf-8")

    def report(line: str) -> None:
        results.write(line + "\n")

    try:
        header = json.loads(sys.stdin.buffer.read())
        step = load_step(header)
        counts = run(step, header["input"], out_fd, report)
    except Refused as refused:
        report("result " + json.dumps({"ok": False, "line": refused.line, "message": refused.message,
                                       "detail": refused.detail}))
        return 1
    except KeyboardInterrupt:  # Ctrl-C reaches forge too, which says so and removes the temp file
        return 130
    except OSError as exc:
        report("result " + json.dumps({"ok": False, "line": 0, "message": f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
                                       "detail": ""}))
        return 1
    report("result " + json.dumps({"ok": True, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
