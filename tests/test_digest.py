"""Tree digest: agreement with the coreutils pipeline, byte ordering, cluster-side strictness."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess

import pytest

from starforge.authoring.files import local_tree_digest
from starforge.cluster.digest import (
    case_collision,
    diff_maps,
    digest_of_map,
    file_map,
    path_problem,
    read_tree_strict,
    tree_digest,
    verify_tree,
)
from starforge.errors import VerificationError


def write(root, rel, data: bytes | str) -> None:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def shell_digest(root) -> str:
    """The documented pipeline, run for real."""
    out = subprocess.run(
        "find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum",
        shell=True, cwd=root, check=True, capture_output=True, text=True,
    ).stdout
    return "sf1:" + out.split()[0]


@pytest.fixture
def generated_tree(tmp_path):
    rng = random.Random(1234)
    root = tmp_path / "tree"
    for i in range(40):
        depth = rng.randint(0, 4)
        parts = [f"d{rng.randint(0, 3)}" for _ in range(depth)] + [f"f{i}.{rng.choice(['py', 'bin', 'txt'])}"]
        size = rng.choice([0, 1, 100, 4095, 70_000, 300_000])
        write(root, "/".join(parts), bytes(rng.getrandbits(8) for _ in range(min(size, 2000))) * (size // 2000 + 1))
    write(root, "with space.txt", "a b\n")
    write(root, "ünïcode/é.py", "x = 1\r\n")  # raw bytes, CRLF kept
    write(root, "Zed.py", "")
    return root


def test_generated_tree_equals_coreutils_pipeline(generated_tree):
    expected = shell_digest(generated_tree)
    assert tree_digest(generated_tree) == expected
    assert tree_digest(generated_tree, workers=2) == expected
    assert tree_digest(generated_tree, workers=3) == expected


def test_large_tree_is_hashed_in_parallel_with_the_same_result(tmp_path):
    # over the 16 MiB threshold, so the default picks threads on a multi-core machine
    for i in range(5):
        write(tmp_path, f"big/part{i}.bin", os.urandom(4 << 20))
    write(tmp_path, "small.py", "pass\n")
    expected = shell_digest(tmp_path)
    assert tree_digest(tmp_path) == expected
    assert tree_digest(tmp_path, workers=1) == expected
    assert tree_digest(tmp_path, workers=2) == expected


def test_a_file_vanishing_during_parallel_hashing_raises(tmp_path):
    write(tmp_path, "a.bin", b"a" * 1000)
    with pytest.raises(FileNotFoundError):
        file_map(tmp_path, ["a.bin", "gone.bin"], workers=2)


def test_lines_are_sorted_by_utf8_bytes_of_the_path():
    files = {"é.py": "1" * 64, "a.py": "2" * 64, "Z.py": "3" * 64, "ä.py": "4" * 64, "a/b.py": "5" * 64}
    # bytes: "Z" 5a < "a.py" 61 2e < "a/b.py" 61 2f < "ä" c3 a4 < "é" c3 a9
    preimage = (
        f"{'3' * 64}  Z.py\n{'2' * 64}  a.py\n{'5' * 64}  a/b.py\n{'4' * 64}  ä.py\n{'1' * 64}  é.py\n"
    ).encode("utf-8")
    assert digest_of_map(files) == "sf1:" + hashlib.sha256(preimage).hexdigest()


def test_non_ascii_names_match_the_pipeline(tmp_path):
    for name in ["ä.py", "a.py", "Z.py", "é/x.py", "a-b.py", "a_b.py", "日本.txt"]:
        write(tmp_path, name, name)
    assert tree_digest(tmp_path) == shell_digest(tmp_path)


def test_a_name_that_is_not_utf8_hashes_its_raw_bytes_like_the_pipeline(tmp_path):
    write(tmp_path, "ok.py", "x")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff.py"), "wb") as f:
        f.write(b"y")
    assert tree_digest(tmp_path) == shell_digest(tmp_path)


def test_debris_does_not_change_the_local_digest(tmp_path):
    write(tmp_path, "plugin.yaml", "name: x\n")
    write(tmp_path, "mod/__init__.py", "def install(params):\n    pass\n")
    before = local_tree_digest(tmp_path)
    assert before == shell_digest(tmp_path)
    write(tmp_path, "mod/__pycache__/__init__.cpython-311.pyc", b"\x00bytecode")
    write(tmp_path, ".pytest_cache/v/cache/lastfailed", "{}")
    write(tmp_path, ".git/HEAD", "ref: refs/heads/main\n")
    write(tmp_path, "mod/stale.pyc", b"\x00")
    write(tmp_path, "mod.egg-info/PKG-INFO", "Name: mod\n")
    write(tmp_path, ".DS_Store", b"\x00\x01")
    assert local_tree_digest(tmp_path) == before
    # the cluster side counts everything
    assert tree_digest(tmp_path) != before


def test_read_tree_strict_refuses_a_symlink(tmp_path):
    write(tmp_path, "a.py", "x")
    os.symlink("a.py", tmp_path / "b.py")
    with pytest.raises(VerificationError, match=r"b\.py: is a symlink"):
        read_tree_strict(tmp_path)


def test_read_tree_strict_refuses_a_symlinked_directory(tmp_path):
    write(tmp_path, "real/a.py", "x")
    os.symlink("real", tmp_path / "alias")
    with pytest.raises(VerificationError, match="alias: is a symlink"):
        read_tree_strict(tmp_path)


def test_read_tree_strict_refuses_a_fifo(tmp_path):
    write(tmp_path, "a.py", "x")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(VerificationError, match="pipe: is not a regular file"):
        read_tree_strict(tmp_path)


def test_read_tree_strict_refuses_a_hard_link(tmp_path):
    write(tmp_path, "sub/a.py", "x")
    os.link(tmp_path / "sub" / "a.py", tmp_path / "outside-copy")
    with pytest.raises(VerificationError, match="has 2 hard links"):
        read_tree_strict(tmp_path / "sub")


def test_planted_bytecode_fails_verification_naming_the_file(tmp_path):
    write(tmp_path, "mod/__init__.py", "x = 1\n")
    files = file_map(tmp_path)
    expected = digest_of_map(files)
    assert verify_tree(tmp_path, expected, files) == {"mod/__init__.py": b"x = 1\n"}
    write(tmp_path, "mod/__pycache__/__init__.cpython-311.pyc", b"evil")
    with pytest.raises(VerificationError) as err:
        verify_tree(tmp_path, expected, files)
    assert "added: mod/__pycache__/__init__.cpython-311.pyc" in str(err.value)


def test_diff_reports_added_removed_changed(tmp_path):
    write(tmp_path, "keep.py", "same")
    write(tmp_path, "edit.py", "before")
    write(tmp_path, "drop.py", "bye")
    expected = file_map(tmp_path)
    os.remove(tmp_path / "drop.py")
    write(tmp_path, "edit.py", "after")
    write(tmp_path, "new.py", "hello")
    diff = diff_maps(expected, file_map(tmp_path))
    assert (diff.added, diff.removed, diff.changed) == (["new.py"], ["drop.py"], ["edit.py"])
    assert diff.describe() == "added: new.py; removed: drop.py; changed: edit.py"
    with pytest.raises(VerificationError, match="added: new.py; removed: drop.py; changed: edit.py"):
        verify_tree(tmp_path, digest_of_map(expected), expected)


def test_empty_tree_is_an_error(tmp_path):
    (tmp_path / "only-dirs" / "nested").mkdir(parents=True)
    with pytest.raises(VerificationError, match="no files"):
        tree_digest(tmp_path / "only-dirs")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty path"),
        ("/etc/passwd", "absolute path"),
        ("a/../b", "'..'"),
        ("..", "'..'"),
        ("a//b", "''"),
        ("./a", "'.'"),
        ("a\\b", "backslash"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        ("cafe\u0301.py", "NFC"),
        ("bad\udcff.py", "UTF-8"),
    ],
)
def test_path_problem_names_the_reason(path, reason):
    problem = path_problem(path)
    assert problem is not None and reason in problem


def test_path_problem_accepts_ordinary_names():
    for path in ["a.py", "pkg/sub/mod.py", "caf\u00e9.py", "with space/x", ".hidden", "a..b"]:
        assert path_problem(path) is None


def test_case_collision_covers_directories():
    assert case_collision(["a/x.py", "b.py"]) is None
    assert case_collision(["Mod/x.py", "mod/y.py"]) == ("Mod", "mod")
    assert case_collision(["README", "readme"]) == ("README", "readme")


def test_pipeline_agrees_for_a_tree_with_an_empty_file_and_empty_dirs(tmp_path):
    write(tmp_path, "empty", b"")
    (tmp_path / "emptydir" / "deeper").mkdir(parents=True)
    assert tree_digest(tmp_path) == shell_digest(tmp_path)
