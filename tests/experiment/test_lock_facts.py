"""The lock records registry facts, never a trust verdict; `forge lock` says what it
changes and `--check` fails exactly when `forge lock` would change the file."""

from __future__ import annotations

import json

SCALE = {"opsd.scale": ("float", 1.0)}


def test_a_signature_attached_later_fails_check_and_lock_says_it_recorded_it(opsd):
    opsd.forge("lock")
    before = opsd.lock.read_bytes()
    opsd.forge("key", "generate", cwd=opsd.tmp)
    opsd.forge("plugin", "publish", str(opsd.src / "opsd-patch-1.2.0"), "--sign", cwd=opsd.tmp)  # attaches a signature
    check = opsd.forge("lock", "--check", ok=False)
    assert check.returncode == 15
    assert "forge lock would change it: alice/opsd-patch@1.2.0: signature recorded (sha256:" in check.stderr
    assert check.stderr.rstrip().endswith("hint: run: forge lock")
    assert opsd.lock.read_bytes() == before  # --check writes nothing
    relock = json.loads(opsd.forge("lock", "--json").stdout)
    assert relock["written"] and relock["changes"] and "signature recorded" in relock["changes"][0]
    assert relock["signatures"] == {"opsd-patch": "unverified"}  # signed, but nobody trusted here
    opsd.forge("lock", "--check")
    again = json.loads(opsd.forge("lock", "--json").stdout)
    assert not again["written"] and again["changes"] == []


def test_one_lock_reads_the_same_with_and_without_trusting_the_owner(opsd):
    opsd.forge("key", "generate", cwd=opsd.tmp)
    signed = opsd.plugin("opsd-patch", "1.2.1", params=SCALE, where=opsd.tmp / "signed")
    opsd.forge("plugin", "publish", str(signed), "--sign", cwd=opsd.tmp)
    opsd.forge("trust", "add", "alice", str(opsd.home / "keys" / "default.pub"), cwd=opsd.tmp)
    assert "signature verified" in opsd.forge("lock").stdout
    trusted_bytes = opsd.lock.read_bytes()
    (opsd.home / "trust.json").unlink()  # another machine: nobody trusted
    untrusted = opsd.forge("lock")
    assert "signature unverified" in untrusted.stdout and "unchanged:" in untrusted.stdout
    assert opsd.lock.read_bytes() == trusted_bytes
    opsd.forge("lock", "--check")
    assert "verified" not in opsd.lock.read_text()


def test_a_v1_lock_is_read_and_rewritten_saying_so(opsd):
    opsd.forge("lock")
    data = json.loads(opsd.lock.read_text())
    data["schema"] = "forge/lock/v1"
    for entry in data["plugins"]:
        entry["signature"] = {"status": "unsigned"}
    opsd.lock.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    assert "loaded" in opsd.forge("submit").stdout  # still usable as it is
    for args in (("lock", "--check"), ("lock", "--check", "--offline")):
        failed = opsd.forge(*args, ok=False)
        assert failed.returncode == 15 and "forge/lock/v1" in failed.stderr and "hint: run: forge lock" in failed.stderr
    relock = json.loads(opsd.forge("lock", "--json").stdout)
    assert relock["written"]
    assert relock["changes"][0].startswith("rewrote plugins.lock.json from forge/lock/v1 to forge/lock/v2")
    assert json.loads(opsd.lock.read_text())["schema"] == "forge/lock/v2"
    opsd.forge("lock", "--check")
