"""``make_read_only``: the walk that leaves a staged plugin tree without write bits."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from starforge.cluster.readonly import make_deletable, make_read_only
from starforge.cluster.removal import remove_tree


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "plugin"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "plugin.yaml").write_text("name: p\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "tool.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "pkg" / "sub" / "tool.sh", 0o775)
    os.chmod(root / "plugin.yaml", 0o666)
    yield root
    for dirpath, dirnames, _ in os.walk(root):  # let pytest clean up
        os.chmod(dirpath, 0o755)


def test_every_file_and_directory_loses_its_write_bits_and_keeps_the_rest(tree):
    make_read_only(tree)
    assert mode(tree) == 0o555
    assert mode(tree / "pkg") == 0o555
    assert mode(tree / "pkg" / "sub") == 0o555
    assert mode(tree / "plugin.yaml") == 0o444
    assert mode(tree / "pkg" / "sub" / "tool.sh") == 0o555  # executable stays executable


def test_a_symlink_and_what_it_points_to_are_left_alone(tree, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the tree")
    os.chmod(outside, 0o644)
    (tree / "link").symlink_to(outside)
    (tree / "dirlink").symlink_to(tmp_path)
    make_read_only(tree)
    assert mode(outside) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) & 0o200
    assert os.readlink(tree / "link") == str(outside)


def test_a_second_walk_over_a_read_only_tree_changes_nothing(tree):
    make_read_only(tree)
    make_read_only(tree)
    assert mode(tree / "plugin.yaml") == 0o444
    assert mode(tree / "pkg") == 0o555


def test_a_missing_path_is_no_error(tmp_path):
    make_read_only(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()


def test_a_single_file_path_loses_its_write_bits(tmp_path):
    f = tmp_path / "one.py"
    f.write_text("x = 1\n")
    os.chmod(f, 0o664)
    make_read_only(f)
    assert mode(f) == 0o444


def test_make_deletable_gives_each_folder_its_owners_write_bit_back_and_leaves_files_read_only(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(outside, 0o555)
    (tree / "dirlink").symlink_to(outside)
    make_read_only(tree)
    make_deletable(tree)
    assert (mode(tree), mode(tree / "pkg"), mode(tree / "pkg" / "sub")) == (0o755, 0o755, 0o755)
    assert (mode(tree / "plugin.yaml"), mode(tree / "pkg" / "sub" / "tool.sh")) == (0o444, 0o555)
    assert mode(outside) == 0o555  # a link is not followed
    os.chmod(outside, 0o755)


def test_make_deletable_walks_a_deep_tree_without_recursion(tmp_path):
    top = tmp_path / "deep"
    folders = [top]
    top.mkdir()
    for _ in range(1200):  # deeper than Python's recursion limit
        folders.append(folders[-1] / "d")
        folders[-1].mkdir()
    for folder in reversed(folders):
        os.chmod(folder, 0o555)
    make_deletable(top)
    assert [str(f) for f in folders if mode(f) != 0o755] == []
    assert remove_tree(top) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as an ordinary user needs root")
def test_an_ordinary_user_deletes_a_read_only_tree_only_once_it_is_deletable(tree):
    # root deletes a read-only tree anyway and hides the bug; its owner cannot
    home = tree.parent
    for dirpath, dirnames, filenames in os.walk(home):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, 65534, 65534)
    pid = os.fork()
    if pid == 0:  # the child: the tree's owner, an ordinary user; relative paths from a folder it owns
        code = 9
        try:
            os.chdir(home)
            os.setgid(65534)
            os.setuid(65534)
            make_read_only("plugin")
            shutil.rmtree("plugin", ignore_errors=True)
            code = 2 if not os.path.isdir("plugin/pkg/sub") else 3
            if code == 3:
                make_deletable("plugin")
                shutil.rmtree("plugin", ignore_errors=True)
                code = 0 if not os.path.exists("plugin") else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    # 2: the read-only tree went at once (not read-only?); 4: still there after make_deletable
    assert os.waitstatus_to_exitcode(status) == 0
