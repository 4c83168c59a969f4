"""Digests of a job's output files, made on the machine that asks (SPEC §18), and cached.

A file up to the job's ``sample_above`` size (default 4 GiB) gets its sha256
(``sha256:<hex>``). A larger one gets a **sampled digest** (``sampled:<hex>``): sha256
over the line ``forge-sampled-v1 <size>\\n`` followed by :data:`WINDOWS` windows of 1 MiB
read at offsets ``i * (size - 1 MiB) // (WINDOWS - 1)`` for ``i`` in ``0 … WINDOWS-1``
(the start, the end, and evenly between). Two files with equal sampled digests are
*probably* the same file; forge never calls such a match certain.

The cache (``<cache dir>/output-digests.json``) keeps each digest with the path, size and
modification time (ns) it was made for; a file whose size or time changed is read again.

Laptop side, standard library only.

>>> sample_offsets(10 * MIB, 3)
[0, 4718592, 9437184]
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
WINDOWS = 16
SAMPLED = "sampled:"
FULL = "sha256:"
CACHE_NAME = "output-digests.json"
CACHE_ENTRIES = 200_000  # the newest entries kept; older ones are made again when asked


def sample_offsets(size: int, windows: int = WINDOWS) -> list:
    """Where the sampled digest's 1 MiB windows start in a file of *size* bytes."""
    last = max(size - MIB, 0)
    return [i * last // (windows - 1) for i in range(windows)]


def sampled_digest(path: str | os.PathLike, size: int) -> str:
    """The sampled digest of *path*, a file of *size* bytes (see the module doc)."""
    h = hashlib.sha256(f"forge-sampled-v1 {size}\n".encode())
    with open(path, "rb") as f:
        for offset in sample_offsets(size):
            f.seek(offset)
            h.update(f.read(MIB))
    return SAMPLED + h.hexdigest()


def full_digest(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of the whole file."""
    h = hashlib.sha256()
    buf = bytearray(MIB)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return FULL + h.hexdigest()


@dataclass
class DigestCache:
    """Digests by path, each valid for the size and modification time it was made for."""

    path: Path
    entries: dict
    changed: bool = False

    @classmethod
    def open(cls, path: Path | None = None) -> "DigestCache":
        if path is None:
            from ..state.home import home

            path = home().cache_dir / CACHE_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            entries = {}
        return cls(path=path, entries=entries)

    def digest(self, path: str, size: int, mtime_ns: int, sample_above: int) -> str:
        """The digest of the file at *path* as it is now, which must be *size* bytes with
        modification time *mtime_ns* (:class:`OSError` otherwise: it changed): sampled
        above *sample_above* bytes, else the sha256 of the whole file."""
        return self._made(path, size, mtime_ns, size > sample_above)

    def sampled(self, path: str, size: int, mtime_ns: int) -> str:
        """The sampled digest of the file, whatever its size (a cheap first comparison)."""
        return self._made(path, size, mtime_ns, True)

    def now(self, path: str, sample_above: int | None = None) -> str:
        """The digest of *path* as it is now; sampled only (*sample_above* None), or as
        :meth:`digest` chooses."""
        st = os.stat(path)
        if sample_above is None:
            return self.sampled(path, st.st_size, st.st_mtime_ns)
        return self.digest(path, st.st_size, st.st_mtime_ns, sample_above)

    def _made(self, path: str, size: int, mtime_ns: int, sampled: bool) -> str:
        key = (SAMPLED if sampled else FULL) + os.path.abspath(path)
        hit = self.entries.get(key)
        if isinstance(hit, list) and len(hit) == 3 and hit[0] == size and hit[1] == mtime_ns and isinstance(hit[2], str):
            return hit[2]
        st = os.stat(path)
        if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
            raise OSError(f"{path} changed since it was listed")
        value = sampled_digest(path, size) if sampled else full_digest(path)
        self.entries.pop(key, None)
        self.entries[key] = [size, mtime_ns, value]
        self.changed = True
        return value

    def save(self) -> None:
        """Write the cache back (atomically, under a lock), when something was added."""
        if not self.changed:
            return
        from ..cluster.atomic import write_file
        from ..state.directories import make_dirs
        from ..state.filelock import exclusive_lock

        try:
            make_dirs(self.path.parent)
            with exclusive_lock(self.path.with_suffix(".lock")):
                try:
                    on_disk = json.loads(self.path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    on_disk = {}
                merged = {**(on_disk if isinstance(on_disk, dict) else {}), **self.entries}
                kept = dict(list(merged.items())[-CACHE_ENTRIES:])
                write_file(self.path, json.dumps(kept, separators=(",", ":")) + "\n")
        except OSError:
            pass  # a cache: the digests are made again next time
        self.changed = False
