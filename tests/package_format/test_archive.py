"""Deterministic packing and a hostile-archive corpus that unpack must refuse."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from support.cli import forge as run_forge

from starforge.authoring.files import local_tree_digest, plugin_files
from starforge.cluster.digest import tree_digest
from starforge.errors import ArchiveError
from starforge.package_format.archive import pack, pack_tree, unpack


def write(root, rel, data: bytes | str = "x", mode: int | None = None) -> None:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        os.chmod(path, mode)


def every_path(root) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    write(root, "plugin.yaml", "name: demo\n")
    write(root, "demo/__init__.py", "def install(params):\n    return params\n")
    write(root, "demo/data.bin", bytes(range(256)) * 40)
    write(root, "bin/run.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    write(root, "é/ünï.txt", "non-ascii\n")
    write(root, "x" * 60 + "/" + "y" * 60 + ".py", "long = True\n")  # needs a pax path record
    return root


# -- pack -----------------------------------------------------------------------------------

def test_two_packs_are_byte_identical_despite_mtimes_and_modes(src, tmp_path):
    files = plugin_files(src)
    first = pack(src, files, tmp_path / "one.tar.gz")
    for dirpath, dirnames, filenames in os.walk(src):
        for name in filenames:
            path = os.path.join(dirpath, name)
            os.utime(path, (1_000_000, 1_234_567_890))
            exec_bits = os.stat(path).st_mode & 0o111
            os.chmod(path, 0o600 if exec_bits else 0o700)  # group/other bits differ, exec bit flipped
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o700)
    second = pack(src, files, tmp_path / "two.tar.gz")
    assert first == second
    assert (tmp_path / "one.tar.gz").read_bytes() == (tmp_path / "two.tar.gz").read_bytes()


def test_chmod_plus_x_changes_neither_the_archive_nor_the_tree_digest(src, tmp_path):
    files = plugin_files(src)
    digest = local_tree_digest(src)
    first = pack(src, files, tmp_path / "one.tar.gz")
    os.chmod(src / "plugin.yaml", 0o755)
    os.chmod(src / "bin" / "run.sh", 0o644)
    assert pack(src, files, tmp_path / "two.tar.gz") == first
    assert (tmp_path / "one.tar.gz").read_bytes() == (tmp_path / "two.tar.gz").read_bytes()
    assert local_tree_digest(src) == digest


def test_archive_layout(src, tmp_path):
    dest = tmp_path / "out.tar.gz"
    packed = pack_tree(src, plugin_files(src), dest)
    raw = dest.read_bytes()
    assert raw[:4] == b"\x1f\x8b\x08\x00"  # gzip, deflate, no flags (so no file name)
    assert raw[4:8] == b"\x00\x00\x00\x00"  # header mtime 0
    with tarfile.open(dest, "r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.encode("utf-8"))
    assert names == plugin_files(src)  # files only, no directory entries
    for m in members:
        assert (m.type, m.mtime, m.uid, m.gid, m.uname, m.gname) == (tarfile.REGTYPE, 0, 0, 0, "", "")
        assert m.mode == 0o644  # whatever the source's mode: the exec bit is not part of the identity
    assert packed.tree_digest == local_tree_digest(src)
    assert packed.artifact_digest == "sha256:" + __import__("hashlib").sha256(raw).hexdigest()


def test_gnu_tar_extracts_what_pack_writes(src, tmp_path):
    if shutil.which("tar") is None:
        pytest.skip("tar is not installed")
    dest = tmp_path / "out.tar.gz"
    pack(src, plugin_files(src), dest)
    out = tmp_path / "gnu"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(dest), "-C", str(out)], check=True)
    assert tree_digest(out) == local_tree_digest(src)


def test_a_symlinked_file_is_refused_and_nothing_is_written(src, tmp_path):
    os.symlink("data.bin", src / "demo" / "alias.bin")
    dest = tmp_path / "out" / "demo.tar.gz"
    dest.parent.mkdir()
    with pytest.raises(ArchiveError, match="demo/alias.bin: is a symlink"):
        pack(src, ["demo/__init__.py", "demo/alias.bin", "plugin.yaml"], dest)
    assert os.listdir(dest.parent) == []


def test_a_file_under_a_symlinked_directory_is_refused(src, tmp_path):
    os.symlink("demo", src / "alias")
    (tmp_path / "out").mkdir()
    with pytest.raises(ArchiveError, match="'alias' is a symlink"):
        pack(src, ["alias/__init__.py"], tmp_path / "out" / "x.tar.gz")
    assert os.listdir(tmp_path / "out") == []


def test_a_hard_linked_file_is_refused(src, tmp_path):
    os.link(src / "plugin.yaml", tmp_path / "elsewhere")
    (tmp_path / "out").mkdir()
    with pytest.raises(ArchiveError, match="plugin.yaml: has 2 hard links"):
        pack(src, ["plugin.yaml"], tmp_path / "out" / "x.tar.gz")
    assert os.listdir(tmp_path / "out") == []


def test_a_failed_pack_keeps_the_previous_archive(src, tmp_path):
    dest = tmp_path / "x.tar.gz"
    pack(src, ["plugin.yaml"], dest)
    before = dest.read_bytes()
    with pytest.raises(ArchiveError):
        pack(src, ["plugin.yaml", "missing.py"], dest)
    assert dest.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["src", "x.tar.gz"]


# -- unpack: round trip ---------------------------------------------------------------------

def test_round_trip_verifies_the_tree_digest(src, tmp_path):
    dest = tmp_path / "out.tar.gz"
    packed = pack_tree(src, plugin_files(src), dest)
    target = tmp_path / "unpacked"
    files = unpack(dest, target, packed.tree_digest)
    assert files == packed.files
    assert tree_digest(target) == local_tree_digest(src)
    # every file is written 0644 (before the umask): modes are not part of a plugin's identity
    assert not os.stat(target / "bin" / "run.sh").st_mode & 0o111
    assert not os.stat(target / "plugin.yaml").st_mode & 0o111


def test_a_wrong_expected_digest_leaves_nothing(src, tmp_path):
    dest = tmp_path / "out.tar.gz"
    pack(src, plugin_files(src), dest)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(ArchiveError, match="tree digest mismatch"):
        unpack(dest, work / "target", "sf1:" + "0" * 64)
    assert os.listdir(work) == []


def test_unpack_into_an_existing_empty_directory(src, tmp_path):
    dest = tmp_path / "out.tar.gz"
    pack(src, ["plugin.yaml"], dest)
    (tmp_path / "empty").mkdir()
    assert list(unpack(dest, tmp_path / "empty")) == ["plugin.yaml"]
    with pytest.raises(ArchiveError, match="already exists"):
        unpack(dest, tmp_path / "empty")


# -- unpack: the hostile corpus, built here -------------------------------------------------

def reg(name: str, data: bytes = b"x", **attrs) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


def special(name: str, kind: bytes, **attrs) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, None


def tar_bytes(members, fmt=tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


class Sandbox:
    """An archive in one directory and a target three levels deep in another."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.archive = tmp_path / "in" / "hostile.tar.gz"
        self.archive.parent.mkdir()
        self.parent = tmp_path / "a" / "b" / "c"
        self.parent.mkdir(parents=True)
        self.target = self.parent / "target"

    def refuse(self, raw_tar: bytes | None = None, match: str = "", gz: bytes | None = None, **limits):
        self.archive.write_bytes(gz if gz is not None else gzip.compress(raw_tar, mtime=0))
        with pytest.raises(ArchiveError) as err:
            unpack(self.archive, self.target, **limits)
        message = str(err.value)
        assert "\n" not in message
        assert match in message, message
        # nothing anywhere but the archive and the empty directories we made
        assert every_path(self.tmp) == {"in", "in/hostile.tar.gz", "a", "a/b", "a/b/c"}
        return message


