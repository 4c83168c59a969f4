"""The TRL and verl plugins, run against the real frameworks in their own venvs: losses and
advantages against hand-computed values, the frameworks' defaults set through the plugins
reproducing plain runs bit for bit, and the refusals and warnings of seed fidelity."""

from __future__ import annotations

import pytest
from frameworks_env import run_checks

pytestmark = pytest.mark.frameworks

CASES = ["dr-grpo-numbers", "gspo-numbers", "defaults-equal-plain", "refusals"]
#: TRL: the seed's GSPO cap, refusals and warnings, Dr-GRPO's refusals and degenerate groups
TRL_CASES = CASES + ["gspo-seed-fidelity", "dr-grpo-seed-fidelity"]
#: verl's actor loss path (ppo_loss) on its default trainer (unpadded micro-batches of different widths and
#: sizes, a simulated DP size of 2) and its legacy one, verl's config validation filling the bound, degenerate
#: groups, session-final grouping, and the plugin's activation where verl's workers and driver import it
VERL_CASES = CASES + ["v1-loss-path", "legacy-loss-path", "gspo-loss-path", "config-bound", "degenerate-groups",
                      "multi-trajectories", "worker-imports"]


def test_trl_plugins_against_grpo_trainer(runtime_path):
    out = run_checks("trl", "trl_checks.py", TRL_CASES, runtime_path)
    assert "trl-dr-grpo: GRPOTrainer scale_rewards 'group' -> 'none', loss_type 'dapo' -> 'dr_grpo'; " \
           "loss divisor batch x max_completion_length=6" in out


def test_verl_plugins_through_verl_dispatch(runtime_path):
    out = run_checks("verl", "verl_checks.py", VERL_CASES, runtime_path)
    assert "verl-dr-grpo: actor loss_agg_mode 'token-mean' (verl's default) replaced by 'seq-mean-token-sum-norm'" in out
    assert "v1 dynamic micro-batches" in out and "loss -0.0703125 = -0.0703125 (hand)" in out
