"""An OCI image layout in an uncompressed tar: written byte for byte the same, read by content.

Writing (:func:`write_layout`): ``oci-layout``, ``index.json``, the directories ``blobs/``
and ``blobs/sha256/``, the small blobs (manifests, configs, envelopes, the lock) sorted by
digest, then the archives sorted by digest, each under fixed ustar headers
(mode 0644/0755, uid/gid 0, no owner names, mtime 0) — the same blobs and index give the
same bytes on any machine. Blobs are copied as they are, hashed on the way, never repacked.

Reading (:class:`LayoutReader`): the members are indexed by name, whatever their order;
anything but regular files and directories, absolute or ``..`` names and duplicate names are
refused; every read is bounded by the member's declared size and checked against the end
of the file, so a truncated tar is reported with the member it cuts.

>>> layout_header("oci-layout", 30)[:10]
b'oci-layout'

Laptop side.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator

from ..errors import BundleError

OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
REF_NAME = "org.opencontainers.image.ref.name"
BLOB_DIR = "blobs/sha256/"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 4 << 20
_RECORD = 10240  # tar record size, as GNU tar pads

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Blob:
    """One blob to write: its digest, size, and where its bytes are (bytes in memory or a file)."""

    digest: str
    size: int
    source: bytes | Path

    @property
    def member(self) -> str:
        return blob_member(self.digest)


class DamagedBlob(BundleError):
    """A blob file whose bytes do not match its digest while it was being written."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def blob_member(digest: str) -> str:
    """``sha256:ab…`` → ``blobs/sha256/ab…``."""
    return BLOB_DIR + digest.partition(":")[2]


def layout_header(name: str, size: int, directory: bool = False) -> bytes:
    """A fixed ustar header: nothing in it depends on the machine, the user or the clock."""
    info = tarfile.TarInfo(name)
    info.size = 0 if directory else size
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="strict")


def write_layout(dest: Path, index: bytes, blobs: list[Blob], progress: Progress | None = None) -> int:
    """Write the layout tar to *dest* atomically; return its size.

    A file blob is hashed while it is copied and must match its digest and size (a cache
    entry damaged since it was checked is refused, not bundled).
    """
    unique = {b.digest: b for b in blobs}
    # Manifests, configs, envelopes and the lock first, then the archives: each group sorted
    # by digest, so a reader (or a truncated copy) has every small piece before the big ones.
    ordered = sorted(unique.values(), key=lambda b: (not isinstance(b.source, bytes), b.digest))
    total = sum(b.size for b in ordered)
    dest = Path(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent or ".")
    done = 0
    try:
        with os.fdopen(fd, "wb", buffering=0) as out:
            written = 0

            def put(data: bytes) -> None:
                nonlocal written
                out.write(data)
                written += len(data)

            for name, data in (("oci-layout", OCI_LAYOUT), ("index.json", index)):
                put(layout_header(name, len(data)))
                put(data + _padding(len(data)))
            put(layout_header("blobs/", 0, directory=True))
            put(layout_header(BLOB_DIR, 0, directory=True))
            for blob in ordered:
                put(layout_header(blob.member, blob.size))
                if isinstance(blob.source, bytes):
                    put(blob.source)
                    got = blob.size
                else:
                    got = _copy_checked(blob, out, lambda n: progress and progress(done + n, total))
                    written += got
                done += blob.size
                if progress:
                    progress(done, total)
                put(_padding(got))
            put(b"\0" * 1024)
            put(b"\0" * (-written % _RECORD))
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return written


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _copy_checked(blob: Blob, out: IO[bytes], progress: Callable[[int], object]) -> int:
    h = hashlib.sha256()
    n = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    source = blob.source
    assert not isinstance(source, bytes), "blobs held in memory are written directly"
    with open(source, "rb", buffering=0) as src:
        while got := src.readinto(buf):
            h.update(view[:got])
            out.write(view[:got])
            n += got
            progress(n)
    if "sha256:" + h.hexdigest() != blob.digest or n != blob.size:
        raise DamagedBlob(f"{source} does not hold {blob.digest} ({blob.size} bytes): it is damaged or changed "
                          "while it was being bundled", path=Path(source))
    return n