@pytest.fixture
def sandbox(tmp_path):
    return Sandbox(tmp_path)


def test_refuses_an_absolute_path(sandbox):
    sandbox.refuse(tar_bytes([reg("ok.py"), reg("/tmp/evil.py")]), "absolute path")


def test_refuses_dot_dot(sandbox):
    sandbox.refuse(tar_bytes([reg("ok.py"), reg("../../evil.py")]), "'..'")


def test_refuses_dot_dot_in_the_middle(sandbox):
    sandbox.refuse(tar_bytes([reg("pkg/../../../evil.py")]), "'..'")


def test_refuses_a_symlink(sandbox):
    sandbox.refuse(tar_bytes([reg("ok.py"), special("link", tarfile.SYMTYPE, linkname="/etc/passwd")]), "'link' is a symlink")


def test_refuses_a_symlink_then_a_file_through_it(sandbox):
    members = [special("escape", tarfile.SYMTYPE, linkname="../../.."), reg("escape/evil.py")]
    sandbox.refuse(tar_bytes(members), "symlink")


def test_refuses_a_hard_link(sandbox):
    sandbox.refuse(tar_bytes([reg("ok.py"), special("hl", tarfile.LNKTYPE, linkname="ok.py")]), "'hl' is a hard link")


@pytest.mark.parametrize(
    ("kind", "label"), [(tarfile.CHRTYPE, "character device"), (tarfile.BLKTYPE, "block device"), (tarfile.FIFOTYPE, "FIFO")]
)
def test_refuses_devices_and_fifos(sandbox, kind, label):
    sandbox.refuse(tar_bytes([reg("ok.py"), special("dev", kind, devmajor=1, devminor=3)]), f"'dev' is a {label}")


