"""The layout tar: fixed bytes when written; refused members when read."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from starforge.bundle.layout import Blob, LayoutReader, write_layout
from starforge.errors import BundleError


def blob(data: bytes) -> Blob:
    return Blob("sha256:" + hashlib.sha256(data).hexdigest(), len(data), data)


def test_same_blobs_in_any_order_give_the_same_bytes(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"x" * 5000)
    big = Blob("sha256:" + hashlib.sha256(b"x" * 5000).hexdigest(), 5000, archive)
    small = [blob(b"{}"), blob(b'{"a":1}')]
    write_layout(tmp_path / "one.tar", b"{}", [big, *small])
    write_layout(tmp_path / "two.tar", b"{}", [*reversed(small), big, small[0]])  # duplicates collapse
    one = (tmp_path / "one.tar").read_bytes()
    assert one == (tmp_path / "two.tar").read_bytes() and len(one) % 10240 == 0
    with tarfile.open(tmp_path / "one.tar") as tar:
        names = tar.getnames()
    assert names[-1] == "blobs/sha256/" + big.digest[7:]  # archives after the small blobs


def test_a_file_that_changed_since_it_was_hashed_is_refused_and_nothing_is_left(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"y" * 100)
    stale = Blob("sha256:" + hashlib.sha256(b"x" * 100).hexdigest(), 100, archive)
    with pytest.raises(BundleError, match="does not hold"):
        write_layout(tmp_path / "out.tar", b"{}", [stale])
    assert list(tmp_path.iterdir()) == [archive]


def _tar(tmp_path, members) -> object:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path = tmp_path / "t.tar"
    path.write_bytes(buf.getvalue())
    return path


def _file(name: str, data: bytes = b"ab"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_reader_refuses_duplicates_links_and_escaping_names(tmp_path):
    with pytest.raises(BundleError, match="appears twice"):
        LayoutReader(_tar(tmp_path, [_file("index.json"), _file("./index.json")]))
    link = tarfile.TarInfo("blobs/sha256/" + "0" * 64)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(BundleError, match="not a regular file"):
        LayoutReader(_tar(tmp_path, [(link, None)]))
    with pytest.raises(BundleError, match="unsafe path"):
        LayoutReader(_tar(tmp_path, [_file("../index.json")]))
    with pytest.raises(BundleError, match="not a readable tar"):
        (tmp_path / "junk").write_bytes(b"not a tar at all" * 100)
        LayoutReader(tmp_path / "junk")
