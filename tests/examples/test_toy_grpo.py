"""The quickstart's reference trainer (examples/quickstart/toy_grpo): it learns, and every
reference plugin runs in it with a visible, checkable effect."""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from reference_plugins import RECIPE, install as install_as, recipe_module

# The threshold this test states: with the default config and seed 0, the mean reward over
# the last 5 of 40 steps is at least 0.9, and at least 0.5 above the first 5 steps'.
LEARNED = 0.9
GAIN = 0.5


@pytest.fixture
def train(monkeypatch):
    with recipe_module(monkeypatch, "toy_grpo.train") as module:
        yield module


def run(train, params: dict | None = None) -> tuple[list, dict]:
    lines: list = []
    result = train.run(params or {}, out=lines.append)
    return lines, result


def value(lines: list, prefix: str):
    """The Python literal after ``prefix = `` on the one line that starts with it."""
    found = [line for line in lines if line.startswith(prefix + " = ")]
    assert len(found) == 1, (prefix, lines)
    return ast.literal_eval(found[0].split(" = ", 1)[1])


def install(name: str, params: dict | None = None) -> None:
    """Install a reference plugin acting for ``starforge/<name>@<version>`` (the trainer's log names it)."""
    install_as(name, params, owner="starforge")


def grpo(rewards: list, group_size: int, eps: float) -> list:
    """GRPO advantages written out independently of the trainer (population std)."""
    out = []
    for s in range(0, len(rewards), group_size):
        g = rewards[s:s + group_size]
        mean = sum(g) / len(g)
        std = math.sqrt(sum((r - mean) * (r - mean) for r in g) / len(g))
        out += [(r - mean) / (std + eps) for r in g]
    return out


def test_the_trainer_learns_with_a_fixed_seed(train):
    lines, result = run(train)
    first, last = value(lines, "first_mean_reward"), value(lines, "mean_reward")
    assert last >= LEARNED and last - first >= GAIN, lines
    assert (first, last) == (result["first_mean_reward"], result["mean_reward"])
    rewards = value(lines, "rewards[step 0]")
    assert len(rewards) == 16 and len(set(rewards)) > 1
    assert value(lines, "advantages[step 0]") == grpo(rewards, 8, 1e-6)


def test_the_same_seed_gives_the_same_run_and_another_seed_another(train):
    assert run(train, {"grpo.seed": 1})[0] == run(train, {"grpo.seed": 1})[0]
    assert value(run(train, {"grpo.seed": 1})[0], "rewards[step 0]") != value(run(train)[0], "rewards[step 0]")


