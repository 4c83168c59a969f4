import subprocess
import sys

from starforge.state.filelock import exclusive_lock

HOLDER = """
import sys, time
from pathlib import Path
from starforge.state.filelock import exclusive_lock
with exclusive_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(0.5)
    Path(sys.argv[2]).write_text("done")
"""


def test_a_second_holder_waits_until_the_first_releases(tmp_path):
    lock = tmp_path / "plugin.lock"
    marker = tmp_path / "first-holder-done"
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with exclusive_lock(lock):
            # Only reachable after the child wrote its marker and left its block.
            assert marker.read_text() == "done"
    finally:
        child.wait(timeout=30)
    assert child.returncode == 0
    assert lock.exists()  # left in place for the next holder


REMOVER = """
import os, sys, time
from starforge.state.filelock import exclusive_lock
with exclusive_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(0.5)
    os.unlink(sys.argv[1])  # a failed first publish removes the folder it made, lock file and all
    if sys.argv[2] == "folder":
        os.rmdir(os.path.dirname(sys.argv[1]))
"""


def test_a_waiter_whose_lock_file_was_removed_locks_the_file_now_there_or_says_it_is_gone(tmp_path):
    import fcntl
    import os

    import pytest

    for removed in ("file", "folder"):
        lock = tmp_path / removed / ".lock"
        lock.parent.mkdir()
        child = subprocess.Popen([sys.executable, "-c", REMOVER, str(lock), removed], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "held"
            if removed == "file":
                with exclusive_lock(lock):
                    # held: the file at the path, which a newcomer locks too, not the removed one
                    fd = os.open(lock, os.O_RDONLY)
                    try:
                        with pytest.raises(BlockingIOError):
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    finally:
                        os.close(fd)
            else:
                with pytest.raises(FileNotFoundError) as gone:
                    with exclusive_lock(lock):
                        pass
                assert gone.value.filename == str(lock)
        finally:
            child.wait(timeout=30)
        assert child.returncode == 0
