"""The jobs store: records survive a round trip, prefixes resolve, updates are locked."""

import json

import pytest

from starforge.backends.base import JobRecord, get_backend
from starforge.errors import NotFoundError, UsageError
from starforge.jobs.store import JobStore


def _record(job_id, created="2026-11-29T12:00:00Z", **kw):
    return JobRecord(id=job_id, name="exp", backend="local", status="running", dir="/jobs/" + job_id, created=created, **kw)


def test_save_get_and_list_in_creation_order(tmp_path):
    store = JobStore(tmp_path)
    store.save(_record("exp-2", created="2026-11-29T12:00:05Z"))
    store.save(_record("exp-1", created="2026-11-29T12:00:01Z", backend_ref={"pid": 42}))
    assert [r.id for r in store.list()] == ["exp-1", "exp-2"]
    assert store.get("exp-1").backend_ref == {"pid": 42}
    on_disk = json.loads((tmp_path / "exp-1.json").read_text())
    assert on_disk["status"] == "running" and on_disk["dir"] == "/jobs/exp-1"


def test_unique_prefix_resolves_and_ambiguous_prefix_is_refused(tmp_path):
    store = JobStore(tmp_path)
    store.save(_record("exp-20261129-aa"))
    store.save(_record("exp-20261129-ab"))
    assert store.get("exp-20261129-aa").id == "exp-20261129-aa"
    with pytest.raises(UsageError, match="matches 2 jobs"):
        store.get("exp-2026")
    with pytest.raises(NotFoundError, match="no job 'nope'"):
        store.get("nope")


def test_update_applies_change_and_saves(tmp_path):
    store = JobStore(tmp_path)
    store.save(_record("exp-1"))
    new = store.update("exp-1", lambda r: r.with_changes(status="failed", exit_code=3))
    assert new.final and store.get("exp-1").exit_code == 3


def test_unknown_backend_suggests_the_closest():
    with pytest.raises(UsageError, match="did you mean 'local'"):
        get_backend("lcoal", {})
