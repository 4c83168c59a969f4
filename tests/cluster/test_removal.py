"""``remove_tree``: the one walk that deletes a job directory or a copy of one.

What an ordinary user's ``forge jobs rm`` makes of it (read-only staged folders, a folder
of another user) is in ``tests/backends/test_staged.py``; here, as whoever runs the suite.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess

from starforge.cluster.readonly import make_read_only
from starforge.cluster.removal import describe_failures, remove_tree


def _nest(top, depth: int) -> None:
    top.mkdir()
    here = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):  # by descriptor: a path this long is past PATH_MAX
            os.mkdir("d", dir_fd=here)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = below
        fd = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here)
        os.close(fd)
    finally:
        os.close(here)


def test_a_tree_deeper_than_the_recursion_limit_and_the_open_file_limit_goes(tmp_path):
    _nest(tmp_path / "job", 1500)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024), hard))  # fewer than a descriptor per level
    try:
        assert remove_tree(tmp_path / "job") == []
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        # whatever failed: no tree deeper than the recursion limit is left for pytest's own cleanup
        subprocess.run(["rm", "-rf", str(tmp_path / "job")], check=True, timeout=120)
    assert not os.path.lexists(tmp_path / "job")


def test_read_only_staged_folders_go_and_links_are_removed_not_followed(tmp_path):
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "keep.txt").write_text("keep")
    outside.chmod(0o555)
    job = tmp_path / "job"
    (job / "forge_plugins" / "p" / "pkg").mkdir(parents=True)
    (job / "forge_plugins" / "p" / "pkg" / "m.py").write_text("x = 1\n")
    (job / "recipe" / "conf").mkdir(parents=True)
    (job / "recipe" / "conf" / "a.yaml").write_text("a: 1\n")
    (job / "recipe" / "to-outside").symlink_to(outside)
    (job / "recipe" / "file-link").symlink_to(outside / "keep.txt")
    (job / "work" / "locked").mkdir(parents=True)
    (job / "work" / "locked" / "f").write_text("x")
    (job / "work" / "locked").chmod(0)  # a folder of ours we may not even read
    for part in ("forge_plugins", "recipe"):
        make_read_only(job / part)
    assert remove_tree(job) == []
    assert not os.path.lexists(job)
    assert (outside / "keep.txt").read_text() == "keep" and (outside / "inner").is_dir()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o555  # nothing outside was made writable
    outside.chmod(0o755)


def test_a_link_or_a_file_at_the_top_is_removed_itself(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("keep")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "link") == [] and remove_tree(tmp_path / "file") == []
    assert remove_tree(tmp_path / "absent") == []
    assert (target / "keep").read_text() == "keep"
    assert not os.path.lexists(tmp_path / "link") and not os.path.lexists(tmp_path / "file")


def test_relative_to_an_open_folder(tmp_path):
    (tmp_path / "job" / "a").mkdir(parents=True)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert remove_tree("job", dir_fd=fd) == []
    finally:
        os.close(fd)
    assert not (tmp_path / "job").exists()


def test_failures_read_as_one_line():
    many = [f"job/work/{'d/' * 200}f{i}: Permission denied" for i in range(5)]
    text = describe_failures(many)
    assert text.count("Permission denied") == 3 and text.endswith("; and 2 more") and len(text) < 600
