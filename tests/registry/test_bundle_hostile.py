"""Hostile bundles that are not a digest mismatch: deeply nested JSON (a traceback before),
and a FIFO or other non-regular file given to `forge bundle verify` (it hung before)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import test_bundle
from test_bundle import index_of, read_member, rewrite

# The fixtures of the bundle tests (a near and a far side, a locked experiment, its bundle).
near, far, locked, bundle = test_bundle.near, test_bundle.far, test_bundle.locked, test_bundle.bundle

DEEP = b"[" * 100_000 + b"]" * 100_000


def _no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: ") and all(line.startswith(("error: ", "hint: ")) for line in lines), proc.stderr


def test_deeply_nested_index_json_is_one_error_line(far, bundle, tmp_path):
    bad = rewrite(bundle, tmp_path / "deep-index.tar", lambda name, data: DEEP if name == "index.json" else data)
    proc = far.forge("bundle", "verify", bad, ok=False)
    assert proc.returncode == 5, proc.stderr
    _no_traceback(proc)
    assert "index.json" in proc.stderr and "nested" in proc.stderr


@pytest.mark.parametrize("what", ["manifest", "config", "lock"])
def test_deeply_nested_blob_with_a_matching_digest_is_one_error_line(far, bundle, tmp_path, what):
    """The attacker controls the whole bundle: the deep blob hashes to its name and the index points at it."""
    index = index_of(bundle)
    deep_digest = "sha256:" + hashlib.sha256(DEEP).hexdigest()
    lock_desc = next(d for d in index["manifests"] if "lock" in d.get("artifactType", ""))
    plugin_desc = next(d for d in index["manifests"] if "opsd-patch" in json.dumps(d))
    replaced: dict[str, bytes] = {}
    if what == "manifest":
        plugin_desc["digest"], plugin_desc["size"] = deep_digest, len(DEEP)
    else:
        desc = lock_desc if what == "lock" else plugin_desc
        manifest = json.loads(read_member(bundle, "blobs/sha256/" + desc["digest"][7:]))
        if what == "lock":
            manifest["layers"][0]["digest"] = deep_digest
        else:
            manifest["config"]["digest"] = deep_digest
        raw = json.dumps(manifest).encode()
        new_digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        replaced["blobs/sha256/" + new_digest[7:]] = raw
        desc["digest"], desc["size"] = new_digest, len(raw)
    replaced["blobs/sha256/" + deep_digest[7:]] = DEEP
    replaced["index.json"] = json.dumps(index).encode()

    def change(name, data):
        return replaced.pop(name, data)

    out = rewrite(bundle, tmp_path / f"deep-{what}.tar", change)
    if replaced:  # members that did not exist yet: append them (a tar read by name finds them)
        from starforge.bundle.layout import layout_header

        data = out.read_bytes()[:-1024]
        for name, blob in replaced.items():
            data += layout_header(name, len(blob)) + blob + b"\0" * (-len(blob) % 512)
        out.write_bytes(data + b"\0" * 1024)
    proc = far.forge("bundle", "verify", out, ok=False)
    assert proc.returncode == 5, proc.stderr
    _no_traceback(proc)
    assert "nested" in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_verify_refuses_a_file_that_is_not_a_regular_file_without_hanging(far, tmp_path, kind):
    if kind == "fifo":
        target = tmp_path / "bundle.tar"
        os.mkfifo(target)
    else:
        target = "/dev/zero"  # endless: reading it would never finish
    # A hang is the failure this guards against: the subprocess timeout turns it into one.
    proc = subprocess.run([sys.executable, "-m", "starforge", "bundle", "verify", str(target)], env=far.env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 5, proc.stderr
    _no_traceback(proc)
    assert "not a regular file" in proc.stderr and str(target) in proc.stderr


def test_push_refuses_a_fifo_too(far, tmp_path):
    target = tmp_path / "bundle.tar"
    os.mkfifo(target)
    proc = subprocess.run([sys.executable, "-m", "starforge", "bundle", "push", str(target), "--registry", str(tmp_path / "reg")],
                          env=far.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 5 and "not a regular file" in proc.stderr, proc.stderr
