import os
import stat

import pytest

from starforge.cluster import atomic


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_file_replaces_the_target_with_text_as_utf8(tmp_path):
    target = tmp_path / "forge.yaml"
    target.write_text("old\n")
    atomic.write_file(target, "naïve\n")
    assert target.read_bytes() == b"na\xc3\xafve\n"
    assert _mode(target) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["forge.yaml"]


def test_mode_is_exact_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        atomic.write_file(tmp_path / "public.pem", b"k", 0o644)
    finally:
        os.umask(old)
    atomic.write_file(tmp_path / "secret.pem", b"k", 0o600, fsync=True)
    assert _mode(tmp_path / "public.pem") == 0o644
    assert _mode(tmp_path / "secret.pem") == 0o600


def test_exclusive_never_replaces_an_existing_file(tmp_path):
    key = tmp_path / "default.key"
    key.write_bytes(b"first")
    with pytest.raises(FileExistsError):
        atomic.write_file(key, b"second", 0o600, exclusive=True)
    assert key.read_bytes() == b"first"
    assert sorted(os.listdir(tmp_path)) == ["default.key"]
    atomic.write_file(tmp_path / "other.key", b"new", 0o600, exclusive=True)
    assert (tmp_path / "other.key").read_bytes() == b"new"


def test_a_failing_block_leaves_the_target_and_no_temp_file(tmp_path):
    target = tmp_path / "blob"
    target.write_bytes(b"intact")
    with pytest.raises(RuntimeError):
        with atomic.writer(target) as f:
            f.write(b"half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"intact"
    assert sorted(os.listdir(tmp_path)) == ["blob"]


def test_a_leftover_temp_name_is_skipped(tmp_path):
    target = tmp_path / "record.json"
    # The next two temp names this process would pick, as if left by a killed process.
    n = next(atomic._counter)
    stale = [tmp_path / f".record.json.{os.getpid()}-{n + i}.tmp" for i in (1, 2)]
    for path in stale:
        path.write_bytes(b"stale")
    atomic.write_file(target, "{}\n")
    assert target.read_text() == "{}\n"
    assert all(p.read_bytes() == b"stale" for p in stale)
