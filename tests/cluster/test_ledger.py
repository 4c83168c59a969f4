"""``ledger``: the load phase of ``forge-launch --plan`` and the ledger it hands back."""

from __future__ import annotations

import json
import sys

import pytest

from starforge.cluster.errors import InstallError, LaunchFailure, PluginImportError, VerificationError
from starforge.cluster.job import Job
from starforge.cluster.jobspec import JobSpec, PluginEntry
from starforge.cluster.ledger import BEGIN, END, SCHEMA, extract, import_targets, run_plan
from starforge.cluster.load_order import Item


@pytest.fixture
def modules(make_package):
    """A fresh package with a module that imports, one that raises and one that exits."""
    return make_package("tgt_", {
        "good": "X = 1\n",
        "bad": "raise RuntimeError('target broke')\n",
        "quits": "raise SystemExit(3)\n",
    })


def entry(name: str, targets=()) -> PluginEntry:
    return PluginEntry(name, "1.0.0", "sf1:" + "0" * 64, "algorithm", "eager", f"{name}:install", owner="alice",
                       targets=tuple(targets))


class FakeJob:
    """What ``run_plan`` uses of a :class:`~starforge.cluster.job.Job`."""

    def __init__(self, entries, *, verify_failure=None, activate_failures=None):
        self.spec = JobSpec("j-0007", "j", "2026-01-01T00:00:00Z", ["python", "-m", "t"], plugins=tuple(entries))
        self.items = [Item(e, False, "/nonexistent") for e in entries]
        self.mode = "launch"
        self.failure = None
        self.verify_failure = verify_failure
        self.activate_failures = activate_failures or {}
        self.activated: list = []

    def verify_all(self):
        if self.verify_failure is not None:
            self.items[0].status = "failed"
            raise self.verify_failure
        for item in self.items:
            item.verified = True

    verify_all_reporting = Job.verify_all_reporting  # the real one, over this fake's verify_all

    def activate(self, item, trigger):
        self.activated.append((item.ref, trigger))
        failure = self.activate_failures.get(item.ref)
        if failure is not None:
            item.status = "failed"
            self.failure = failure
            raise failure
        item.status = "loaded"


def test_every_plugin_is_loaded_a_failure_is_recorded_and_the_next_loaded_all_the_same(tmp_path, modules):
    failing = LaunchFailure(InstallError, "alice/two@1.0.0", "alice/two@1.0.0: install raised KeyError: 'x'", "Traceback ...\n")
    job = FakeJob([entry("one", [f"{modules}.good"]), entry("two", [f"{modules}.bad"]), entry("three")],
                  activate_failures={"alice/two@1.0.0": failing})
    seen = []
    out = tmp_path / "ledger.json"
    assert run_plan(job, lambda item: seen.append((item.ref, item.status)), str(out)) is None
    assert job.mode == "plan"
    assert job.activated == [("alice/one@1.0.0", "plan"), ("alice/two@1.0.0", "plan"), ("alice/three@1.0.0", "plan")]
    assert seen == [("alice/one@1.0.0", "loaded"), ("alice/two@1.0.0", "failed"), ("alice/three@1.0.0", "loaded")]
    assert job.failure is None  # a plan goes on after a failed plugin

    ledger = json.loads(out.read_text())
    assert ledger["schema"] == SCHEMA == "forge/plan-ledger/v1"
    assert ledger["job_id"] == "j-0007"
    assert ledger["python"]["executable"] == sys.executable
    assert [(p["ref"], p["status"], p["error"]) for p in ledger["plugins"]] == [
        ("alice/one@1.0.0", "loaded", None),
        ("alice/two@1.0.0", "failed", {"phase": "install", "code": 13,
                                       "message": "alice/two@1.0.0: install raised KeyError: 'x'", "detail": "Traceback ...\n"}),
        ("alice/three@1.0.0", "loaded", None),
    ]
    # only the targets of installed plugins are imported, as the trainer would
    assert ledger["imports"] == [{"module": f"{modules}.good", "ok": True, "error": None}]
    assert isinstance(ledger["patches"], list)


def test_a_verification_failure_ends_the_plan_with_it(tmp_path):
    failure = LaunchFailure(VerificationError, "alice/one@1.0.0", "alice/one@1.0.0: one.py does not match")
    job = FakeJob([entry("one"), entry("two")], verify_failure=failure)
    seen = []
    out = tmp_path / "ledger.json"
    assert run_plan(job, lambda item: seen.append(item.ref), str(out)) is failure
    assert seen == ["alice/one@1.0.0"]  # told of the failed one only
    assert job.activated == []
    assert not out.exists()


def test_a_ledger_printed_to_stdout_is_read_back_from_the_log(capsys):
    job = FakeJob([entry("one")], activate_failures={
        "alice/one@1.0.0": LaunchFailure(PluginImportError, "alice/one@1.0.0", "cannot import one")})
    assert run_plan(job, lambda item: None, "-") is None
    printed = capsys.readouterr().out
    assert BEGIN in printed and END in printed
    log = "trainer noise\n" + printed + "more noise after the ledger\n"
    ledger = extract(log)
    assert ledger["job_id"] == "j-0007"
    assert ledger["plugins"][0]["error"]["code"] == 12


def test_import_targets_reports_failures_and_exits_without_ending_the_process(modules):
    job = FakeJob([entry("one", [f"{modules}.bad", f"{modules}.good"]), entry("two", [f"{modules}.quits", f"{modules}.good"])])
    for item in job.items:
        item.status = "loaded"
    assert import_targets(job) == [
        {"module": f"{modules}.bad", "ok": False, "error": "RuntimeError: target broke"},
        {"module": f"{modules}.good", "ok": True, "error": None},
        {"module": f"{modules}.quits", "ok": False, "error": "SystemExit: 3"},
    ]


def test_extract_takes_the_last_complete_ledger_and_nothing_else():
    def block(job_id: str, schema: str = SCHEMA) -> str:
        return f"\n{BEGIN}\n" + json.dumps({"schema": schema, "job_id": job_id}) + f"\n{END}\n"

    assert extract(block("first") + "log\n" + block("second"))["job_id"] == "second"
    assert extract("no ledger here") is None
    assert extract(f"{BEGIN}\n{{\"schema\": \"{SCHEMA}\"}}\n") is None  # cut off: no end line
    assert extract(f"{BEGIN}\nnot json\n{END}\n") is None
    assert extract(block("x", schema="forge/plan-ledger/v0")) is None
    assert extract(f"{BEGIN}\n[1, 2]\n{END}\n") is None
