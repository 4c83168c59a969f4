"""Cosmos-RL's config parsing and its GRPO ``compute_loss``, as its trainer calls them, on CPU.

A config table with a GRPO ``train_policy`` goes through ``Config.from_dict`` (where every
Cosmos-RL process builds its config, so the plugins of the job fill in, refuse or warn there).
Then a small batch (2 prompts x 4 responses, one advantage per response, the group's reward
minus its mean) trains a table of logits for ``cosmos.steps`` steps with Cosmos-RL's
``compute_loss``; the old log-probs stay those of the first step, so later steps are
off-policy and the clip acts.

Prints the selected algo, variant, loss_type and divisor, then ``step N loss = ...``.
"""

from __future__ import annotations

import json
import os
import tempfile

DEFAULTS = {"cosmos.max_response_length": 8, "cosmos.mu_iterations": 2, "cosmos.steps": 3, "cosmos.lr": 0.5}
REWARDS = [1.0, 0.0, 0.5, 0.25, 0.0, 0.75, 1.0, 0.5]
LENGTHS = [6, 3, 5, 2, 4, 6, 1, 5]
VOCAB = 5


def hyperparams() -> dict:
    hp = dict(DEFAULTS)
    path = os.environ.get("FORGE_HYPERPARAMS")
    if path:
        with open(path) as f:
            hp.update({k: v for k, v in json.load(f).items() if k in DEFAULTS})
    return hp


def run(hp: dict, out=print) -> list:
    import torch
    from cosmos_rl.policy.config import Config
    from cosmos_rl.policy.trainer.llm_trainer import grpo_trainer

    config = Config.from_dict({
        "train": {"output_dir": tempfile.gettempdir(), "timestamp": "example",
                  "train_policy": {"type": "grpo", "mu_iterations": int(hp["cosmos.mu_iterations"])}},
        "rollout": {"max_response_length": int(hp["cosmos.max_response_length"])},
    })
    policy = config.train.train_policy
    out(f"cosmos: algo={policy.algo} variant={policy.variant} loss_type={policy.loss_type} "
        f"unbiased_loss_max_tokens={policy.unbiased_loss_max_tokens}")
    width = max(LENGTHS)
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (len(LENGTHS), width))
    mask = torch.zeros(len(LENGTHS), width, dtype=torch.bool)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = True
    means = [sum(REWARDS[:4]) / 4] * 4 + [sum(REWARDS[4:]) / 4] * 4
    advantages = torch.tensor([r - m for r, m in zip(REWARDS, means)]).unsqueeze(-1).expand(-1, width)
    cu_seqlens = torch.tensor([0] + [sum(LENGTHS[:i + 1]) for i in range(len(LENGTHS))])
    logits = torch.nn.Parameter(torch.randn(len(LENGTHS), width, VOCAB) * 0.1)

    def log_probs():
        per_token = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return torch.masked_select(per_token, mask)  # flat, as Cosmos-RL's trainer passes them

    with torch.no_grad():
        old = log_probs()
    losses = []
    for step in range(int(hp["cosmos.steps"])):
        loss, _, _ = grpo_trainer.compute_loss(log_probs(), old, None, advantages, cu_seqlens, config, mask)
        logits.grad = None
        loss.backward()
        with torch.no_grad():
            logits -= float(hp["cosmos.lr"]) * logits.grad
        losses.append(float(loss.detach()))
        out(f"step {step} loss = {losses[-1]!r}")
    return losses


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run(hyperparams())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