def test_refuses_a_duplicate_entry(sandbox):
    sandbox.refuse(tar_bytes([reg("a.py", b"first"), reg("a.py", b"second")]), "'a.py' appears more than once")


def test_refuses_a_pax_path_resolving_outside(sandbox):
    info, data = reg("innocent.py")
    info.pax_headers = {"path": "../../../outside.py"}
    raw = tar_bytes([(info, data)], fmt=tarfile.PAX_FORMAT)
    assert b"innocent.py" in raw  # the ustar name looks harmless; the pax record overrides it
    sandbox.refuse(raw, "outside.py")


def test_refuses_a_gnu_long_name_resolving_outside(sandbox):
    long_name = "d" * 120 + "/../../../../outside.py"
    raw = tar_bytes([reg(long_name)], fmt=tarfile.GNU_FORMAT)
    assert b"././@LongLink" in raw
    sandbox.refuse(raw, "'..'")


def test_refuses_a_case_collision(sandbox):
    sandbox.refuse(tar_bytes([reg("Readme.md"), reg("README.md")]), "collide when case is ignored")


def test_refuses_a_file_that_is_also_a_directory(sandbox):
    sandbox.refuse(tar_bytes([reg("pkg"), reg("pkg/mod.py")]), "needs 'pkg' as a directory")


@pytest.mark.parametrize("depth", [65, 1500])
def test_refuses_a_path_too_deep_up_front_and_fast(sandbox, depth):
    import time

    started = time.process_time()
    message = sandbox.refuse(tar_bytes([reg("ok.py"), reg("d/" * depth + "deep.py")]), "levels")
    assert "at most 64 levels" in message and len(message) < 400
    assert time.process_time() - started < 2.0


def test_refuses_a_path_too_long(sandbox):
    sandbox.refuse(tar_bytes([reg("ok.py"), reg("x" * 200 + "/" + "y" * 200 + "/" + "z" * 700 + ".py")]), "1024 bytes")


def test_accepts_a_path_at_the_depth_limit(tmp_path):
    raw = tar_bytes([reg("d/" * 63 + "leaf.py")])
    archive = tmp_path / "ok.tar.gz"
    archive.write_bytes(gzip.compress(raw, mtime=0))
    assert list(unpack(archive, tmp_path / "out")) == ["d/" * 63 + "leaf.py"]


def _lying_size(declared: int) -> bytes:
    """One 1000-byte file whose header claims *declared* bytes (checksum fixed up)."""
    raw = bytearray(tar_bytes([reg("data.bin", b"A" * 1000), reg("after.py", b"y")], fmt=tarfile.USTAR_FORMAT))
    raw[124:136] = b"%011o\x00" % declared
    raw[148:156] = b" " * 8
    raw[148:156] = b"%06o\x00 " % sum(raw[:512])
    return bytes(raw)


