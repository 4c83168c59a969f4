"""``binding``: the sha256 values that bind what was staged to what a job runs."""

from __future__ import annotations

import hashlib

import pytest

from starforge.cluster.binding import is_sha256, mismatch_message, sha256_bytes, sha256_file


@pytest.mark.parametrize("text, ok", [
    ("0123456789abcdef" * 4, True),
    ("0" * 64, True),
    ("0" * 63, False),
    ("0" * 65, False),
    ("0123456789ABCDEF" * 4, False),  # uppercase is not how it is written
    ("g" * 64, False),
    (" " + "0" * 63, False),
    ("", False),
    (None, False),
    (b"0" * 64, False),
])
def test_is_sha256_accepts_64_lowercase_hex_digits_only(text, ok):
    assert is_sha256(text) is ok


def test_file_and_bytes_hash_as_sha256_hex(tmp_path):
    data = b'{"schema": "forge/jobspec/v1"}\n' * 1000
    path = tmp_path / "jobspec.json"
    path.write_bytes(data)
    assert sha256_file(str(path)) == sha256_bytes(data) == hashlib.sha256(data).hexdigest()
    assert is_sha256(sha256_file(str(path)))
    with pytest.raises(FileNotFoundError):
        sha256_file(str(tmp_path / "absent.json"))


def test_the_mismatch_message_names_the_file_and_both_hashes():
    assert mismatch_message("the JobSpec", "/jobs/j/jobspec.json", "a" * 64, "b" * 64) == (
        f"the JobSpec /jobs/j/jobspec.json changed after staging: its sha256 is {'a' * 64}, "
        f"the job was submitted with {'b' * 64}"
    )
