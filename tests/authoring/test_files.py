"""Which files a plugin packs: default excludes, .forgeignore semantics, and every refusal."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from starforge.authoring.files import IgnoreRules, local_tree_digest, plugin_files
from starforge.cluster.digest import tree_digest
from starforge.errors import CheckError


def write(root, rel, data: bytes | str = "x") -> None:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def tree(root, *paths, ignore: str | None = None):
    for p in paths:
        write(root, p)
    if ignore is not None:
        write(root, ".forgeignore", ignore)
    return root


def test_files_are_sorted_by_utf8_bytes(tmp_path):
    tree(tmp_path, "é.py", "b.py", "Z.py", "a/b.py", "a.py")
    assert plugin_files(tmp_path) == ["Z.py", "a.py", "a/b.py", "b.py", "é.py"]


def test_default_excludes_apply_at_any_depth(tmp_path):
    tree(
        tmp_path,
        "plugin.yaml",
        "pkg/mod.py",
        "pkg/__pycache__/mod.cpython-311.pyc",
        "pkg/old.pyc",
        "pkg/old.pyo",
        ".git/config",
        "pkg/.hg/store",
        ".svn/entries",
        ".pytest_cache/README.md",
        ".mypy_cache/x.json",
        ".ruff_cache/x",
        ".tox/py311/x",
        ".venv/bin/python3",
        "pkg.egg-info/PKG-INFO",
        "pkg/.DS_Store",
    )
    assert plugin_files(tmp_path) == ["pkg/mod.py", "plugin.yaml"]


def test_build_and_dist_are_packed_unless_ignored(tmp_path):
    tree(tmp_path, "plugin.yaml", "mod/build/steps.py", "dist/x.txt")
    assert plugin_files(tmp_path) == ["dist/x.txt", "mod/build/steps.py", "plugin.yaml"]


def test_forgeignore_cannot_reinclude_default_excludes(tmp_path):
    tree(tmp_path, "a.py", "__pycache__/a.pyc", "b.pyc", ignore="!__pycache__/\n!*.pyc\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py"]


def test_forgeignore_comments_blank_lines_and_negation(tmp_path):
    ignore = "# data is fetched at run time\n\n*.bin\n!keep.bin\n\\#literal\n"
    tree(tmp_path, "a.py", "x.bin", "sub/y.bin", "keep.bin", "sub/keep.bin", "#literal", "# data is fetched at run time", ignore=ignore)
    assert plugin_files(tmp_path) == ["# data is fetched at run time", ".forgeignore", "a.py", "keep.bin", "sub/keep.bin"]


def test_forgeignore_trailing_slash_matches_directories_only(tmp_path):
    tree(tmp_path, "a.py", "logs/x.txt", "sub/logs/y.txt", "other/logs", ignore="logs/\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "other/logs"]


def test_forgeignore_leading_slash_anchors_to_the_root(tmp_path):
    tree(tmp_path, "notes.txt", "sub/notes.txt", "a.py", ignore="/notes.txt\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "sub/notes.txt"]


def test_forgeignore_middle_slash_anchors_too(tmp_path):
    tree(tmp_path, "docs/api.md", "sub/docs/api.md", "a.py", ignore="docs/*.md\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "sub/docs/api.md"]


def test_forgeignore_star_and_question_mark_stop_at_slashes(tmp_path):
    tree(tmp_path, "a.py", "data1.csv", "data12.csv", "data/1.csv", "d/x.csv", ignore="data?.csv\n/d*\n")
    # /d* matches d/ and data/ at the root (and data1.csv, data12.csv); ? is one character
    assert plugin_files(tmp_path) == [".forgeignore", "a.py"]
    (tmp_path / ".forgeignore").write_text("data?.csv\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "d/x.csv", "data/1.csv", "data12.csv"]


def test_forgeignore_double_star(tmp_path):
    tree(
        tmp_path,
        "a.py",
        "fixtures/big.json",
        "deep/er/fixtures/big.json",
        "cache/x/y/z.txt",
        "cache/top.txt",
        "src/gen/out.py",
        "src/a/b/gen/out.py",
        "src/keep.py",
        ignore="**/fixtures\ncache/**\nsrc/**/gen/\n",
    )
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "src/keep.py"]


def test_forgeignore_double_star_keeps_the_directory_itself(tmp_path):
    # 'cache/**' excludes what is inside cache, not cache itself, so a negation can reach in
    tree(tmp_path, "a.py", "cache/drop.txt", "cache/keep.txt", ignore="cache/**\n!cache/keep.txt\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "cache/keep.txt"]


def test_forgeignore_cannot_reinclude_inside_an_excluded_directory(tmp_path):
    tree(tmp_path, "a.py", "cache/keep.txt", ignore="cache/\n!cache/keep.txt\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py"]


def test_forgeignore_character_classes(tmp_path):
    tree(tmp_path, "a.py", "run1.log", "run2.log", "run9.log", "runx.log", "b.tmp", "c.tmp", ignore="run[1-3].log\n[!b].tmp\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "b.tmp", "run9.log", "runx.log"]


def test_forgeignore_posix_classes(tmp_path):
    tree(tmp_path, "a.py", "run1.log", "runA.log", "ckpt-7", "ckpt-x", ignore="run[[:digit:]].log\nckpt-[![:alpha:]]\n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "ckpt-x", "runA.log"]


def test_a_bad_forgeignore_pattern_names_the_line(tmp_path):
    tree(tmp_path, "a.py", ignore="# ranges\n*.log\n[z-a].txt\n")
    refused(tmp_path, ".forgeignore:3: bad pattern '[z-a].txt'")


def test_forgeignore_escapes_and_trailing_spaces(tmp_path):
    tree(tmp_path, "a.py", "!important", "star*", "starx", "sp ", ignore="\\!important\nstar\\*\nsp\\ \n")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py", "starx"]
    (tmp_path / ".forgeignore").write_text("a.py   \n")  # unescaped trailing spaces are dropped
    assert "a.py" not in plugin_files(tmp_path)


def test_ignore_rules_last_match_wins():
    rules = IgnoreRules(["*.log", "!keep.log", "keep.log"])
    assert rules.ignored("keep.log", False)
    assert rules.ignored("x/other.log", False)
    assert not rules.ignored("x.py", False)


def test_an_ignored_symlink_or_fifo_is_not_refused(tmp_path):
    tree(tmp_path, "a.py", ignore="link\npipe\n")
    os.symlink("a.py", tmp_path / "link")
    os.mkfifo(tmp_path / "pipe")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py"]


def test_a_virtualenv_full_of_symlinks_is_skipped(tmp_path):
    tree(tmp_path, "a.py")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3", tmp_path / ".venv" / "bin" / "python")
    assert plugin_files(tmp_path) == ["a.py"]


def test_local_tree_digest_is_the_digest_of_the_packed_files(tmp_path):
    tree(tmp_path, "a.py", "b/c.py", "skip.log", "__pycache__/a.pyc", ignore="*.log\n")
    assert local_tree_digest(tmp_path) == tree_digest(tmp_path, [".forgeignore", "a.py", "b/c.py"])


# -- refusals: one clear line naming the path ---------------------------------------------

def refused(root, match: str):
    with pytest.raises(CheckError) as err:
        plugin_files(root)
    assert "\n" not in err.value.message
    assert match in err.value.message, err.value.message
    return err.value


def test_refuses_a_symlinked_file(tmp_path):
    tree(tmp_path, "a.py")
    os.symlink("a.py", tmp_path / "b.py")
    err = refused(tmp_path, "b.py: is a symlink")
    assert ".forgeignore" in err.hint


def test_refuses_a_symlinked_directory(tmp_path):
    tree(tmp_path, "a.py", "real/x.py")
    os.symlink("real", tmp_path / "alias")
    refused(tmp_path, "alias: is a symlink")


def test_refuses_a_symlink_pointing_outside(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("secret")
    root = tmp_path / "plugin"
    tree(root, "a.py")
    os.symlink(outside, root / "leak.py")
    refused(root, "leak.py: is a symlink")


def test_refuses_a_hard_link(tmp_path):
    root = tmp_path / "plugin"
    tree(root, "a.py")
    os.link(root / "a.py", tmp_path / "elsewhere.py")
    refused(root, "a.py: has 2 hard links")


def test_refuses_a_fifo(tmp_path):
    tree(tmp_path, "a.py")
    os.mkfifo(tmp_path / "pipe")
    refused(tmp_path, "pipe: is a FIFO")


def test_refuses_a_socket(tmp_path):
    tree(tmp_path, "a.py")
    path = tmp_path / "s.sock"
    if len(os.fsencode(path)) > 100:
        pytest.skip("temporary path too long for an AF_UNIX socket")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(os.fspath(path))
        refused(tmp_path, "s.sock: is a socket")


@pytest.mark.parametrize(("kind", "label"), [(stat.S_IFCHR, "character device"), (stat.S_IFBLK, "block device")])
def test_refuses_a_device(tmp_path, kind, label):
    tree(tmp_path, "a.py")
    try:
        os.mknod(tmp_path / "dev", kind | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating device nodes needs root (CAP_MKNOD)")
    refused(tmp_path, f"dev: is a {label}")


@pytest.mark.parametrize(
    ("name", "reason"),
    [("back\\slash.py", "backslash"), ("new\nline.py", "control character"), ("cafe\u0301.py", "NFC")],
)
def test_refuses_bad_names(tmp_path, name, reason):
    tree(tmp_path, "a.py")
    (tmp_path / name).write_text("x")
    refused(tmp_path, reason)


def test_refuses_a_name_that_is_not_utf8(tmp_path):
    tree(tmp_path, "a.py")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff.py"), "wb") as f:
        f.write(b"x")
    refused(tmp_path, "not valid UTF-8")


def test_refuses_names_that_collide_ignoring_case(tmp_path):
    tree(tmp_path, "Readme.md", "README.md")
    refused(tmp_path, "collide when case is ignored")


def test_refuses_directories_that_collide_ignoring_case(tmp_path):
    tree(tmp_path, "Pkg/a.py", "pkg/b.py")
    refused(tmp_path, "Pkg and pkg: names collide")


def test_a_bad_name_is_fine_when_ignored(tmp_path):
    tree(tmp_path, "a.py", ignore="*.orig\n")
    (tmp_path / "back\\slash.orig").write_text("x")
    assert plugin_files(tmp_path) == [".forgeignore", "a.py"]


def test_refuses_an_empty_file_set(tmp_path):
    (tmp_path / "empty" / "dir").mkdir(parents=True)
    (tmp_path / "empty" / "__pycache__").mkdir()
    (tmp_path / "empty" / "__pycache__" / "x.pyc").write_bytes(b"")
    refused(tmp_path / "empty", "no files to pack")


def test_refuses_a_missing_directory(tmp_path):
    refused(tmp_path / "nope", "no such directory")


def test_refuses_too_many_files(tmp_path):
    tree(tmp_path, *[f"f{i}.py" for i in range(6)])
    with pytest.raises(CheckError, match="more than 5 files"):
        plugin_files(tmp_path, max_files=5)
    assert len(plugin_files(tmp_path, max_files=6)) == 6


def test_refuses_too_many_bytes(tmp_path):
    write(tmp_path, "a.bin", b"x" * 600)
    write(tmp_path, "b.bin", b"x" * 500)
    with pytest.raises(CheckError, match="exceed 1000 bytes") as err:
        plugin_files(tmp_path, max_bytes=1000)
    assert "FORGE_MAX_PLUGIN_BYTES" in err.value.hint
    assert plugin_files(tmp_path, max_bytes=1100) == ["a.bin", "b.bin"]


def test_default_limits_are_16_mib_and_1000_files(tmp_path, monkeypatch):
    monkeypatch.delenv("FORGE_MAX_PLUGIN_FILES", raising=False)
    monkeypatch.delenv("FORGE_MAX_PLUGIN_BYTES", raising=False)
    many = tmp_path / "many"
    tree(many, *[f"m{i}.py" for i in range(1000)])
    assert len(plugin_files(many)) == 1000
    write(many, "one_more.py", b"")
    with pytest.raises(CheckError, match="more than 1000 files to pack") as err:
        plugin_files(many)
    assert "FORGE_MAX_PLUGIN_FILES" in err.value.hint
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "weights.bin", "wb") as f:
        f.truncate(16 * 2**20)
    assert plugin_files(big) == ["weights.bin"]
    write(big, "x.py", b"x")
    with pytest.raises(CheckError, match="exceed 16 MiB, the limit per plugin") as err:
        plugin_files(big)
    assert "FORGE_MAX_PLUGIN_BYTES" in err.value.hint


def test_limits_come_from_the_environment(tmp_path, monkeypatch):
    tree(tmp_path, "a.py", "b.py", "c.py")
    monkeypatch.setenv("FORGE_MAX_PLUGIN_FILES", "2")
    with pytest.raises(CheckError, match="more than 2 files"):
        plugin_files(tmp_path)
    monkeypatch.setenv("FORGE_MAX_PLUGIN_FILES", "lots")
    with pytest.raises(CheckError, match="not an integer"):
        plugin_files(tmp_path)
