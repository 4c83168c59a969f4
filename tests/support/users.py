"""Ordinary Unix users, for what root would hide (file modes, another user's folders)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from support.need import need


def ordinary_user(name: str):
    """An ordinary Unix user *name* (made with ``useradd`` when missing) and a runner:
    ``user.run("mkdir", path)`` runs a command as that user (``runuser``)."""
    import pwd
    from types import SimpleNamespace

    need(os.geteuid() == 0 and shutil.which("runuser") is not None, "acting as another user needs root and runuser")
    try:
        pwd.getpwnam(name)
    except KeyError:  # another test process may be adding it at the same moment: then it exists after
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], capture_output=True, text=True)
        try:
            pwd.getpwnam(name)
        except KeyError:
            pytest.fail(f"useradd {name} failed: {made.stderr.strip()}")
    entry = pwd.getpwnam(name)

    def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", name, "--", *argv], capture_output=True, text=True, check=check, timeout=60)

    return SimpleNamespace(name=name, uid=entry.pw_uid, run=run)


def system_user(name: str, why: str) -> str:
    """A system user *name* with no home and no login shell (made with ``useradd`` when
    missing), for a test that needs root and runuser *why* (``"to act as another user"``)."""
    need(os.getuid() == 0 and shutil.which("runuser") is not None, f"needs root and runuser {why}")
    if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True, text=True)
        # (a test running in parallel may have made it first)
        assert made.returncode == 0 or subprocess.run(["id", "-u", name], capture_output=True).returncode == 0, made.stderr
    return name
