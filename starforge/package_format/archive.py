"""Deterministic plugin archives (tar.gz) and a defensive unpacker.

``pack(root, files, dest)`` writes the listed files as a gzip-compressed POSIX (pax)
tar whose bytes depend only on the file names and contents (what the tree digest covers):
entries sorted by the UTF-8 bytes of their path, one regular-file entry per file and no
directory entries, mtime 0, uid/gid 0, empty owner names, mode 0644 for every file (the
execute bit is not part of the identity, so it is not packed), and a gzip
header with mtime 0, no file name and a fixed OS byte. It returns ``sha256:<hex>`` of the
archive bytes (a transport detail; the tree digest is the identity).

``unpack(archive, target)`` accepts only what a plugin tree may hold: regular files (and
directory entries, which it recreates) under safe, NFC, case-distinct relative paths. It
refuses links, devices, FIFOs, duplicates, paths leaving the target, size headers that do
not match the data, and archives that expand beyond the limits; it extracts into a
temporary directory beside *target* and renames it into place only when everything
checked out, so a refused archive leaves nothing behind.

Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import struct
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterable

from ..cluster.digest import case_collision, digest_of_map, path_problem
from ..errors import ArchiveError
from ..state.directories import dir_mode, disk_hint, make_dirs

ARTIFACT_PREFIX = "sha256:"
COMPRESS_LEVEL = 9
DEFAULT_MAX_BYTES = 256 * 2**20
DEFAULT_MAX_FILES = 10_000
DEFAULT_MAX_RATIO = 200
# A plugin path deeper or longer than this is refused before anything is written: the
# filesystem's own limits (PATH_MAX 4096) would otherwise be found by os.makedirs after
# seconds of work, as a RecursionError.
MAX_PATH_DEPTH = 64
MAX_PATH_BYTES = 1024
# The compression ratio is only judged past this many uncompressed bytes: small trees of
# tiny files are mostly zero padding and compress far better than any real bomb threshold.
RATIO_GRACE_BYTES = 16 * 2**20
_CHUNK = 1 << 20
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# -- writing ------------------------------------------------------------------------------

class _GzipWriter(io.RawIOBase):
    """A gzip member written by hand: header mtime 0, no name, OS byte 255 (unknown).

    ``tarfile``'s ``w:gz`` stamps the current time into the header; this does not. The
    compressed bytes are hashed on the way to *out*.
    """

    def __init__(self, out: BinaryIO, level: int = COMPRESS_LEVEL) -> None:
        super().__init__()
        self._out = out
        self._sha = hashlib.sha256()
        self._crc = 0
        self._size = 0
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY)
        xfl = 2 if level == 9 else 4 if level == 1 else 0
        # magic, CM=deflate, FLG=0, MTIME=0, XFL, OS=255
        self._emit(b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + bytes([xfl, 255]))

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.write(data)
            self._sha.update(data)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        self._crc = zlib.crc32(view, self._crc)
        self._size += len(view)
        self._emit(self._deflate.compress(view))
        return len(view)

    def tell(self) -> int:
        return self._size

    def finish(self) -> str:
        """Flush the deflate stream and write the trailer; return ``sha256:<hex>``."""
        self._emit(self._deflate.flush(zlib.Z_FINISH))
        self._emit(struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF))
        return ARTIFACT_PREFIX + self._sha.hexdigest()


@dataclass(frozen=True)
class Packed:
    """What :func:`pack_tree` wrote: the archive digest and the per-file map of its bytes."""

    path: str
    artifact_digest: str
    files: dict

    @property
    def tree_digest(self) -> str:
        return digest_of_map(self.files)


def _open_in_tree(root_fd: int, rel: str) -> int:
    """Open *rel* below the directory *root_fd* without following any symlink on the way."""
    parts = rel.split("/")
    dir_fd = root_fd
    try:
        for part in parts[:-1]:
            try:
                fd = os.open(part, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ArchiveError(f"{rel}: {part!r} is a symlink or not a directory") from None
                raise ArchiveError(f"{rel}: cannot open directory {part!r} ({exc.strerror})") from None
            if dir_fd != root_fd:
                os.close(dir_fd)
            dir_fd = fd
        try:
            return os.open(parts[-1], os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ArchiveError(f"{rel}: is a symlink; plugins hold regular files only") from None
            raise ArchiveError(f"{rel}: cannot open ({exc.strerror})") from None
    finally:
        if dir_fd != root_fd:
            os.close(dir_fd)


def pack_tree(root: str | os.PathLike, files: Iterable[str], dest: str | os.PathLike) -> Packed:
    """Write *files* (relative POSIX paths below *root*) to the archive *dest*, atomically."""
    root = os.fspath(root)
    dest = os.fspath(dest)
    names = sorted(set(files), key=lambda p: p.encode("utf-8"))
    if not names:
        raise ArchiveError(f"{root}: nothing to pack")
    for name in names:
        problem = path_problem(name)
        if problem:
            raise ArchiveError(f"{name!r}: {problem}")
    clash = case_collision(names)
    if clash:
        raise ArchiveError(f"{clash[0]} and {clash[1]}: names collide when case is ignored")
    dest_dir = os.path.dirname(os.path.abspath(dest))
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=f".{os.path.basename(dest)}.", suffix=".tmp")
    root_fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        with os.fdopen(fd, "wb") as out:
            gz = _GzipWriter(out)
            file_map = _write_tar(root_fd, names, gz)
            artifact = gz.finish()
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(root_fd)
    return Packed(path=dest, artifact_digest=artifact, files=file_map)


def pack(root: str | os.PathLike, files: Iterable[str], dest: str | os.PathLike) -> str:
    """Write the deterministic archive of *files* below *root* to *dest*; return ``sha256:<hex>``.

    >>> pack("opsd-patch", ["opsd_patch/__init__.py", "plugin.yaml"], "out.tar.gz")  # doctest: +SKIP
    'sha256:…'
    """
    return pack_tree(root, files, dest).artifact_digest


class _HashingReader:
    """Reads a file for ``tarfile.addfile`` and hashes exactly the bytes handed over."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.sha.update(data)
        return data


