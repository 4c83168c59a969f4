"""Under umask 000 nothing StarForge creates is writable by others: registry, cache, keys,
job directories (a world-writable one would let anyone on the machine plant code)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys


def _forge_umask_000(project, *args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "starforge", *args], env=project.env, cwd=cwd or project.exp,
                          capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _world_writable(root) -> list:
    found = []
    for here, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(here, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & stat.S_IWOTH:
                found.append(f"{oct(stat.S_IMODE(mode))} {os.path.relpath(path, root)}")
    return found


def test_registry_cache_keys_and_jobs_are_not_world_writable_under_umask_000(project):
    project.home.mkdir(mode=0o755)
    _forge_umask_000(project, "key", "generate", cwd=project.tmp)
    _forge_umask_000(project, "plugin", "publish", str(project.plugin("opsd-patch")), "--sign", cwd=project.tmp)
    _forge_umask_000(project, "plugin", "pull", "alice/opsd-patch", "-o", str(project.tmp / "pulled"), cwd=project.tmp)
    project.experiment(plugins=["alice/opsd-patch"])
    _forge_umask_000(project, "lock")
    _forge_umask_000(project, "submit")
    assert (project.home / "registry" / "plugins").is_dir() and (project.home / "cache").is_dir()
    assert list(project.jobs_dir().iterdir())
    assert _world_writable(project.home) == []
    assert _world_writable(project.exp / ".forge") == []
    assert _world_writable(project.tmp / "pulled") == []
    assert stat.S_IMODE(os.stat(project.home / "keys").st_mode) == 0o700
