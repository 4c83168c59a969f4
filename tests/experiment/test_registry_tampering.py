"""Whoever can write a shared registry must not make a version answer for another owner.

The attack: alice publishes signed, the consumer trusts alice's key. Someone with write
access to the registry directory rewrites ``"owner"`` in alice's record to ``mallory`` (an
owner without trusted keys) and deletes the signature envelope. Nothing may be pulled,
cached or locked from that record.
"""

from __future__ import annotations

import json


def _tamper(project, field: str, value: str) -> None:
    record = project.home / "registry" / "plugins" / "alice" / "sp" / "0.1.0.json"
    data = json.loads(record.read_text())
    data[field] = value
    record.write_text(json.dumps(data))
    (record.parent / "0.1.0.dsse.json").unlink()


def _signed_sp(project) -> None:
    project.forge("key", "generate", cwd=project.tmp)
    project.forge("trust", "add", "alice", str(project.home / "keys" / "default.pub"), cwd=project.tmp)
    project.forge("plugin", "publish", str(project.plugin("sp", "0.1.0")), "--sign", cwd=project.tmp)
    project.experiment(plugins=["alice/sp@0.1.0"])


def _cached_archives(project) -> list:
    return sorted(p.name for p in (project.home / "cache").rglob("sha256/*"))


def test_owner_rewritten_in_a_directory_registry_is_a_tampered_registry(project):
    _signed_sp(project)
    _tamper(project, "owner", "mallory")
    pull = project.forge("plugin", "pull", "alice/sp@0.1.0", "-o", str(project.tmp / "out"), ok=False, cwd=project.tmp)
    assert pull.returncode == 6, pull.stderr
    assert pull.stderr.startswith("error: registry ")
    assert "is tampered:" in pull.stderr and "answers for mallory/sp@0.1.0, asked for alice/sp@0.1.0" in pull.stderr
    assert "Traceback" not in pull.stderr and "pulled" not in pull.stdout
    assert not (project.tmp / "out").exists()
    assert _cached_archives(project) == []

    lock = project.forge("lock", ok=False)
    assert lock.returncode == 6 and "is tampered:" in lock.stderr
    assert not project.lock.exists()


def test_name_and_version_rewritten_are_refused_too(project):
    _signed_sp(project)
    _tamper(project, "version", "0.2.0")
    pull = project.forge("plugin", "pull", "alice/sp@0.1.0", "-o", str(project.tmp / "out"), ok=False, cwd=project.tmp)
    assert pull.returncode == 6 and "answers for alice/sp@0.2.0, asked for alice/sp@0.1.0" in pull.stderr


def test_lock_check_names_the_owner_that_differs(project):
    project.publish(project.plugin("sp", "0.1.0"))
    project.experiment(plugins=["alice/sp@0.1.0"])
    project.forge("lock")
    data = json.loads(project.lock.read_text())
    data["plugins"][0]["owner"] = "mallory"
    project.lock.write_text(json.dumps(data))
    check = project.forge("lock", "--check", ok=False)
    assert check.returncode == 15
    assert "sp: forge.yaml requests owner alice (alice/sp@==0.1.0), the lock holds mallory/sp@0.1.0 of owner mallory" in check.stderr