def _write_tar(root_fd: int, names: list[str], gz: _GzipWriter) -> dict:
    file_map: dict[str, str] = {}
    with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name in names:
            fd = _open_in_tree(root_fd, name)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise ArchiveError(f"{name}: is not a regular file")
                if st.st_nlink > 1:
                    raise ArchiveError(f"{name}: has {st.st_nlink} hard links; plugin files must have exactly one")
                info = tarfile.TarInfo(name)
                info.size = st.st_size
                info.mtime = 0
                info.mode = 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.type = tarfile.REGTYPE
                reader = _HashingReader(f)
                try:
                    tar.addfile(info, reader)
                except (OSError, tarfile.TarError):
                    raise ArchiveError(f"{name}: changed while being packed (shorter than {st.st_size} bytes)") from None
                if f.read(1):
                    raise ArchiveError(f"{name}: changed while being packed (longer than {st.st_size} bytes)")
            file_map[name] = reader.sha.hexdigest()
    return file_map


# -- reading ------------------------------------------------------------------------------

def _inflate_to(src: BinaryIO, out: BinaryIO, *, limit: int, max_ratio: float, name: str) -> int:
    """Decompress the single gzip member *src* into *out*, refusing bombs; return its size."""
    magic = src.read(2)
    if magic != b"\x1f\x8b":
        raise ArchiveError(f"{name}: not a gzip-compressed archive")
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = magic
    read_in = 0
    written = 0
    while True:
        chunk = pending or src.read(_CHUNK)
        pending = b""
        if not chunk:
            break
        read_in += len(chunk)
        data = chunk
        while data:
            try:
                piece = inflate.decompress(data, _CHUNK)
            except zlib.error as exc:
                raise ArchiveError(f"{name}: corrupt gzip data ({exc})") from None
            written += len(piece)
            if written > limit:
                raise ArchiveError(
                    f"{name}: expands to more than {limit} bytes; refusing a possible decompression bomb"
                )
            if written > RATIO_GRACE_BYTES and written > max_ratio * read_in:
                raise ArchiveError(
                    f"{name}: expands more than {max_ratio:g}x ({written} bytes from {read_in}); "
                    "refusing a possible decompression bomb"
                )
            out.write(piece)
            if inflate.eof:
                if inflate.unused_data or src.read(1):
                    raise ArchiveError(f"{name}: unexpected data after the end of the gzip stream")
                return written
            data = inflate.unconsumed_tail
    raise ArchiveError(f"{name}: truncated gzip stream")


