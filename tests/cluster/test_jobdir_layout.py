"""The job directory's layout has one owner, ``starforge/cluster/jobdir_layout.py``: no other
module spells the name of a part of a job directory, the Slurm batch script and Ray's zip
check included (they are generated from the owner's names)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import starforge
from starforge.backends import slurm
from starforge.cluster import jobdir_layout
from starforge.jobs.binding import Binding

ROOT = Path(starforge.__file__).parent
OWNER = "cluster/jobdir_layout.py"
# The bootstrap runs before the runtime can be imported: it spells the two names it needs,
# held equal to the owner's below.
WRITTEN_OUT = {"cluster/bootstrap/sitecustomize.py": (jobdir_layout.RUNTIME_DIR, jobdir_layout.CODE_POINTER_PREFIX)}

# Names that mean nothing but a part of a job directory: refused anywhere in a string.
DISTINCT = ("jobspec.json", "forge_plugins", ".forge-runtime", "starforge-runtime.zip", "hyperparams.json", "attempts.d",
            "code-dir@", "status.json", "job.sbatch", "output.log", "log.txt")
# Words that also name other things (JSON keys, phases, backends): refused where a path is
# built from them (os.path.join, ``/``) or as a folder in a path written in a string.
WORDS = ("recipe", "work", "provenance", "lineage", "slurm", "cleanup", "launchers", "exit_code", "failed-", "status-")
_JOIN = {"join", "joinpath"}


def _in_path(name: str) -> re.Pattern:
    # NAME/ starting a relative path, or $VAR/NAME in a shell line
    n = re.escape(name)
    return re.compile(rf"(?:^|[\s\"'(=])(?:{n})/|\$\{{?\w+\}}?/(?:{n})(?![\w.-])")


def spelled_names(source: str, where: str = "<source>") -> list:
    """``where:line name`` of each job-directory name *source* spells (docstrings aside)."""
    nodes = list(ast.walk(ast.parse(source)))  # walked once, read three times
    docstrings = {id(node.body[0].value) for node in nodes
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    in_joins = set()
    for node in nodes:
        if isinstance(node, ast.Call):
            func = node.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in _JOIN:
                in_joins.update(id(a) for a in node.args)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            in_joins.update((id(node.left), id(node.right)))
    found = []
    for node in nodes:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue
        text = node.value
        for name in DISTINCT + WORDS:
            if name not in text:  # each way of spelling it below contains it (the regular expressions cost)
                continue
            joined = id(node) in in_joins and (text == name or text.startswith(name + "/"))
            exact = name in DISTINCT and (text == name or re.search(rf"(?<![\w.@-]){re.escape(name)}(?![\w@-])", text))
            if joined or exact or _in_path(name).search(text):
                found.append((node.lineno, name))
                break
    return [f"{where}:{line} {name}" for line, name in sorted(found)]


def test_the_check_finds_a_name_spelled_out():
    source = (
        '"""Docstrings may say jobspec.json and recipe/."""\n'
        'a = os.path.join(job_dir, "recipe")\n'
        'b = job_dir / "provenance"\n'
        'c = "jobspec.json"\n'
        "d = 'zip=\"$local/.forge-runtime/x\"'\n"
        'e = f"work/{name}"\n'
        'f = "for item in status.json plugins"\n'
        'ok = {"recipe": 1, "provenance": None, "kind": "work", "backend": "slurm", "schema": "forge/provenance/v1"}\n'
        'ok2 = f"recipe: expected a mapping, got {x}"\n'
    )
    assert [f.split(" ", 1)[1] for f in spelled_names(source)] == [
        "recipe", "provenance", "jobspec.json", ".forge-runtime", "work", "status.json"]


def test_no_module_but_the_owner_spells_a_part_of_a_job_directory():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "_vendor" in rel or rel == OWNER:
            continue
        names = spelled_names(path.read_text(encoding="utf-8"), rel)
        if rel in WRITTEN_OUT:
            names = [n for n in names if n.split(" ", 1)[1] not in WRITTEN_OUT[rel]]
        found += names
    assert found == []


def test_the_bootstrap_s_own_spelling_is_the_owner_s():
    for rel, names in WRITTEN_OUT.items():
        source = (ROOT / rel).read_text(encoding="utf-8")
        for name in names:
            assert repr(name).replace("'", '"') in source, (rel, name)


def test_the_slurm_script_names_the_job_directory_s_parts_from_the_owner(monkeypatch):
    # the generated bash follows the owner: a renamed part is renamed in the script
    names = {"RUNTIME_DIR": ".forge-runtime", "SPEC_FILE": "jobspec.json", "STATUS_FILE": "status.json"}
    binding = Binding(runtime_sha256="a" * 64, spec_sha256="b" * 64)
    script = slurm.batch_script(Path("/j"), None, {"launch": "per-node"}, binding)
    for value in names.values():
        assert value in script + slurm.COLLECT + slurm._PREPARE
    assert f'"$LOCAL/{jobdir_layout.RUNTIME_DIR}/{jobdir_layout.RUNTIME_ZIP}"' in script
    assert f'--spec "$local/{jobdir_layout.SPEC_FILE}"' in slurm._PREPARE
    assert f"for item in {' '.join(jobdir_layout.VERIFIED_ITEMS)}; do" in slurm._PREPARE
    assert f"for d in {jobdir_layout.PROVENANCE_DIR} {jobdir_layout.LINEAGE_DIR}; do" in slurm.COLLECT
    assert slurm.JOB_ITEMS == jobdir_layout.NODE_ITEMS
