"""The Cosmos-RL plugins against Cosmos-RL 0.4.7 in its own venv (one Cosmos-RL process for every case,
a spawn pool's worker: importing cosmos_rl takes seconds): Dr-GRPO's and GSPO's losses through Cosmos-RL's real
``compute_loss`` and Dr-GRPO's advantages through its algo registry and reward worker pool,
against hand-computed values, and the configurations the plugins refuse or warn about."""

from __future__ import annotations

import pytest
from frameworks_env import run_checks

pytestmark = pytest.mark.frameworks

#: the losses, the refusals and warnings at config parse time, one batch split unevenly over two gloo
#: data-parallel ranks through the wrap of the trainer's step, the reward pool under fork and under spawn
CASES = ["dr-grpo-numbers", "gspo-numbers", "refusals", "dp-ranks", "reward-pool"]


def test_cosmos_plugins_against_cosmos_rl(runtime_path):
    # the script puts the CPU shims (COSMOS_CPU) on its spawned worker's PYTHONPATH itself: its own process
    # imports neither torch nor cosmos_rl
    out = run_checks("cosmos", "cosmos_checks.py", CASES, runtime_path, timeout=600)
    assert "cosmos-dr-grpo: train_policy algo='dr_grpo', unbiased_advantage=True" not in out  # captured by the cases
    assert "Cosmos-RL's own path bit for bit" in out
    assert "2 of 5 responses clipped, 1 capped at 10" in out
    assert "mini-batches 2 + 1 + 1 and 1 + 1 + 2: -0.0068359375 bit for bit" in out  # -7/1024, as computed by hand
    assert "reward pool advantages (fork and spawn) [0.5625, -0.4375, 0.0625, -0.1875, -0.5625, 0.1875, 0.4375, " \
           "-0.0625]" in out
