"""Checks of the verl plugins against verl's own dispatch in ``verl.trainer.ppo.core_algos``,
run in the verl trainer venv (no starforge-core there: the caller puts the checkout's
cluster-side package on sys.path, as the job's runtime zip would be).

    python verl_checks.py CASE    CASE: dr-grpo-numbers | gspo-numbers | defaults-equal-plain | refusals

Every case asserts and prints "ok CASE"; a failed assertion exits non-zero.
"""

from __future__ import annotations

import io
import math
import sys
from contextlib import redirect_stderr
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "examples" / "verl"), str(REPO / "forge_plugins" / "verl-dr-grpo"),
                str(REPO / "forge_plugins" / "verl-gspo")]

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import run_losses  # noqa: E402  the example's batch and ActorConfig
import torch  # noqa: E402
import verl_dr_grpo  # noqa: E402
import verl_gspo  # noqa: E402
from starforge import patching  # noqa: E402

REWARDS = [1.0, 0.0, 0.5, 0.25, 0.0, 0.75, 1.0, 0.5]
LENGTHS = [6, 3, 5, 2, 4, 6, 1, 5]
T = 6


def core():
    from verl.trainer.ppo import core_algos

    return core_algos


def inputs():
    mask = torch.zeros(8, T, dtype=torch.float64)
    rewards = torch.zeros(8, T, dtype=torch.float64)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
        rewards[i, n - 1] = REWARDS[i]
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    return mask, rewards, index


def group_means():
    return [sum(REWARDS[:4]) / 4] * 4 + [sum(REWARDS[4:]) / 4] * 4


def log_probs(deltas):
    """(old, new) with new - old = deltas[i][t] exactly (float64, deltas representable)."""
    torch.manual_seed(3)
    old = -torch.rand(8, T, dtype=torch.float64) * 2 - 0.5
    delta = torch.tensor(deltas, dtype=torch.float64)
    new = (old + delta).detach().requires_grad_(True)
    return old, new, (new - old).detach().tolist()


def close(a, b, tol=1e-12):
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def dr_grpo_numbers():
    verl_dr_grpo.install({})
    mask, rewards, index = inputs()
    adv, _ = core().get_adv_estimator_fn("dr_grpo")(token_level_rewards=rewards, response_mask=mask, index=index)
    want = [r - m for r, m in zip(REWARDS, group_means())]  # no std division
    for i in range(8):
        row = adv[i].tolist()
        assert all(close(row[t], want[i] if t < LENGTHS[i] else 0.0, 1e-6) for t in range(T)), (i, row, want[i])
    deltas = [[0.1 * ((i + 2 * t) % 7 - 3) for t in range(T)] for i in range(8)]  # some beyond the 0.2 clip
    old, new, delta = log_probs(deltas)
    a = adv.double()
    err = io.StringIO()
    with redirect_stderr(err):
        loss, _ = core().get_policy_loss_fn("dr_grpo")(old_log_prob=old, log_prob=new, advantages=a, response_mask=mask,
                                                       loss_agg_mode="token-mean", config=run_losses.actor_config("dr_grpo", "token-mean"))
    assert "actor loss_agg_mode 'token-mean' (verl's default) replaced by 'seq-mean-token-sum-norm'" in err.getvalue()
    total, clipped = 0.0, 0
    for i in range(8):
        for t in range(LENGTHS[i]):
            r, A = math.exp(delta[i][t]), float(a[i, t])
            bounded = min(max(r, 0.8), 1.2)
            clipped += max(-A * r, -A * bounded) != -A * r  # the clipped branch holds
            total += max(-A * r, -A * bounded)
    assert clipped > 0
    want_loss = total / 8 / T  # token sums, mean over responses, / the response length (generation bound)
    assert close(float(loss), want_loss), (float(loss), want_loss)
    print(f"dr-grpo loss {float(loss)!r} = {want_loss!r} (hand), {clipped} tokens clipped")


def gspo_numbers():
    verl_gspo.install({})
    mask, rewards, index = inputs()
    adv, _ = core().get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask, index=index)
    a = adv.double()
    # per-response mean log-ratios around the 3e-4 / 4e-4 clip range: some inside, some out
    means = [1e-4, 6e-4, -2e-4, -5e-4, 3e-4, 8e-4, -1e-4, -9e-4]
    deltas = [[means[i] + (2e-3 if t % 2 else -2e-3) * (t < LENGTHS[i] - (LENGTHS[i] % 2)) for t in range(T)]
              for i in range(8)]
    old, new, delta = log_probs(deltas)
    loss, _ = core().get_policy_loss_fn("gspo_paper")(old_log_prob=old, log_prob=new, advantages=a, response_mask=mask,
                                                      loss_agg_mode="seq-mean-token-mean",
                                                      config=_gspo_config())
    loss.backward()
    per_seq, clipped, grads = [], 0, []
    for i in range(8):
        n = LENGTHS[i]
        z = sum(delta[i][:n]) / n
        s, A = math.exp(z), float(a[i, 0])
        bounded = min(max(s, 1 - 3e-4), 1 + 4e-4)
        cut = max(-A * s, -A * bounded) != -A * s  # the clipped branch holds: no gradient
        clipped += cut
        per_seq.append(max(-A * s, -A * bounded) * n / (n + 1e-8))  # verl's token mean divides by L + 1e-8
        grads.append(0.0 if cut else -A * s / (n + 1e-8) / 8)  # d loss / d logp_it, stop-gradient form
    assert 0 < clipped < 8, clipped
    want_loss = sum(per_seq) / 8  # seq-mean-token-mean
    assert close(float(loss), want_loss), (float(loss), want_loss)
    for i in range(8):
        for t in range(T):
            want_g = grads[i] if t < LENGTHS[i] else 0.0
            assert close(float(new.grad[i, t]), want_g), (i, t, float(new.grad[i, t]), want_g)
    print(f"gspo loss {float(loss)!r} = {want_loss!r} (hand), {clipped} of 8 responses clipped, gradients match")