_KIND_NAMES = {
    tarfile.SYMTYPE: "a symlink",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}


def _check_members(members: list[tarfile.TarInfo], name: str, *, max_bytes: int, max_files: int) -> list:
    """Validate every member before anything is written; return ``(path, member)`` pairs."""
    seen: dict[str, bool] = {}  # every path, named or implied by a member -> is a directory
    named: set[str] = set()
    total = 0
    files = 0
    out = []
    for m in members:
        raw = m.name
        is_dir = m.type == tarfile.DIRTYPE
        path = raw[:-1] if is_dir and raw.endswith("/") else raw
        if path.count("/") >= MAX_PATH_DEPTH or len(path.encode("utf-8", "replace")) > MAX_PATH_BYTES:
            raise ArchiveError(
                f"{name}: member {raw[:80]!r}...: path is {path.count('/') + 1} levels and {len(path)} characters deep; "
                f"plugin paths are at most {MAX_PATH_DEPTH} levels and {MAX_PATH_BYTES} bytes"
            )
        problem = path_problem(path)
        if problem:
            escapes = path.startswith("/") or ".." in path.split("/")
            suffix = "; it would write outside the target" if escapes else ""
            raise ArchiveError(f"{name}: member {raw!r}: {problem}{suffix}")
        if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
            kind = _KIND_NAMES.get(m.type, f"an entry of type {m.type!r}")
            raise ArchiveError(f"{name}: member {path!r} is {kind}; plugin archives hold regular files only")
        if m.issparse():
            raise ArchiveError(f"{name}: member {path!r} is a sparse file; plugin archives hold regular files only")
        if path in named:
            raise ArchiveError(f"{name}: member {path!r} appears more than once")
        named.add(path)
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if seen.setdefault(parent, True) is False:
                raise ArchiveError(f"{name}: member {path!r} needs {parent!r} as a directory, but it is a file")
        if not is_dir and seen.get(path) is True:
            raise ArchiveError(f"{name}: member {path!r} is a file but other members are inside it")
        seen[path] = is_dir
        if not is_dir:
            files += 1
            total += m.size
            if files > max_files:
                raise ArchiveError(f"{name}: more than {max_files} files")
            if total > max_bytes:
                raise ArchiveError(f"{name}: files exceed {max_bytes} bytes in total")
        out.append((path, m))
    clash = case_collision(seen)
    if clash:
        raise ArchiveError(f"{name}: members {clash[0]!r} and {clash[1]!r} collide when case is ignored")
    if files == 0:
        raise ArchiveError(f"{name}: the archive holds no files")
    return out


