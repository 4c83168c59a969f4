"""No file of the checkout holds a merge's conflict markers (a doc with them once passed every other test)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)


def marked(text: str) -> list:
    """The lines of *text* that are conflict markers."""
    return [m.group(0).strip() for m in MARKER.finditer(text)]


def test_the_check_finds_each_marker_and_not_a_heading_underline():
    assert marked("a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> main\n") == ["<<<<<<<", "=======", ">>>>>>>"]
    assert marked("Title\n========\n= not seven\n") == []


def test_no_tracked_file_holds_conflict_markers():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    if not files:  # not a git checkout (an unpacked sdist): nothing to check
        return
    found = []
    for name in files:
        path = REPO / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if marked(text):
            found.append(name)
    assert found == []
