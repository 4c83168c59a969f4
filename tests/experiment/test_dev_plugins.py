"""The plugin author's inner loop: ``forge submit --dev NAME=DIR`` (and ``forge plan --dev``).

An edit to an unpublished plugin directory runs at the next submit, with no bump, publish
or relock; the run says so everywhere it shows (the launcher's line, ``jobs show``,
provenance, ``plan``), under a ref of its own (``owner/name@X+dev.<digest12>``); a gate
that asks for signed plugins refuses it; a replay runs its staged copy. ``forge plugin
diff REF ./DIR`` shows what publishing the directory would change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.cli import forge

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "forge_plugins" / "opsd-patch"


class World:
    """The quickstart, its plugin published and locked, and a working copy of that plugin."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.exp = tmp / "exp"
        shutil.copytree(REPO / "examples" / "quickstart", self.exp,
                        ignore=shutil.ignore_patterns(".forge", "plugins.lock.json", "__pycache__"))
        self.home = tmp / "home"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(self.home), FORGE_OWNER="starforge")
        self.forge("plugin", "publish", str(PLUGIN), ok=0)
        self.forge("lock", str(self.exp), ok=0)
        self.dev = tmp / "opsd-patch"
        shutil.copytree(PLUGIN, self.dev)

    def forge(self, *args, ok=None) -> subprocess.CompletedProcess:
        proc = forge(*args, cwd=self.tmp, env=self.env, timeout=300)
        if ok is not None:
            assert proc.returncode == ok, f"forge {' '.join(map(str, args))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def edit(self, factor: str) -> None:
        """The author's edit: every advantage multiplied by *factor* on top of opsd.scale."""
        source = self.dev / "opsd_patch.py"
        text = source.read_text()
        text = text.replace("return [a * scale for a in original(rewards, group_size, eps)]",
                            f"return [a * scale * {factor} for a in original(rewards, group_size, eps)]")
        source.write_text(text)


def _advantages(out: str) -> list:
    return [ln for ln in out.splitlines() if ln.startswith("advantages[")]


def _job_id(out: str) -> str:
    return next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("job     :"))


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def test_an_edit_to_a_dev_plugin_runs_at_the_next_submit_and_says_so_everywhere(world):
    locked = world.forge("submit", world.exp, "--set", "grpo.steps=1", ok=0)
    world.edit("2.0")
    dev = world.forge("submit", world.exp, "--set", "grpo.steps=1", "--dev", f"opsd-patch={world.dev}", ok=0)
    out = dev.stdout + dev.stderr
    before, after = _advantages(locked.stdout), _advantages(dev.stdout)
    assert before and after and before != after  # the edit ran, with no bump, publish or relock
    first = [float(x) for x in re.findall(r"-?\d+\.\d+", before[0])]
    doubled = [float(x) for x in re.findall(r"-?\d+\.\d+", after[0])]
    assert doubled == [2.0 * x for x in first] and any(x != 0 for x in first), (before, after)

    [line] = [ln for ln in out.splitlines() if ln.startswith("plugin  : starforge/opsd-patch@")]
    digest = json.loads(world.forge("plugin", "digest", world.dev, "--json", ok=0).stdout)["digest"]
    ref = f"starforge/opsd-patch@1.2.0+dev.{digest.partition(':')[2][:12]}"
    assert line == f"plugin  : {ref} loaded (dev: an unpublished directory)", line
    assert f"note: dev plugin {ref} from {world.dev} runs in place of the locked starforge/opsd-patch@1.2.0" in dev.stderr

    shown = json.loads(world.forge("jobs", "show", _job_id(dev.stdout), "--json", ok=0).stdout)
    assert ref in shown["provenance"]["plugins"], shown["provenance"]["plugins"]
    text = world.forge("jobs", "show", _job_id(dev.stdout), ok=0).stdout
    assert f"plugin  : {ref}" in text

    world.edit("2.0")  # (no change: the edit is already there) -> the same digest, the same ref
    planned = world.forge("plan", world.exp, "--dev", f"opsd-patch={world.dev}", "--json", ok=0)
    assert ref in planned.stdout and "dev plugin" in planned.stderr


def test_gates_refuse_a_dev_plugin_and_the_lock_is_untouched(world):
    lock_before = (world.exp / "plugins.lock.json").read_bytes()
    world.edit("3.0")
    refused = world.forge("submit", world.exp, "--dev", f"opsd-patch={world.dev}", "--require-signatures")
    assert refused.returncode == 9, refused.stderr
    assert refused.stderr.startswith("error: dev plugin starforge/opsd-patch@1.2.0+dev.") and "unsigned" in refused.stderr
    assert world.forge("lock", world.exp, "--check").returncode == 0  # the lock still pins the published version
    assert (world.exp / "plugins.lock.json").read_bytes() == lock_before
    unknown = world.forge("submit", world.exp, "--dev", f"nope={world.dev}")
    assert unknown.returncode == 2 and "the lock has no plugin named 'nope'" in unknown.stderr, unknown.stderr
    malformed = world.forge("submit", world.exp, "--dev", str(world.dev))
    assert malformed.returncode == 2 and "expected NAME=DIR" in malformed.stderr, malformed.stderr


def test_a_dev_job_replays_from_its_staged_copy(world):
    world.edit("2.0")
    first = world.forge("submit", world.exp, "--set", "grpo.steps=1", "--dev", f"opsd-patch={world.dev}", ok=0)
    shutil.rmtree(world.dev)  # the working copy moved on (here: gone); the job's staged copy is what replays
    again = world.forge("jobs", "replay", _job_id(first.stdout), ok=0)
    assert _advantages(again.stdout) == _advantages(first.stdout)
    assert "(dev: an unpublished directory)" in again.stdout


def test_plugin_diff_shows_what_publishing_a_directory_would_change(world):
    same = world.forge("plugin", "diff", "starforge/opsd-patch@1.2.0", world.dev)
    assert same.returncode == 0 and "no changes" in same.stdout, same.stdout + same.stderr
    world.edit("2.0")
    changed = world.forge("plugin", "diff", "starforge/opsd-patch@1.2.0", world.dev)
    assert changed.returncode == 20, changed.stdout + changed.stderr
    assert "+        return [a * scale * 2.0 for a in original(rewards, group_size, eps)]" in changed.stdout, changed.stdout
    assert f"({world.dev})" in changed.stdout.splitlines()[1]
