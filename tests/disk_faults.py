"""A full disk and a read-only directory, for real: a small tmpfs and a read-only bind mount.

Both need mount(2) (root, or a user namespace); a test that cannot have them is skipped.
Each mount is undone by the fixture that made it.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here ({proc.stderr.strip()})")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def full_disk(path: Path, size_kb: int = 256):
    """*path* becomes a tmpfs of *size_kb*; ``fill()`` then takes every free byte."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_kb}k,mode=0755", "tmpfs", str(path))

    def fill() -> None:
        with open(path / ".filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC

    try:
        yield fill
    finally:
        _umount(path)


@contextlib.contextmanager
def read_only(path: Path):
    """*path* (an existing directory) becomes read-only, even for root."""
    _mount("--bind", str(path), str(path))
    try:
        proc = subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot remount read-only here ({proc.stderr.strip()})")
        yield
    finally:
        _umount(path)


def every_file(root: Path) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}
