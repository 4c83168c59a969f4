"""``forge-launch --plan LEDGER``: the launcher's load phase, stopped before the entrypoint.

Every plugin is verified and its ``requires`` checked, as in a launch (a failure there
ends the plan with the launch's own exit code). Then, in load order, each is imported and
its eager ``install(params)`` called, or the deferred one registered; an import or an
``install`` that raises is recorded on the plugin and the next plugin is loaded all the
same (a plan shows everything at once). Then the modules the patches wait for and the
declared ``targets`` of the installed plugins are imported, as the trainer would import
them, so patches made with ``when_imported=True`` apply (or fail) here too. The training
entrypoint never runs.

The ledger (schema ``forge/plan-ledger/v1``) is one JSON document: the interpreter, each
plugin's record (``status``, ``error``), every patch record of this process
(``starforge.patching.records()``) and the target imports. It goes to the file LEDGER,
or, for ``-``, to stdout between :data:`BEGIN` and :data:`END` lines (a job on a cluster
hands it back through its log). What the ledger *means* (conflicts, acknowledgements) is
worked out on the laptop.

Standard library only.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

from . import patching
from .atomic import write_file
from .errors import LaunchFailure

SCHEMA = "forge/plan-ledger/v1"
BEGIN = "----- forge plan ledger begin -----"
END = "----- forge plan ledger end -----"


def run_plan(job, on_item, out: str) -> LaunchFailure | None:
    """Load every plugin of *job* (calling *on_item* after each), import the targets, write the ledger."""
    job.mode = "plan"
    try:
        job.verify_all_reporting(on_item)
    except LaunchFailure as failure:
        return failure
    errors: dict = {}
    for item in job.items:
        if item.status in ("planned", "pending"):
            try:
                job.activate(item, "plan")
            except LaunchFailure as failure:
                errors[item.ref] = {"phase": failure.phase, "code": failure.code, "message": failure.message,
                                    "detail": failure.detail or ""}
                job.failure = None
        on_item(item)
    imports = import_targets(job)
    ledger = {
        "schema": SCHEMA,
        "job_id": job.spec.id,
        "python": {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3]},
        "plugins": [dict(item.to_record(), error=errors.get(item.ref)) for item in job.items],
        "patches": patching.records(),
        "imports": imports,
    }
    text = json.dumps(ledger, indent=2, sort_keys=True, default=str)
    if out == "-":
        sys.stdout.flush()
        sys.stdout.write(f"\n{BEGIN}\n{text}\n{END}\n")
        sys.stdout.flush()
    else:
        write_file(os.path.abspath(out), (text + "\n").encode("utf-8"))
    return None


def import_targets(job) -> list:
    """Import what the trainer would: the modules pending patches wait for, then the declared
    targets of the plugins installed now; ``[{module, ok, error}]`` in that order."""
    modules: list = []
    for p in patching.patches():
        if p.status == "pending":
            name = p.target.split(":", 1)[0]
            if name not in modules:
                modules.append(name)
    for item in job.items:
        if item.status == "loaded":
            for name in item.entry.targets:
                if name not in modules:
                    modules.append(name)
    out = []
    for name in modules:
        try:
            importlib.import_module(name)
        except (Exception, SystemExit) as exc:  # the plan reports it; nothing here may end the process
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            out.append({"module": name, "ok": False, "error": detail})
        else:
            out.append({"module": name, "ok": True, "error": None})
    return out


def extract(text: str) -> dict | None:
    """The ledger a ``--plan -`` launch printed into *text* (a job's log), or None."""
    start = text.rfind(BEGIN)
    if start < 0:
        return None
    end = text.find(END, start)
    if end < 0:
        return None
    try:
        data = json.loads(text[start + len(BEGIN):end])
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None
