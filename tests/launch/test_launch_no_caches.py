"""Nothing a launch runs or decides is read back from a per-user cache.

Earlier releases kept compiled plugin code under ``$FORGE_HOME/cache/bytecode/`` and
remembered satisfied ``requires`` verdicts under ``$FORGE_HOME/cache/requires/``: whoever
could write those files ran their code under a "verified" record, or passed a requirement
check. These tests plant exactly the entries those caches would have read, and show that
a launch compiles the verified bytes and asks ``packaging`` every time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys

from launch_jobs import demo_plugin

import starforge

PLANTED = 'print("PLANTED CODE RAN")\ndef install(params):\n    pass\n'


def old_bytecode_key(source: bytes, filename: str) -> str:
    """The name the removed compiled-code cache gave the entry for *source* as *filename*."""
    h = hashlib.sha256()
    h.update(importlib.util.MAGIC_NUMBER)
    h.update(str(sys.flags.optimize).encode())
    h.update(filename.encode("utf-8", "surrogateescape") + b"\0")
    h.update(source)
    return h.hexdigest()


def old_verdict_key(spec: str, have: str) -> str:
    """The name the removed verdict cache gave "packaging found *have* in *spec*"."""
    found = importlib.util.find_spec("packaging")
    folder = list(found.submodule_search_locations)[0]
    parts = [os.path.abspath(folder)]
    with os.scandir(folder) as entries:
        for e in entries:
            if e.name.endswith(".py"):
                st = e.stat()
                parts.append(f"{e.name}\0{st.st_size}\0{st.st_mtime_ns}")
    parts[1:] = sorted(parts[1:])
    identity = "\n".join(parts).encode("utf-8", "surrogateescape")
    key = b"\0".join((b"forge-requires/1 prereleases", identity, spec.encode(), have.encode()))
    return hashlib.sha256(key).hexdigest()


def test_a_planted_compiled_code_entry_is_never_run(builder):
    job = builder.job(plugins=[demo_plugin()])
    cache = job.dir.parent / "forge-home" / "cache" / "bytecode"
    cache.mkdir(parents=True)
    root = job.dir / "forge_plugins" / "demo-patch"
    source = (root / "demo_patch.py").read_bytes()
    planted = marshal.dumps(compile(PLANTED, str(root / "demo_patch.py"), "exec"))
    (cache / old_bytecode_key(source, str(root / "demo_patch.py"))).write_bytes(planted)

    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "PLANTED CODE RAN" not in result.stdout + result.stderr
    assert "compute(1) = 20" in result.stdout  # the verified patch ran
    assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]


def test_overwriting_every_file_under_the_cache_dir_changes_nothing(builder):
    job = builder.job(plugins=[demo_plugin()])
    first = job.launch()
    assert first.returncode == 0, first.stderr
    cache = job.dir.parent / "forge-home" / "cache"
    assert not cache.exists()  # a launch writes no cache at all
    for name in ("bytecode", "requires", "runtime"):
        (cache / name).mkdir(parents=True)
        (cache / name / ("0" * 64)).write_bytes(marshal.dumps(compile(PLANTED, "x.py", "exec")))
    again = job.launch()
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert "PLANTED" not in again.stderr


def test_a_planted_requirement_verdict_does_not_pass_an_unmet_requirement(builder):
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=99"})])
    verdicts = job.dir.parent / "forge-home" / "cache" / "requires"
    verdicts.mkdir(parents=True)
    (verdicts / old_verdict_key(">=99", starforge.__version__)).write_bytes(b"")
    for _ in range(2):
        result = job.launch()
        assert result.returncode == 11
        assert "requires starforge-core >=99, found " in result.stderr


def test_every_requirement_check_asks_packaging(builder):
    trainer = 'import sys\nprint("packaging imported:", any(m.endswith("packaging.specifiers") for m in sys.modules))\n'
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1,<1", "python": ">=3.10"})], trainer=trainer)
    for _ in range(2):
        result = job.launch()
        assert result.returncode == 0, result.stderr
        assert "packaging imported: True" in result.stdout
        assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]
