"""What differs per backend is asked of the backend, never of its name (docs/architecture.md,
"a backend is one module and one line"): ``forge jobs show`` and ``forge jobs replay`` read
the ``Backend`` class's facts (``outputs_elsewhere``, ``records_later``,
``node_local_copies``), so a backend registered by its one line says its own; and no module
outside ``starforge/backends/`` compares a backend name to a literal."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tiny_backend import TinyBackend

import starforge
from starforge.backends import BACKENDS, Registration
from starforge.experiment.jobinfo import job_details
from starforge.jobs.jobrecord import JobRecord

ROOT = Path(starforge.__file__).parent


def backend_name_tests(source: str, where: str = "<source>") -> list:
    """``where:line`` of each comparison of something named ``backend`` (a variable, an
    attribute, a subscript key) with a string literal, or a collection of them, in *source*."""

    def names_a_backend(node) -> bool:
        if isinstance(node, ast.Name):
            return "backend" in node.id.lower()
        if isinstance(node, ast.Attribute):
            return "backend" in node.attr.lower()
        if isinstance(node, ast.Subscript):
            key = node.slice
            return isinstance(key, ast.Constant) and isinstance(key.value, str) and "backend" in key.value.lower()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            key = node.args[0]
            return isinstance(key, ast.Constant) and isinstance(key.value, str) and "backend" in key.value.lower()
        return False

    def literal(node) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return bool(node.elts) and all(literal(e) for e in node.elts)
        return False

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_a_backend(s) for s in sides) and any(literal(s) for s in sides):
                found.append(node.lineno)
        elif isinstance(node, ast.Match) and names_a_backend(node.subject):
            found.append(node.lineno)
    return [f"{where}:{line}" for line in sorted(found)]


def test_the_check_finds_a_backend_named_by_a_literal():
    source = (
        "if record.backend == 'slurm': pass\n"
        "if backend in ('ray', 'slurm'): pass\n"
        "if spec['backend'] != 'local': pass\n"
        "if data.get('backend') == 'ray': pass\n"
        "match record.backend:\n    case 'ray': pass\n"
        "if backend != old.backend: pass\n"  # two names: not a literal
        "if fullname != 'ray': pass\n"  # a module name, not a backend's
    )
    assert backend_name_tests(source) == ["<source>:1", "<source>:2", "<source>:3", "<source>:4", "<source>:5"]


def test_no_module_outside_backends_tests_a_backend_by_name():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if "_vendor" in rel.parts or rel.parts[0] == "backends":
            continue
        found += backend_name_tests(path.read_text(encoding="utf-8"), str(rel))
    assert found == []


class FarBackend(TinyBackend):
    """A backend whose nodes keep their own copies and whose outputs stay there."""

    name = "far"
    outputs_elsewhere = "work/ on each far node (kept there)"
    records_later = "a far job's records come back when it has ended"
    node_local_copies = True


@pytest.fixture
def far(monkeypatch):
    monkeypatch.setitem(BACKENDS, "far", Registration(f"{__name__}:FarBackend"))
    return "far"


def _details(tmp_path, backend: str) -> dict:
    job_dir = tmp_path / "job"
    (job_dir / "work").mkdir(parents=True)
    (job_dir / "work" / "out.txt").write_text("x")
    (job_dir / "slurm" / "cleanup").mkdir(parents=True)
    (job_dir / "slurm" / "cleanup" / "a0-n1.done").write_text("")
    record = JobRecord(id="j1", name="j", backend=backend, status="succeeded", dir=str(job_dir),
                       created="2026-01-01T00:00:00Z", exit_code=0, plugins=[], params={})
    return job_details(record)


def test_jobs_show_asks_the_backend_where_outputs_land_and_whether_nodes_kept_copies(tmp_path, far):
    details = _details(tmp_path, far)
    assert details["outputs"] == {"dir": None, "files": None, "bytes": None, "where": "work/ on each far node (kept there)"}
    assert details["node_cleanup"] == {"attempts": []}  # asked of the backend: no host prepared a copy


@pytest.mark.parametrize("name", ["local", "gone"])  # gone: a backend no longer registered here
def test_a_backend_without_those_facts_shows_its_outputs_here_and_no_cleanup(tmp_path, name):
    details = _details(tmp_path, name)
    assert details["outputs"]["files"] == 1 and details["outputs"]["dir"] == str(tmp_path / "job" / "work")
    assert "node_cleanup" not in details


def test_the_built_in_backends_say_what_they_did_before(tmp_path):
    ray = _details(tmp_path / "r", "ray")
    assert ray["outputs"]["where"] == "work/ in each Ray node's copy of the job package (deleted by Ray; write to shared storage)"
    assert "node_cleanup" not in ray
    assert "node_cleanup" in _details(tmp_path / "s", "slurm")
