import errno
import os
import stat
import subprocess
import time

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
    stale = [tmp_path / f".record.json.{os.getpid()}-{n + i}@{atomic.writer_tag()}.tmp" for i in (1, 2)]
    for path in stale:
        path.write_bytes(b"stale")
    atomic.write_file(target, "{}\n")
    assert target.read_text() == "{}\n"
    assert all(p.read_bytes() == b"stale" for p in stale)


# -- a full disk, and what killed writers leave ----------------------------------------------

def test_a_full_disk_during_the_final_flush_leaves_no_temp_file(tmp_path):
    from disk_faults import full_disk

    with full_disk(tmp_path / "disk", 128) as fill:
        fill()
        for size in (100, 5000, 20000):  # buffered (flushed at the end) and written in the block
            with pytest.raises(OSError) as err:
                with atomic.writer(tmp_path / "disk" / "blob", fsync=True) as f:
                    f.write(b"x" * size)
            assert err.value.errno == errno.ENOSPC
            with pytest.raises(OSError):
                atomic.write_file(tmp_path / "disk" / "small", b"y" * size)
            assert sorted(os.listdir(tmp_path / "disk")) == [".filler"]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_old_temp_files_of_dead_writers(tmp_path):
    dead = _dead_pid()
    old = time.time() - 3600
    names = {
        f".blob.{dead}-0.tmp": True,  # dead writer, old: swept
        f".{'a' * 64}.{dead}-12.tmp": True,
        f".blob.{os.getpid()}-0.tmp": False,  # this process: alive
        f".blob.{dead}-1.tmp.fresh": False,  # not a temp name
        "blob": False,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (old, old))
    (tmp_path / f".recent.{dead}-0.tmp").write_bytes(b"x")  # dead, but written just now: maybe another host's
    removed = atomic.sweep_stale(tmp_path)
    assert sorted(removed) == sorted(n for n, gone in names.items() if gone)
    assert sorted(os.listdir(tmp_path)) == sorted([n for n, gone in names.items() if not gone] + [f".recent.{dead}-0.tmp"])


def test_temp_names_carry_pid_and_host_and_this_hosts_dead_writers_are_swept_at_once(tmp_path):
    here = atomic.writer_tag()
    assert here.startswith(os.uname().nodename[:20])
    with atomic.writer(tmp_path / "blob") as f:
        (name,) = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        assert name.startswith(f".blob.{os.getpid()}-") and name.endswith(f"@{here}.tmp")
        f.write(b"x")
    dead = _dead_pid()
    old = time.time() - 3600
    names = {
        f".blob.{dead}-0@{here}.tmp": True,  # this host, dead writer, written just now: swept at once
        f".{'a' * 64}.{dead}-3@{here}.tmp": True,
        f".blob.{os.getpid()}-7@{here}.tmp": False,  # this host, alive
        f".blob.{dead}-1@otherhost+4026531836.tmp": False,  # another host, fresh: its pid means nothing here
        f".blob.{dead}-2@otherhost+4026531836.tmp.x": False,  # not a temp name
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / f".aged.{dead}-4@otherhost+4026531836.tmp").write_bytes(b"x")
    os.utime(tmp_path / f".aged.{dead}-4@otherhost+4026531836.tmp", (old, old))  # another host's, 1 h old: swept
    removed = atomic.sweep_stale(tmp_path)
    assert sorted(removed) == sorted([n for n, gone in names.items() if gone] + [f".aged.{dead}-4@otherhost+4026531836.tmp"])
    assert sorted(os.listdir(tmp_path)) == sorted(["blob"] + [n for n, gone in names.items() if not gone])