def test_refuses_a_size_header_larger_than_the_data(sandbox):
    sandbox.refuse(_lying_size(1_000_000), "truncated tar data", max_bytes=10_000_000)


def test_refuses_a_size_header_smaller_than_the_data(sandbox):
    sandbox.refuse(_lying_size(100), "size header")


def test_refuses_a_truncated_archive(sandbox):
    raw = tar_bytes([reg("data.bin", os.urandom(5000))])
    sandbox.refuse(raw[:2048], "truncated tar data")


def test_refuses_a_decompression_bomb_by_total_size(sandbox):
    raw = tar_bytes([reg("zeros.bin", b"\x00" * (4 << 20))])
    # with few files allowed, the room for headers is small and inflating stops early
    sandbox.refuse(raw, "decompression bomb", max_bytes=1 << 20, max_files=10)


def test_refuses_declared_sizes_over_the_limit(sandbox):
    raw = tar_bytes([reg("a.bin", b"a" * 600), reg("b.bin", b"b" * 600)])
    sandbox.refuse(raw, "files exceed 1000 bytes in total", max_bytes=1000)


def test_refuses_a_decompression_bomb_by_ratio(sandbox):
    bomb = tar_bytes([reg("zeros.bin", b"\x00" * (24 << 20))])
    compressed = gzip.compress(bomb, compresslevel=9, mtime=0)
    assert len(bomb) / len(compressed) > 500
    sandbox.refuse(gz=compressed, match="expands more than 200x")


def test_refuses_too_many_files(sandbox):
    sandbox.refuse(tar_bytes([reg(f"f{i}.py") for i in range(5)]), "more than 4 files", max_files=4)


def test_refuses_trailing_data_after_the_gzip_stream(sandbox):
    gz = gzip.compress(tar_bytes([reg("a.py")]), mtime=0) + b"junk"
    sandbox.refuse(gz=gz, match="after the end of the gzip stream")


def test_refuses_a_file_that_is_not_gzip(sandbox):
    sandbox.refuse(gz=tar_bytes([reg("a.py")]), match="not a gzip-compressed archive")


def test_refuses_an_archive_without_files(sandbox):
    sandbox.refuse(tar_bytes([special("empty-dir", tarfile.DIRTYPE)]), "holds no files")


def test_accepts_directory_entries_from_other_tools(tmp_path):
    raw = tar_bytes([special("pkg", tarfile.DIRTYPE, mode=0o700), reg("pkg/mod.py", b"x = 1\n")])
    archive = tmp_path / "other.tar.gz"
    archive.write_bytes(gzip.compress(raw))
    assert list(unpack(archive, tmp_path / "out")) == ["pkg/mod.py"]


def test_an_executable_member_from_another_tool_is_written_without_the_exec_bit(tmp_path):
    run, _ = reg("run.sh", b"#!/bin/sh\n")
    run.mode = 0o755
    raw = tar_bytes([(run, b"#!/bin/sh\n")])
    archive = tmp_path / "other.tar.gz"
    archive.write_bytes(gzip.compress(raw))
    unpack(archive, tmp_path / "out")
    assert not os.stat(tmp_path / "out" / "run.sh").st_mode & 0o111


# -- the CLI --------------------------------------------------------------------------------

def forge(*args, cwd):
    return run_forge(*args, cwd=cwd)


@pytest.fixture
def plugin(tmp_path):
    root = tmp_path / "demo-plugin"
    write(
        root,
        "plugin.yaml",
        "schema: forge/plugin/v1\nname: demo-plugin\nversion: '1.2.00'\nkind: algorithm\nentrypoint: demo_plugin:install\n",
    )
    write(root, "demo_plugin/__init__.py", "def install(params):\n    return None\n")
    write(root, "demo_plugin/__pycache__/__init__.cpython-311.pyc", b"\x00debris")
    return root


