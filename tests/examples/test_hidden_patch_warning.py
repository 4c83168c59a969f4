"""The quickstart with dr-grpo loaded after opsd-patch: the launcher says opsd.scale has no effect."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.cli import forge
from support.examples import copy_example

REPO = Path(__file__).resolve().parents[2]
HIDES = (
    "warning : starforge/dr-grpo@2.0.0 replaces toy_grpo.algorithms:{target}, hiding starforge/opsd-patch@1.2.0's "
    "wrap of it (it never runs, so its settings have no effect there)"
)


def _forge(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return forge(*args, cwd=cwd, env=env, timeout=300)


def _experiment(tmp_path: Path, plugins: str) -> tuple[Path, dict]:
    exp = tmp_path / "exp"
    copy_example("quickstart", exp)
    text = (exp / "forge.yaml").read_text()
    (exp / "forge.yaml").write_text(text.replace("plugins: [starforge/opsd-patch@~=1.2]", f"plugins: [{plugins}]"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="starforge")
    for name in ("opsd-patch", "dr-grpo"):
        published = _forge("plugin", "publish", str(REPO / "forge_plugins" / name), cwd=tmp_path, env=env)
        assert published.returncode == 0, published.stdout + published.stderr
    locked = _forge("lock", str(exp), cwd=tmp_path, env=env)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    return exp, env


def _warnings(result: subprocess.CompletedProcess) -> list:
    return [ln for ln in (result.stdout + result.stderr).splitlines() if ln.startswith("warning : ")]


def test_dr_grpo_after_opsd_patch_warns_that_opsd_scale_has_no_effect(tmp_path):
    exp, env = _experiment(tmp_path, "starforge/opsd-patch@~=1.2, starforge/dr-grpo@~=2.0")
    run = _forge("submit", str(exp), "--set", "opsd.scale=0.5", "--set", "grpo.steps=1", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _warnings(run) == [HIDES.format(target="compute_advantages"), HIDES.format(target="ADVANTAGE_ESTIMATORS[grpo]")]
    lines = (run.stdout + run.stderr).splitlines()
    # each warning follows the plugin line of the plugin that replaces
    at = lines.index("plugin  : starforge/dr-grpo@2.0.0 loaded")
    assert lines[at + 1 : at + 3] == _warnings(run)
    # recorded in the job's provenance: forge jobs show says it again
    job_id = next(ln.split(":", 1)[1].strip() for ln in run.stdout.splitlines() if ln.startswith("job     :"))
    shown = _forge("jobs", "show", job_id, cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert [ln.strip() for ln in shown.stdout.splitlines() if ln.strip().startswith("warning : ")] == _warnings(run)


def test_opsd_patch_after_dr_grpo_stacks_and_warns_nothing(tmp_path):
    exp, env = _experiment(tmp_path, "starforge/dr-grpo@~=2.0, starforge/opsd-patch@~=1.2")
    run = _forge("submit", str(exp), "--set", "opsd.scale=0.5", "--set", "grpo.steps=1", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "plugin  : starforge/opsd-patch@1.2.0 loaded" in (run.stdout + run.stderr).splitlines()
    assert _warnings(run) == []
