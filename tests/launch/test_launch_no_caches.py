"""Nothing a launch runs or decides is read back from a per-user cache.

Earlier releases kept compiled plugin code under ``$FORGE_HOME/cache/bytecode/`` and
remembered satisfied ``requires`` verdicts under ``$FORGE_HOME/cache/requires/``: whoever
could write those files ran their code under a "verified" record, or passed a requirement
check. These tests show that a launch writes no cache, that files planted where the caches
were change nothing, and that every requirement check asks ``packaging``.
"""

from __future__ import annotations

import marshal

from launch_jobs import demo_plugin

PLANTED = 'print("PLANTED CODE RAN")\ndef install(params):\n    pass\n'


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


def test_every_requirement_check_asks_packaging(builder):
    trainer = 'import sys\nprint("packaging imported:", any(m.endswith("packaging.specifiers") for m in sys.modules))\n'
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1,<1", "python": ">=3.10"})], trainer=trainer)
    for _ in range(2):
        result = job.launch()
        assert result.returncode == 0, result.stderr
        assert "packaging imported: True" in result.stdout
        assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]
