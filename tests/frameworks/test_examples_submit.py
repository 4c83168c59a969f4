"""examples/trl and examples/verl through `forge plugin publish` -> `forge lock` -> `forge submit`
on the local backend, as a user runs them: forge from its own venv, the example's forge.yaml
naming the trainer venv as the job's Python (`python: $TRL_PYTHON` / `$VERL_PYTHON`). The
trainer venvs hold no starforge-core and nothing reaches them on PYTHONPATH: the launcher
starts there from the job's runtime zip. verl's loss is also resolved by name in a Ray actor
on a local Ray head started from the verl venv."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from frameworks_env import REPO, clean_env, trainer_python
from support.cli import forge as run_forge
from support.examples import copy_example

pytestmark = pytest.mark.frameworks


class Forge:
    """``forge`` run by the project's own interpreter, with the job's Python in *variable*.

    The command runs in the test process (``support.cli.forge``: no interpreter start, no
    imports); the job it submits runs as every local job does, in processes of its own under
    the job's Python.
    """

    def __init__(self, venv: str, variable: str, tmp: Path, **env) -> None:
        self.job_python = str(trainer_python(venv))
        self.cwd = tmp
        self.env = clean_env(FORGE_HOME=str(tmp / "home"), FORGE_OWNER="starforge", **{variable: self.job_python}, **env)

    def run(self, *args, timeout: float = 180):
        """``forge ARGS``: the completed process (``returncode``, ``stdout``, ``stderr``)."""
        return run_forge(*args, cwd=self.cwd, env=self.env, timeout=timeout)

    def __call__(self, *args, ok=True):
        proc = self.run(*args)
        out = proc.stdout + proc.stderr
        if ok:
            assert proc.returncode == 0, f"forge {' '.join(args)} -> {proc.returncode}\n{out[-6000:]}"
        return proc.returncode, out

    def assert_ran_in_job_python(self, lines: list) -> None:
        """The launcher's ``python  :`` line names the trainer venv's interpreter, from forge.yaml."""
        line = next((ln for ln in lines if ln.startswith("python  : ")), None)
        assert line is not None, "\n".join(lines[-40:])
        assert line.startswith(f"python  : {self.job_python} (") and line.endswith(", forge.yaml python)"), line
        assert sys.executable not in line


def test_the_trainer_venvs_hold_no_starforge():
    for venv in ("trl", "verl"):
        proc = subprocess.run([str(trainer_python(venv)), "-c", "import starforge"], capture_output=True, text=True,
                              cwd="/", env=clean_env(), timeout=120)
        assert proc.returncode != 0 and "No module named 'starforge'" in proc.stderr, (venv, proc.stderr)


def _values(out: str, prefix: str):
    text = next(ln for ln in out.splitlines() if ln.startswith(prefix)).split(" = ", 1)[1]
    return ast.literal_eval(text if text.startswith("[") else text.split(" ")[0])


def _experiment(tmp: Path, name: str) -> Path:
    exp = tmp / name
    copy_example(name, exp)
    return exp


def test_trl_example_submits_with_the_dr_grpo_plugin(tmp_path):
    forge = Forge("trl", "TRL_PYTHON", tmp_path)
    exp = _experiment(tmp_path, "trl")
    forge("plugin", "publish", str(REPO / "forge_plugins" / "trl-dr-grpo"))
    forge("lock", str(exp))
    # a value outside the declared choices is refused before anything runs
    code, out = forge("submit", str(exp), "--set", "trl_dr_grpo.loss_type=bogus", ok=False)
    assert code != 0 and "error: --set trl_dr_grpo.loss_type=bogus: 'trl_dr_grpo.loss_type' must be one of " \
                          "dr_grpo, grpo, bnpo, dapo, got 'bogus'" in out
    _, out = forge("submit", str(exp))
    lines = out.splitlines()
    forge.assert_ran_in_job_python(lines)
    assert "plugin  : starforge/trl-dr-grpo@1.1.0 loaded" in lines
    assert "trl-dr-grpo: GRPOTrainer scale_rewards 'group' -> 'none', loss_type 'dapo' -> 'dr_grpo'; " \
           "loss divisor batch x max_completion_length=8" in lines
    assert any(ln.startswith("trainer options: scale_rewards=none loss_type=dr_grpo ") for ln in lines)
    rewards, advantages = _values(out, "rewards = "), _values(out, "advantages = ")
    assert len(rewards) == len(advantages) == 12
    for step in range(3):  # one group of 4 completions per step, rewards and advantages in the same order
        group = rewards[4 * step:4 * step + 4]
        mean = sum(group) / 4
        want = [r - mean for r in group]  # Dr-GRPO: no std division
        got = advantages[4 * step:4 * step + 4]
        assert all(abs(a - b) < 1e-6 for a, b in zip(got, want)), (step, got, want)
    assert any(advantages)


def test_verl_example_submits_and_a_ray_actor_resolves_the_plugin_loss(tmp_path, ray_head_in):
    address, ray_env = ray_head_in("verl")
    # the driver joins the head on 127.0.0.1 (Ray would swap a loopback address for the host's)
    forge = Forge("verl", "VERL_PYTHON", tmp_path, RAY_AUTH_MODE="token",
                  RAY_AUTH_TOKEN=ray_env["RAY_AUTH_TOKEN"], RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    exp = _experiment(tmp_path, "verl")
    forge("plugin", "publish", str(REPO / "forge_plugins" / "verl-dr-grpo"))
    forge("lock", str(exp))
    _, out = forge("submit", str(exp), "--set", f"verl.ray_address={address}")
    lines = out.splitlines()
    forge.assert_ran_in_job_python(lines)
    assert "plugin  : starforge/verl-dr-grpo@1.1.0 loaded" in lines
    assert "verl: adv_estimator=dr_grpo loss_mode=dr_grpo loss_agg_mode=token-mean" in lines
    rewards = [1.0, 0.0, 0.5, 0.25, 0.0, 0.75, 1.0, 0.5]
    means = [sum(rewards[:4]) / 4] * 4 + [sum(rewards[4:]) / 4] * 4
    advantages = _values(out, "advantages = ")
    assert all(abs(a - (r - m)) < 1e-6 for a, r, m in zip(advantages, rewards, means))  # no std division
    assert "verl-dr-grpo: actor loss_agg_mode 'token-mean' (verl's default) replaced by 'seq-mean-token-sum-norm'" in lines
    step0 = _values(out, "step 0 loss = ")
    # on-policy step 0: ratio 1, loss = -sum_i A_i L_i / (batch x response length)
    lengths = [6, 3, 5, 2, 4, 6, 1, 5]
    want = -sum(a * n for a, n in zip(advantages, lengths)) / (8 * 6)
    assert abs(step0 - want) < 1e-6, (step0, want)
    actor = next(ln for ln in lines if ln.startswith("ray actor loss = "))
    assert "resolved verl_dr_grpo.fixed_length_loss.<locals>.dr_grpo_loss" in actor
    assert abs(_values(out, "ray actor loss = ") - step0) < 1e-7, actor
    pid_actor = int(actor.split(" in pid ")[1].split(",")[0])
    assert pid_actor != int(actor.rsplit("driver pid ", 1)[1].rstrip(")"))
