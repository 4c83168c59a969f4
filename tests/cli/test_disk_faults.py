"""A full disk (a small tmpfs) and a read-only FORGE_HOME or experiment (a read-only bind
mount — chmod does not stop root): every command that writes says so in one line, exits
non-zero, and leaves nothing half-written behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from disk_faults import every_file, full_disk, read_only
from support.cli import forge as run_forge

PLUGIN_YAML = "schema: forge/plugin/v1\nname: sp\nversion: '1.0.0'\nkind: algorithm\nentrypoint: sp:install\n"
FORGE_YAML = "schema: forge/job/v1\nname: demo\nentrypoint: python -c pass\nplugins: [alice/sp]\n"


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.exp = tmp / "exp"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(self.home), FORGE_OWNER="alice", FORGE_REGISTRY=str(tmp / "registry"))

    def forge(self, *args, cwd=None, home=None, ok=True):
        env = dict(self.env, FORGE_HOME=str(home)) if home else self.env
        proc = run_forge(*args, env=env, cwd=cwd or self.tmp, timeout=120)
        if ok:
            assert proc.returncode == 0, proc.stderr
        return proc

    def publish(self) -> None:
        src = self.tmp / "src" / "sp"
        src.mkdir(parents=True)
        (src / "plugin.yaml").write_text(PLUGIN_YAML)
        (src / "sp.py").write_text("def install(params):\n    pass\n")
        self.forge("plugin", "publish", str(src), home=self.tmp / "publisher")

    def experiment(self, lock: bool) -> None:
        (self.exp / "forge.yaml").write_text(FORGE_YAML)
        if lock:
            self.forge("lock", cwd=self.exp)


# command -> (what sits on the faulty mount, prepare(world), argv)
COMMANDS = {
    "key generate": ("home", lambda w: None, ("key", "generate")),
    "trust add": ("home", lambda w: w.forge("key", "generate", home=w.tmp / "other"),
                  ("trust", "add", "alice", "{tmp}/other/keys/default.pub")),
    "plugin pull": ("home", lambda w: None, ("plugin", "pull", "alice/sp", "-o", "{tmp}/pulled")),
    "lock": ("exp", lambda w: w.experiment(lock=False), ("lock",)),
    "submit": ("exp", lambda w: w.experiment(lock=True), ("submit", "--detach")),
}


@pytest.mark.parametrize("fault", ["full", "read-only"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_full_or_read_only_disk_is_one_error_line_and_nothing_half_written(tmp_path, fault, command):
    where, prepare, argv = COMMANDS[command]
    w = World(tmp_path)
    w.publish()
    target = w.home if where == "home" else w.exp
    target.mkdir()
    argv = [a.format(tmp=tmp_path) for a in argv]
    cwd = w.exp if where == "exp" else tmp_path
    if fault == "full":
        with full_disk(target, 512) as fill:
            prepare(w)
            fill()
            before = every_file(target)
            proc = w.forge(*argv, cwd=cwd, ok=False)
            after = every_file(target)
    else:
        prepare(w)
        before = every_file(target)
        with read_only(target):
            proc = w.forge(*argv, cwd=cwd, ok=False)
        after = every_file(target)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: ") and ("No space left" in first or "Read-only" in first), proc.stderr
    # which file and which file system: the mount a full disk's error is about
    assert f" {target}/" in first or f"error: {target}/" in first, proc.stderr
    if fault == "full":
        assert f"file system mounted at {target} (" in proc.stderr and " is full;" in proc.stderr, proc.stderr
    # No temp file, no half-written lock, key, trust file or job. (An empty lock file, the
    # one ``trust add`` serializes on, stays as it does after any ``trust add``.)
    assert {f for f in after if not f.endswith(".json.lock")} == before
    assert not (tmp_path / "pulled").exists()


def test_a_publish_to_a_full_registry_disk_names_the_file_system_and_leaves_no_plugin_folder(tmp_path):
    w = World(tmp_path)
    registry = tmp_path / "registry"
    with full_disk(registry, 256) as fill:
        w.publish()  # the registry exists and holds alice/sp; a new plugin goes to a full disk
        other = tmp_path / "src" / "big"
        other.mkdir(parents=True)
        (other / "plugin.yaml").write_text(PLUGIN_YAML.replace("name: sp", "name: big").replace("sp:install", "big:install"))
        (other / "big.py").write_text("def install(params):\n    pass\n" + "# padding\n" * 4000)
        fill()
        before = every_file(registry)
        proc = w.forge("plugin", "publish", str(other), ok=False)
        after = every_file(registry)
        left = sorted(p.name for p in (registry / "plugins" / "alice").iterdir())
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    first, hint = proc.stderr.splitlines()[:2]
    assert first.startswith(f"error: cannot publish to registry {registry}: {registry}/blobs/sha256/"), proc.stderr
    assert first.endswith(": No space left on device"), proc.stderr
    assert hint.startswith(f"hint: the tmpfs file system mounted at {registry} (") and " is full;" in hint, proc.stderr
    assert "writable by you" not in proc.stderr
    assert after == before and left == ["sp"], (after - before, left)  # not even a folder holding .lock
