"""The bootstrap's own copies of codedir.py's checks agree with codedir.py.

Every new process of a job runs ``bootstrap/sitecustomize.py`` before the runtime can be
imported, and decides there whether it may import from the job's code directory: it cannot
import ``codedir`` (importing ``starforge`` would fix it to the runtime zip) and compiling
codedir's checks from the zip in every process costs a few milliseconds of the worker's
start-up budget (SPEC §9), so it keeps its own copies of the node tag, the pointer's path and
the refusal. These tests hold the copies to codedir.py's answers.
"""

from __future__ import annotations

import ast
import json
import os
import zipfile
from pathlib import Path

import pytest

import starforge
from starforge.cluster import codedir

BOOTSTRAP = Path(starforge.__file__).parent / "cluster" / "bootstrap" / "sitecustomize.py"


@pytest.fixture(scope="module")
def bootstrap() -> dict:
    """The bootstrap's functions, without running it (its module-level calls are left out)."""
    tree = ast.parse(BOOTSTRAP.read_text(encoding="utf-8"))
    tree.body = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    namespace: dict = {"__file__": str(BOOTSTRAP)}
    exec(compile(tree, str(BOOTSTRAP), "exec"), namespace)  # noqa: S102
    return namespace


def _runtime_zip(path: Path, content: bytes = b"x = 1\n") -> str:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("starforge/__init__.py", content)
    return str(path)


def _code_dir(root: Path, runtime_zip: str, job_dir: str, mode: int = 0o700, **key) -> str:
    import hashlib

    path = root / "forge-code-abcdefgh"
    path.mkdir(mode=0o700)
    with open(runtime_zip, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    fields = {"schema": codedir.CODE_SCHEMA, "job_id": "j-1", "job_dir": job_dir, "pid": os.getpid(),
              "node": codedir.node_tag(), "runtime_zip": runtime_zip, "runtime_sha256": sha256, **key}
    (path / codedir.CODE_KEY).write_text(json.dumps(fields))
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize("case", ["usable", "open to others", "another job", "another zip", "not a directory",
                                  "no key", "bad schema"])
def test_the_bootstrap_refuses_a_code_directory_as_codedir_does(bootstrap, case, tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir(mode=0o700)
    job_dir = str(tmp_path / "job")
    runtime_zip = _runtime_zip(tmp_path / "runtime.zip")
    monkeypatch.setenv("FORGE_JOB_DIR", job_dir)
    monkeypatch.setenv("FORGE_JOB_ID", "j-1")
    if case == "not a directory":
        path = str(root / "forge-code-file")
        Path(path).write_text("")
    else:
        key = {"another job": {"job_id": "j-2"}, "bad schema": {"schema": "forge/code-dir/v0"}}.get(case, {})
        path = _code_dir(root, runtime_zip, job_dir, 0o755 if case == "open to others" else 0o700, **key)
        if case == "no key":
            os.unlink(os.path.join(path, codedir.CODE_KEY))
        if case == "another zip":
            runtime_zip = _runtime_zip(tmp_path / "other.zip", b"x = 2\n")
    theirs = bootstrap["_code_dir_refusal"](path, runtime_zip)
    ours = codedir.code_dir_refusal(path, runtime_zip, "j-1", job_dir)
    if case == "usable":
        assert theirs is None and ours is None
    elif case == "no key":  # the message carries the OS's words: the same verdict
        assert theirs.startswith("no usable key: ") and ours.startswith("no usable key: ")
    else:
        assert theirs == ours and ours


def test_the_bootstrap_finds_the_code_directory_this_node_s_pointer_names(bootstrap, tmp_path, monkeypatch):
    job_dir = tmp_path / "job"
    (job_dir / ".forge-runtime").mkdir(parents=True)
    monkeypatch.setenv("FORGE_JOB_DIR", str(job_dir))
    assert bootstrap["_pointed_code_dir"]() is None
    assert codedir.write_pointer(str(job_dir), "/somewhere/forge-code-abcdefgh")
    assert os.path.basename(codedir.pointer_path(str(job_dir))).startswith(codedir.CODE_POINTER_PREFIX + codedir.node_tag())
    assert bootstrap["_pointed_code_dir"]() == "/somewhere/forge-code-abcdefgh"
