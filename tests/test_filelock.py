import subprocess
import sys

from starforge.filelock import exclusive_lock

HOLDER = """
import sys, time
from pathlib import Path
from starforge.filelock import exclusive_lock
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