def test_cli_digest_prints_the_digest_of_the_packed_files(plugin):
    result = forge("plugin", "digest", str(plugin), cwd=plugin.parent)
    assert result.returncode == 0, result.stderr
    shutil.rmtree(plugin / "demo_plugin" / "__pycache__")
    assert result.stdout.strip() == tree_digest(plugin)


def test_cli_pack_writes_name_version_and_prints_both_digests(plugin, tmp_path):
    result = forge("plugin", "pack", str(plugin), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "demo-plugin-1.2.0.tar.gz"
    digest = local_tree_digest(plugin)
    assert lines[1].split() == ["tree", "digest:", digest]
    assert lines[2].split()[:2] == ["artifact", "digest:"]
    archive = tmp_path / "demo-plugin-1.2.0.tar.gz"
    assert unpack(archive, tmp_path / "check", digest)
    assert lines[2].split()[2] == "sha256:" + __import__("hashlib").sha256(archive.read_bytes()).hexdigest()


def test_cli_pack_refuses_a_plugin_that_fails_its_checks(plugin, tmp_path):
    write(plugin, "plugin.yaml", "schema: forge/plugin/v1\nname: demo-plugin\nversion: '1.2.00'\nkind: algorithm\n")
    result = forge("plugin", "pack", str(plugin), "-o", str(tmp_path / "x.tar.gz"), cwd=tmp_path)
    assert result.returncode == 4
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.tar.gz").exists()


def test_cli_pack_inside_the_plugin_warns_then_refuses_to_pack_its_own_archive(plugin):
    first = forge("plugin", "pack", cwd=plugin)
    assert first.returncode == 0, first.stderr
    assert "add '/demo-plugin-1.2.0.tar.gz' to .forgeignore" in first.stderr
    again = forge("plugin", "pack", cwd=plugin)
    assert again.returncode == 4
    assert "previous archive inside the plugin directory" in again.stderr
    write(plugin, ".forgeignore", "/*.tar.gz\n")
    assert forge("plugin", "pack", cwd=plugin).returncode == 0


def test_pack_and_publish_refuse_an_earlier_archive_of_the_plugin_wherever_the_output_goes(plugin, tmp_path):
    (plugin / "dist").mkdir()
    (tmp_path / "out").mkdir()
    old = forge("plugin", "pack", str(plugin), "-o", str(plugin / "dist" / "demo-plugin-1.1.0.tar.gz"), cwd=tmp_path)
    assert old.returncode == 0, old.stderr
    # a data file that only looks like one by name is packed as usual
    write(plugin, "demo-plugin-weights.tar.gz", b"not a tar at all")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="alice")
    for args in (("plugin", "pack", str(plugin), "-o", str(tmp_path / "out" / "new.tar.gz")), ("plugin", "publish", str(plugin))):
        refused = subprocess.run([sys.executable, "-m", "starforge", *args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert refused.returncode == 4, refused.stderr
        assert "dist/demo-plugin-1.1.0.tar.gz is a package archive of demo-plugin itself and would be packed into the new one" in refused.stderr
        assert "demo-plugin-weights" not in refused.stderr
    assert not (tmp_path / "out" / "new.tar.gz").exists() and not (tmp_path / "home" / "registry" / "plugins").exists()
    write(plugin, ".forgeignore", "/dist/\n")
    packed = forge("plugin", "pack", str(plugin), "-o", str(tmp_path / "out" / "new.tar.gz"), cwd=tmp_path)
    assert packed.returncode == 0, packed.stderr
    with tarfile.open(tmp_path / "out" / "new.tar.gz") as tar:
        names = tar.getnames()
    assert "demo-plugin-weights.tar.gz" in names and not any(n.startswith("dist") for n in names)


def test_cli_pack_into_a_missing_directory_is_a_one_line_error(plugin, tmp_path):
    result = forge("plugin", "pack", str(plugin), "-o", str(tmp_path / "nowhere" / "x.tar.gz"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {tmp_path / 'nowhere' / 'x.tar.gz'}: directory {tmp_path / 'nowhere'} does not exist")
    assert "Traceback" not in result.stderr and not (tmp_path / "nowhere").exists()