def _gspo_config():
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=8,
                       loss_agg_mode="seq-mean-token-mean", clip_ratio_low=3e-4, clip_ratio_high=4e-4)


def defaults_equal_plain():
    mask, rewards, index = inputs()
    plain_adv, _ = core().get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask, index=index)
    deltas = [[0.1 * ((i + 2 * t) % 7 - 3) for t in range(T)] for i in range(8)]

    def loss_and_grad(name, agg):
        old, new, _ = log_probs(deltas)
        loss, _ = core().get_policy_loss_fn(name)(old_log_prob=old, log_prob=new, advantages=plain_adv.double(),
                                                  response_mask=mask, loss_agg_mode=agg,
                                                  config=run_losses.actor_config(name, agg))
        loss.backward()
        return loss.detach(), new.grad

    verl_dr_grpo.install({"verl_dr_grpo.norm_adv_by_std": True, "verl_dr_grpo.loss_agg_mode": "token-mean"})
    adv, _ = core().get_adv_estimator_fn("dr_grpo")(token_level_rewards=rewards, response_mask=mask, index=index)
    assert torch.equal(adv, plain_adv)
    for ours, theirs in (("dr_grpo", "vanilla"),):
        (l1, g1), (l2, g2) = loss_and_grad(ours, "token-mean"), loss_and_grad(theirs, "token-mean")
        assert torch.equal(l1, l2) and torch.equal(g1, g2), (l1, l2)
    plain_run = run_losses.run({**run_losses.DEFAULTS}, out=lambda line: None)
    hp = {**run_losses.DEFAULTS, "verl.adv_estimator": "dr_grpo", "verl.loss_mode": "dr_grpo"}
    run = run_losses.run(hp, out=lambda line: None)
    assert run["losses"] == plain_run["losses"] and torch.equal(run["advantages"], plain_run["advantages"])
    patching.undo_all()

    verl_gspo.install({"verl_gspo.clip_ratio_low": 0.2, "verl_gspo.clip_ratio_high": 0.2,
                       "verl_gspo.loss_agg_mode": "token-mean"})
    with redirect_stderr(io.StringIO()):
        (l1, g1), (l2, g2) = loss_and_grad("gspo_paper", "token-mean"), loss_and_grad("gspo", "token-mean")
    assert torch.equal(l1, l2) and torch.equal(g1, g2), (l1, l2)
    patching.undo_all()
    print(f"verl's grpo/vanilla and gspo reproduced bit for bit with verl's defaults set through the plugins; "
          f"example losses {plain_run['losses']!r}")


def refusals():
    verl_dr_grpo.install({})
    mask, rewards, index = inputs()
    adv, _ = core().get_adv_estimator_fn("dr_grpo")(token_level_rewards=rewards, response_mask=mask, index=index)
    old, new, _ = log_probs([[0.0] * T] * 8)
    fn = core().get_policy_loss_fn("dr_grpo")
    for agg, config, message in (
        ("seq-mean-token-mean", run_losses.actor_config("dr_grpo", "seq-mean-token-mean"),
         "actor loss_agg_mode='seq-mean-token-mean' conflicts with the plugin's 'seq-mean-token-sum-norm'"),
        ("token-mean", _with_scale_factor(10), "loss_scale_factor=10 differs from the rollout's response length 6"),
    ):
        try:
            fn(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode=agg, config=config)
        except ValueError as exc:
            assert message in str(exc), exc
        else:
            raise AssertionError(f"not refused: {message}")
    patching.undo_all()

    verl_gspo.install({"verl_gspo.clip_ratio_low": 0.2, "verl_gspo.clip_ratio_high": 0.2})
    fn = core().get_policy_loss_fn("gspo_paper")
    err = io.StringIO()
    with redirect_stderr(err):
        fn(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode="seq-mean-token-mean",
           config=run_losses.actor_config("gspo_paper", "seq-mean-token-mean"))
    assert "verl-gspo: warning: clip range 0.2/0.2 is token-scale" in err.getvalue(), err.getvalue()
    per_token = adv.clone()
    per_token[0, 1] += 0.5
    try:
        fn(old_log_prob=old, log_prob=new, advantages=per_token, response_mask=mask, loss_agg_mode="seq-mean-token-mean",
           config=run_losses.actor_config("gspo_paper", "seq-mean-token-mean"))
    except ValueError as exc:
        assert "per-token advantages" in str(exc), exc
    else:
        raise AssertionError("per-token advantages were not refused")
    patching.undo_all()
    print("refused: conflicting loss_agg_mode, a second divisor, per-token advantages; warned: token-scale clip")


def _with_scale_factor(factor):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=8,
                       loss_scale_factor=factor)


CASES = {"dr-grpo-numbers": dr_grpo_numbers, "gspo-numbers": gspo_numbers,
         "defaults-equal-plain": defaults_equal_plain, "refusals": refusals}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        CASES[name]()
        patching.undo_all()
        print(f"ok {name}", flush=True)