def open_regular(path: Path) -> IO[bytes]:
    """*path* opened for reading, refused unless it is a regular file (a link to one is fine).

    A FIFO would block the open (or the read) until some writer came, ``/dev/zero`` would
    never end, a directory is no bundle: opened non-blocking, checked with ``fstat`` on the
    open file (so nothing can be swapped in between), then read normally.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BundleError(f"cannot read bundle {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a special file")
            raise BundleError(f"bundle {path} is not a regular file (it is {what})",
                              hint="give the path of the bundle file itself; to read from a pipe, save it to a file first")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class LayoutReader:
    """The members of a layout tar, by name, readable with their size and end checked.

    Holds the tar open until :meth:`close` (in a ``with`` block: ``contextlib.closing``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = open_regular(self.path)
        self.file_size = os.fstat(self._file.fileno()).st_size
        self.members: dict[str, tarfile.TarInfo] = {}
        self.cut_after: str | None = None  # the last member read before the tar ended too early
        last = None
        try:
            tar = tarfile.open(fileobj=self._file, mode="r:")
            for member in tar:
                self._add(member)
                last = member.name
        except tarfile.TarError as exc:
            if last is None:
                self.close()
                raise BundleError(f"bundle {self.path} is not a readable tar ({exc})",
                                  hint="the file is truncated or is not a bundle; copy it again") from None
            # Truncated: keep what was read, so the error can name the member that is cut.
            self.cut_after = last
        except BundleError:
            self.close()
            raise

    def _add(self, member: tarfile.TarInfo) -> None:
        name = member.name.removeprefix("./").rstrip("/")
        if name.startswith("/") or ".." in name.split("/") or "\\" in name:
            raise BundleError(f"bundle {self.path}: member {member.name!r} has an unsafe path")
        if member.isdir():
            return
        if not member.isreg():
            raise BundleError(f"bundle {self.path}: member {name} is not a regular file",
                              hint="a bundle holds only files and directories; this one was altered")
        if name in self.members:
            raise BundleError(f"bundle {self.path}: member {name} appears twice",
                              hint="a duplicate member could hide different content; this bundle was altered")
        self.members[name] = member

    def close(self) -> None:
        self._file.close()

    def blob_digests(self) -> list[str]:
        """``sha256:<hex>`` of every member under ``blobs/sha256/`` (other names are refused)."""
        out = []
        for name in sorted(self.members):
            if name.startswith("blobs/"):
                hex_ = name[len(BLOB_DIR):] if name.startswith(BLOB_DIR) else ""
                if not _HEX64.match(hex_):
                    raise BundleError(f"bundle {self.path}: {name} is not a blob name (blobs/sha256/<64 hex>)")
                out.append("sha256:" + hex_)
        return out

    def has(self, name: str) -> bool:
        return name in self.members

    def size(self, name: str) -> int:
        return self.members[name].size

    def chunks(self, name: str) -> Iterator[bytes]:
        """The bytes of member *name*; :class:`BundleError` when the file ends inside it."""
        member = self.members[name]
        end = member.offset_data + member.size
        if end > self.file_size:
            raise BundleError(f"bundle {self.path} is truncated: it ends inside {name} "
                              f"({self.file_size - member.offset_data} of {member.size} bytes)",
                              hint="copy the bundle again; compare its size with the original")
        self._file.seek(member.offset_data)
        left = member.size
        while left:
            chunk = self._file.read(min(_CHUNK, left))
            if not chunk:
                raise BundleError(f"bundle {self.path} is truncated inside {name}")
            left -= len(chunk)
            yield chunk

    def read(self, name: str, limit: int) -> bytes:
        if self.members[name].size > limit:
            raise BundleError(f"bundle {self.path}: {name} is {self.members[name].size} bytes, more than {limit}")
        return b"".join(self.chunks(name))
