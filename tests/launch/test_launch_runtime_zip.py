"""The job's runtime zip: one cached copy per content, shared by every job."""

from __future__ import annotations

import zipfile

from launch_jobs import demo_plugin


def test_two_jobs_share_one_cached_runtime_zip(builder):
    first = builder.job(plugins=[demo_plugin()])
    second = builder.job(plugins=[demo_plugin()])
    for job in (first, second):
        result = job.launch()
        assert result.returncode == 0, result.stderr
    cache = first.dir.parent / "forge-home" / "cache" / "runtime"  # both jobs' FORGE_HOME
    cached = sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))
    assert len(cached) == 1 and cached[0].endswith(".zip"), cached
    zips = [job.dir / ".forge-runtime" / "starforge-runtime.zip" for job in (first, second)]
    assert zips[0].read_bytes() == zips[1].read_bytes() == (cache / cached[0]).read_bytes()
    # Nothing in it names either job's directory (the compiled file names are relative).
    with zipfile.ZipFile(zips[0]) as zf:
        blob = b"".join(zf.read(n) for n in zf.namelist())
    assert str(first.dir).encode() not in blob and str(second.dir).encode() not in blob