def test_it_runs_as_a_module_reading_forge_hyperparams(train, tmp_path):
    params = {"grpo.seed": 3, "grpo.steps": 12, "grpo.report_steps": 3, "opsd.scale": 2.0}
    (tmp_path / "hp.json").write_text(json.dumps(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["FORGE_HYPERPARAMS"] = str(tmp_path / "hp.json")
    proc = subprocess.run(
        [sys.executable, "-m", "toy_grpo.train"], cwd=RECIPE, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == run(train, params)[0]
    assert len(value(proc.stdout.splitlines(), "rewards[step 0]")) == 16


def test_opsd_patch_scales_the_advantages_the_trainer_uses(train):
    base, _ = run(train)
    install("opsd-patch", {"opsd.scale": 2.0})
    lines, result = run(train)
    assert "patched : toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo] (wrap) by starforge/opsd-patch@1.2.0" in lines
    assert value(lines, "rewards[step 0]") == value(base, "rewards[step 0]")
    assert value(lines, "advantages[step 0]") == [2.0 * a for a in value(base, "advantages[step 0]")]
    assert result["mean_reward"] >= LEARNED


def test_dr_grpo_runs_mean_centred_and_learns_with_its_larger_step(train):
    install("dr-grpo")  # divides by the trainer's own grpo.max_tokens (6)
    lines, result = run(train, {"grpo.lr": 16.0})
    rewards = value(lines, "rewards[step 0]")
    centred = []
    for s in (0, 8):
        mean = sum(rewards[s:s + 8]) / 8
        centred += [r - mean for r in rewards[s:s + 8]]
    assert value(lines, "advantages[step 0]") == centred
    assert result["mean_reward"] >= LEARNED and result["mean_reward"] - result["first_mean_reward"] >= GAIN


def test_gspo_changes_the_updates_and_still_learns(train):
    base, _ = run(train)
    install("gspo")
    lines, result = run(train)
    assert "patched : toy_grpo.algorithms:compute_log_ratio (replace) by starforge/gspo@1.1.0" in lines
    # Same first samples; the second epoch of step 0 is off-policy, so the loss differs.
    assert value(lines, "rewards[step 0]") == value(base, "rewards[step 0]")
    step0 = [line for line in lines if line.startswith("step 0 ")]
    assert step0 != [line for line in base if line.startswith("step 0 ")]
    assert result["mean_reward"] >= LEARNED


def test_single_epoch_gspo_is_the_token_level_run(train):
    """One epoch per batch is on-policy: the sequence ratio equals the token ratio exactly."""
    base, _ = run(train, {"grpo.epochs": 1})
    install("gspo")
    lines, _ = run(train, {"grpo.epochs": 1})
    assert [line for line in lines if not line.startswith("patched")] == base


def test_reward_clip_builtin_clips_the_rewards_the_trainer_sees(train):
    install("reward-clip", {"reward_clip.lo": 0.25, "reward_clip.hi": 0.5})
    lines, _ = run(train)
    rewards = value(lines, "rewards[step 0]")
    assert min(rewards) == 0.25 and max(rewards) == 0.5
    assert value(lines, "advantages[step 0]") == grpo(rewards, 8, 1e-6)


def test_deferred_plugins_get_the_policy_and_max_tokens(tmp_path):
    """A deferred plugin registered for the job is installed by the trainer with its context."""
    script = textwrap.dedent(
        """
        import runpy, sys
        from starforge.cluster import hyperparams_and_deferred as deferred

        seen = {}

        def install(params, **ctx):
            seen.update(ctx)

        deferred.register("policy-probe", "alice/policy-probe@0.1.0", install)
        sys.argv = ["toy_grpo.train"]
        try:
            runpy.run_module("toy_grpo.train", run_name="__main__")
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        policy = seen["policy"]
        print("ctx", sorted(seen), type(policy).__name__, policy.positions, seen["max_tokens"])
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["FORGE_HYPERPARAMS"] = str(tmp_path / "hp.json")
    (tmp_path / "hp.json").write_text(json.dumps({"grpo.steps": 2, "grpo.report_steps": 1, "grpo.max_tokens": 5}))
    env["PYTHONPATH"] = str(RECIPE)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "deferred: policy-probe installed"
    assert out[-1] == "ctx ['max_tokens', 'policy'] TabularPolicy 5 5"


class _CountingEnv:
    """The environment template's CountingEnv: reward 1.0 when the running total hits the target."""

    def __init__(self, target: int) -> None:
        self.target, self.total = target, 0

    def reset(self):
        self.total = 0
        return 0

    def step(self, action):
        self.total += int(action)
        return self.total, 1.0 if self.total == self.target else 0.0, self.total >= self.target


def test_the_environment_its_config_names_scores_the_responses(train, monkeypatch):
    from starforge import plugins

    calls = []

    def load_environment(name, **ctx):
        calls.append((name, ctx))
        return lambda: _CountingEnv(6)

    monkeypatch.setattr(plugins, "load_environment", load_environment)
    plain, _ = run(train)
    assert calls == []  # no task.environment: the pattern reward, nothing loaded
    lines, result = run(train, {"task.environment": "counting-env"})
    assert calls == [("counting-env", {"vocab": 4, "max_tokens": 6})]  # once, with the trainer's context
    assert "environment: counting-env (each response is one episode of a fresh environment)" in lines
    rewards = value(lines, "rewards[step 0]")
    assert set(rewards) == {0.0, 1.0} and rewards != value(plain, "rewards[step 0]")
    assert result["mean_reward"] >= LEARNED and result["mean_reward"] - result["first_mean_reward"] >= GAIN
