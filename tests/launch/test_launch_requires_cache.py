"""Remembered requirement verdicts: packaging decides, a satisfied answer is not asked again."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

from launch_jobs import demo_plugin

TRAINER = """
import sys
print("packaging imported:", "packaging.specifiers" in sys.modules)
"""


def verdicts(job) -> list:
    folder = job.dir.parent / "forge-home" / "cache" / "requires"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_satisfied_core_and_python_are_remembered_per_user(builder):
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1,<1", "python": ">=3.10"})], trainer=TRAINER)
    first = job.launch()
    assert first.returncode == 0, first.stderr
    assert "packaging imported: True" in first.stdout
    files = verdicts(job)
    assert len(files) == 2  # one per (specifier, version) packaging found satisfied
    assert stat.S_IMODE(files[0].parent.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 and f.stat().st_size == 0 for f in files)

    second = job.launch()
    assert second.returncode == 0, second.stderr
    assert "packaging imported: False" in second.stdout
    assert job.plugin_lines(second) == ["plugin  : alice/demo-patch@1.0.0 loaded"]

    off = job.launch(env={"FORGE_REQUIRES_CACHE": "0"})
    assert off.returncode == 0, off.stderr
    assert "packaging imported: True" in off.stdout


def test_unmet_and_package_requirements_always_go_to_packaging(builder):
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=99"})], trainer=TRAINER)
    for _ in range(2):
        result = job.launch()
        assert result.returncode == 11
        assert "requires starforge-core >=99, found " in result.stderr
    assert verdicts(job) == []

    # core alone is remembered ...
    ok = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1"})], trainer=TRAINER)
    assert ok.launch().returncode == 0
    assert len(verdicts(ok)) == 1
    # ... but the same core with a package requirement is checked again, and fails.
    pkg = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1", "packages": {"packaging": "<1"}})], trainer=TRAINER)
    result = pkg.launch()
    assert result.returncode == 11
    assert "requires packaging <1, found " in result.stderr


def test_another_packaging_installation_is_not_trusted_with_old_verdicts(tmp_path):
    fake = tmp_path / "site" / "packaging"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0"\n')
    (fake / "version.py").write_text("")
    code = textwrap.dedent(
        """
        import os, sys
        from starforge.launch import runtime
        first = runtime._packaging_identity()
        path = os.path.join(sys.argv[1], "version.py")
        os.utime(path, ns=(0, 123456789))
        second = runtime._packaging_identity()
        print(sys.argv[1].encode() in first, first != second)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(fake.parent))
    result = subprocess.run([sys.executable, "-c", code, str(fake)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
