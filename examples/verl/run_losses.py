"""verl's advantage estimator and policy loss, picked by name through verl's own dispatch.

A small batch: 2 prompts x 4 responses of up to ``verl.response_length`` tokens (responses
padded to it, as verl's rollout does), one outcome reward per response. A tiny policy (a
table of logits) is trained for ``verl.steps`` steps: the advantages come from
``core_algos.get_adv_estimator_fn(verl.adv_estimator)``, the loss from
``core_algos.get_policy_loss_fn(verl.loss_mode)`` with an ``ActorConfig``, and the old
log-probs stay those of the first step, so later steps are off-policy and the clip acts.
With ``verl.ray_address`` set, a Ray actor resolves the same loss by name in its own process
and computes it on the first step's batch.

Prints::

    verl: adv_estimator=... loss_mode=... loss_agg_mode=...
    advantages = [...]          (one per response)
    step N loss = ...
    ray actor loss = ... (resolved ... in pid ...)
"""

from __future__ import annotations

import json
import os
import sys

DEFAULTS = {"verl.adv_estimator": "grpo", "verl.loss_mode": "vanilla", "verl.loss_agg_mode": "token-mean",
            "verl.steps": 3, "verl.lr": 0.5, "verl.response_length": 6, "verl.ray_address": ""}
REWARDS = [1.0, 0.0, 0.5, 0.25, 0.0, 0.75, 1.0, 0.5]
LENGTHS = [6, 3, 5, 2, 4, 6, 1, 5]
VOCAB = 5


def hyperparams() -> dict:
    path = os.environ.get("FORGE_HYPERPARAMS")
    hp = dict(DEFAULTS)
    if path:
        with open(path) as f:
            hp.update({k: v for k, v in json.load(f).items() if k in DEFAULTS})
    return hp


def batch(response_length: int):
    import numpy as np
    import torch

    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (len(LENGTHS), response_length))
    mask = torch.zeros(len(LENGTHS), response_length)
    rewards = torch.zeros(len(LENGTHS), response_length)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1.0
        rewards[i, n - 1] = REWARDS[i]  # outcome reward on the last response token
    index = np.array(["p0"] * 4 + ["p1"] * 4, dtype=object)
    return tokens, mask, rewards, index


def log_probs(logits, tokens):
    import torch

    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def actor_config(loss_mode: str, loss_agg_mode: str):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=8,
                       loss_agg_mode=loss_agg_mode, policy_loss={"loss_mode": loss_mode})


def policy_loss(loss_mode, loss_agg_mode, old, new, advantages, mask):
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_policy_loss_fn(loss_mode)
    loss, metrics = fn(old_log_prob=old, log_prob=new, advantages=advantages, response_mask=mask,
                       loss_agg_mode=loss_agg_mode, config=actor_config(loss_mode, loss_agg_mode))
    return loss, metrics


def run(hp: dict, out=print) -> dict:
    import torch
    from verl.trainer.ppo import core_algos

    n = int(hp["verl.response_length"])
    tokens, mask, rewards, index = batch(n)
    out(f"verl: adv_estimator={hp['verl.adv_estimator']} loss_mode={hp['verl.loss_mode']} "
        f"loss_agg_mode={hp['verl.loss_agg_mode']}")
    estimator = core_algos.get_adv_estimator_fn(hp["verl.adv_estimator"])
    advantages, _ = estimator(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
    out(f"advantages = {[float(advantages[i, 0]) for i in range(len(LENGTHS))]!r}")

    torch.manual_seed(1)
    logits = torch.nn.Parameter(torch.randn(len(LENGTHS), n, VOCAB) * 0.1)
    with torch.no_grad():
        old = log_probs(logits, tokens)
    losses = []
    for step in range(int(hp["verl.steps"])):
        new = log_probs(logits, tokens)
        loss, metrics = policy_loss(hp["verl.loss_mode"], hp["verl.loss_agg_mode"], old, new, advantages, mask)
        logits.grad = None
        loss.backward()
        with torch.no_grad():
            logits -= float(hp["verl.lr"]) * logits.grad
        losses.append(float(loss.detach()))
        out(f"step {step} loss = {losses[-1]!r} clipfrac = {metrics['actor/pg_clipfrac']!r}")
    result = {"advantages": advantages, "losses": losses}
    if hp["verl.ray_address"]:
        result["ray_loss"] = ray_actor_loss(hp, old, advantages, mask, out)
    return result


def ray_actor_loss(hp, old, advantages, mask, out):
    import ray

    ray.init(address=hp["verl.ray_address"], log_to_driver=False)
    try:
        @ray.remote(num_cpus=0)
        class LossActor:
            def loss(self, loss_mode, loss_agg_mode, old, new, advantages, mask):
                from verl.trainer.ppo import core_algos

                fn = core_algos.get_policy_loss_fn(loss_mode)  # verl's own lookup, in the actor process
                value, _ = policy_loss(loss_mode, loss_agg_mode, old, new, advantages, mask)
                return float(value), f"{fn.__module__}.{fn.__qualname__}", os.getpid()

        actor = LossActor.remote()
        # on-policy check of the first step: the same inputs the driver's step 0 used
        value, where, pid = ray.get(actor.loss.remote(hp["verl.loss_mode"], hp["verl.loss_agg_mode"], old, old.clone(),
                                                      advantages, mask))
        out(f"ray actor loss = {value!r} (resolved {where} in pid {pid}, driver pid {os.getpid()})")
        return value
    finally:
        ray.shutdown()


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run(hyperparams())
    return 0


if __name__ == "__main__":
    sys.exit(main())
