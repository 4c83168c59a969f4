"""The recall story of docs/recall.md, its yank steps (1, 3, 4, 6, 7), as users run them.

A Dr-GRPO patch (forge_plugins/dr-grpo) is published with a divisor bug and locked by the
quickstart experiment; its publisher yanks it, signed; the fixed version is locked and runs
on the local backend; a bundle of the old lock carries the yank across the gap, and the far
side's `lock --check` refuses the yanked version (exit 18) until it takes the fixed one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.registry_world import OWNER, User

REPO = Path(__file__).resolve().parents[1]
REASON = "advantages divided by the group size a second time (sign and scale of every update wrong)"


def _dr_grpo(dest: Path, version: str, *, buggy: bool) -> Path:
    shutil.copytree(REPO / "forge_plugins" / "dr-grpo", dest)
    manifest = dest / "plugin.yaml"
    manifest.write_text(manifest.read_text().replace("version: 2.0.0", f"version: {version}"))
    if buggy:
        code = dest / "dr_grpo.py"
        text = code.read_text()
        assert "out.extend(r - mean for r in group)" in text
        code.write_text(text.replace("out.extend(r - mean for r in group)",
                                     "out.extend((r - mean) / group_size for r in group)"))
    return dest


def _experiment(dest: Path, registry: str) -> Path:
    shutil.copytree(REPO / "examples" / "quickstart", dest, ignore=shutil.ignore_patterns(".forge", "plugins.lock.json"))
    config = dest / "forge.yaml"
    text = config.read_text().replace("plugins: [starforge/opsd-patch@~=1.2]", f"plugins: [{OWNER}/dr-grpo@~=2.0]")
    config.write_text(text + f"registry: {registry}\n")
    return dest


def test_a_yanked_patch_is_refused_here_and_across_the_gap(tmp_path):
    near, far = User(tmp_path / "near"), User(tmp_path / "far")
    near_reg, far_reg = str(tmp_path / "near-registry"), str(tmp_path / "far-registry")
    near.forge("key", "generate")
    public = near.home / "keys" / "default.pub"
    for side in (near, far):
        side.forge("trust", "add", OWNER, public)

    # 1. the buggy patch is published, signed, and locked by the experiment
    near.forge("plugin", "publish", _dr_grpo(tmp_path / "buggy", "2.0.1", buggy=True), "--registry", near_reg, "--sign")
    exp = _experiment(tmp_path / "exp", near_reg)
    near.forge("lock", exp)
    assert json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]["version"] == "2.0.1"
    last_week = tmp_path / "last-week"  # the experiment as a far team received it before the bug was found
    shutil.copytree(exp, last_week)

    # 3. its publisher yanks it, signed
    out = near.forge("plugin", "yank", f"{OWNER}/dr-grpo@2.0.1", "--reason", REASON, "--sign", "--registry", near_reg)
    assert "signed with key" in out.stdout
    assert near.forge("lock", exp, "--check", ok=False).returncode == 18

    # 4. the fixed version is published and locked; the job runs it
    near.forge("plugin", "publish", _dr_grpo(tmp_path / "fixed", "2.0.2", buggy=False), "--registry", near_reg, "--sign")
    out = near.forge("lock", exp)
    assert f"alice/dr-grpo 2.0.1 -> 2.0.2 (2.0.1 is yanked: {REASON})" in out.stdout
    near.forge("lock", exp, "--check")
    job = near.forge("submit", exp, "--set", "grpo.steps=2", "--set", "grpo.report_steps=1", "--json")
    record = json.loads(job.stdout)
    assert record["status"] == "succeeded" and record["ran_yanked"] == []
    assert "alice/dr-grpo@2.0.2" in job.stderr

    # 6. a bundle of last week's lock carries the version and its yank to the far side
    near.forge("bundle", "create", last_week, "-o", tmp_path / "last-week.tar")
    far.forge("bundle", "push", tmp_path / "last-week.tar", "--registry", far_reg)

    # 7. there, lock --check refuses the yanked version, with the reason; submit too
    for command in (("lock", last_week, "--check", "--registry", far_reg),
                    ("submit", last_week, "--registry", far_reg)):
        out = far.forge(*command, ok=False)
        assert out.returncode == 18, out.stderr
        assert "alice/dr-grpo@2.0.1 is yanked (as of " in out.stderr and REASON in out.stderr

    # and once the fixed version crosses the gap too, the far lock moves to it
    near.forge("bundle", "create", exp, "-o", tmp_path / "fixed.tar")
    far.forge("bundle", "push", tmp_path / "fixed.tar", "--registry", far_reg)
    out = far.forge("lock", last_week, "--registry", far_reg)
    assert "alice/dr-grpo 2.0.1 -> 2.0.2" in out.stdout
    far.forge("lock", last_week, "--check", "--registry", far_reg)