def unpack(
    archive: str | os.PathLike,
    target: str | os.PathLike,
    tree_digest: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    max_ratio: float = DEFAULT_MAX_RATIO,
) -> dict[str, str]:
    """Extract *archive* to the new directory *target*; return ``{relpath: sha256 hex}``.

    *target* must not exist, or be an empty directory. With *tree_digest*, the tree
    digest of the extracted files must equal it. Raises :class:`ArchiveError`; on any
    error nothing is left at *target* (or beside it).
    """
    archive = os.fspath(archive)
    target = os.path.abspath(os.fspath(target))
    label = os.path.basename(archive)
    if os.path.lexists(target):
        if os.path.islink(target) or not os.path.isdir(target) or os.listdir(target):
            raise ArchiveError(f"{target}: already exists and is not an empty directory")
    parent = os.path.dirname(target)
    try:
        src = open(archive, "rb")
    except OSError as exc:
        raise ArchiveError(f"{archive}: cannot open ({exc.strerror})") from None
    # Room for headers: a 512-byte header, a pax record and padding per member.
    stream_limit = max_bytes + (max_files + 16) * 2048 + 10240
    staging = None
    try:
        with src, tempfile.TemporaryFile(dir=parent) as tar_bytes:
            size = _inflate_to(src, tar_bytes, limit=stream_limit, max_ratio=max_ratio, name=label)
            tar_bytes.seek(0)
            try:
                tar = tarfile.open(fileobj=tar_bytes, mode="r:", encoding="utf-8", errors="strict")
            except (tarfile.TarError, UnicodeError) as exc:
                raise ArchiveError(f"{label}: not a valid tar archive ({exc})") from None
            with tar:
                try:
                    members = tar.getmembers()
                except (tarfile.TarError, UnicodeError) as exc:
                    raise ArchiveError(
                        f"{label}: corrupt or truncated tar data ({exc}); a size header may claim more than the archive holds"
                    ) from None
                _check_tail(tar_bytes, tar.offset, size, label)
                checked = _check_members(members, label, max_bytes=max_bytes, max_files=max_files)
                staging = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(target)}.", suffix=".unpack")
                file_map = _extract(tar, checked, staging, label)
        if tree_digest is not None:
            got = digest_of_map(file_map)
            if got != tree_digest:
                raise ArchiveError(
                    f"{label}: tree digest mismatch (expected {tree_digest}, got {got})",
                    hint="the archive does not hold the files it was published with",
                )
        os.chmod(staging, dir_mode(0o755))
        os.replace(staging, target)  # also replaces an empty directory
        staging = None
        return file_map
    except OSError as exc:
        raise ArchiveError(f"{label}: cannot extract to {target} ({exc.strerror or exc})", hint=disk_hint(exc, target)) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _check_tail(f: BinaryIO, offset: int, size: int, label: str) -> None:
    """After the last member only zero blocks may follow (else a header lied about a size)."""
    if offset > size:
        raise ArchiveError(f"{label}: a member's size header runs past the end of the archive (truncated data)")
    f.seek(offset)
    while chunk := f.read(_CHUNK):
        if chunk.count(0) != len(chunk):
            raise ArchiveError(
                f"{label}: unreadable data after the last valid member at byte {offset} "
                "(a size header that does not match its data?)"
            )


def _extract(tar: tarfile.TarFile, checked: list, staging: str, label: str) -> dict[str, str]:
    file_map: dict[str, str] = {}
    for path, m in checked:
        full = os.path.join(staging, *path.split("/"))
        if m.type == tarfile.DIRTYPE:
            make_dirs(full, 0o755)
            continue
        make_dirs(os.path.dirname(full), 0o755)
        mode = 0o644  # as packed; a mode from another tool is not part of the tree
        src = tar.extractfile(m)
        if src is None:  # not a regular file; _check_members refused those already
            raise ArchiveError(f"{label}: member {path!r} has no data")
        h = hashlib.sha256()
        got = 0
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as out:
            while True:
                try:
                    chunk = src.read(min(_CHUNK, m.size - got)) if got < m.size else b""
                except tarfile.TarError as exc:
                    raise ArchiveError(
                        f"{label}: member {path!r}: size header says {m.size} bytes but the data ends early ({exc})"
                    ) from None
                if not chunk:
                    break
                got += len(chunk)
                h.update(chunk)
                out.write(chunk)
        if got != m.size:
            raise ArchiveError(f"{label}: member {path!r}: size header says {m.size} bytes but only {got} follow")
        file_map[path] = h.hexdigest()
    return file_map
