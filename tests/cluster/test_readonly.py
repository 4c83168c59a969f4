"""``make_read_only``: the walk that leaves a staged plugin tree without write bits."""

from __future__ import annotations

import os
import stat

import pytest

from starforge.cluster.readonly import make_read_only


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
