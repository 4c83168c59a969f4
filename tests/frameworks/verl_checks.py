"""Checks of the verl plugins against verl's own dispatch in ``verl.trainer.ppo.core_algos``,
run in the verl trainer venv (no starforge-core there: the caller puts the checkout's
cluster-side package on sys.path, as the job's runtime zip would be).

    python verl_checks.py CASE    CASE: dr-grpo-numbers | gspo-numbers | defaults-equal-plain | refusals

Every case asserts and prints "ok CASE"; a failed assertion exits non-zero.
"""

from __future__ import annotations

import io
import math
import os
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
    # and through verl's actor loss path (ppo_loss, unpadded micro-batches, entropy and KL terms)
    runs = []
    for name in ("dr_grpo", "vanilla"):
        leaf = hand_leaf()
        config = ppo_config(name, use_kl_loss=True, kl_loss_coef=0.5, entropy_coeff=0.25)
        runs.append((run_ppo_loss(v1_mini_batch(use_dynamic_bsz=True, max_token_len_per_gpu=10, ref_shift=0.5), config,
                                  leaf, entropy=0.25), leaf.grad))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1]), runs
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
        ("token-mean", _with_scale_factor(4), "loss_scale_factor=4 is shorter than a response of 6 tokens"),
    ):
        try:
            fn(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode=agg, config=config)
        except ValueError as exc:
            assert message in str(exc), exc
        else:
            raise AssertionError(f"not refused: {message}")
    # a factor at least as long as every response is the bound the caller declares: used
    deltas = [[0.1 * ((i + 2 * t) % 7 - 3) for t in range(T)] for i in range(8)]
    old, new, delta = log_probs(deltas)
    with redirect_stderr(io.StringIO()):
        loss, _ = fn(old_log_prob=old, log_prob=new, advantages=adv.double(), response_mask=mask,
                     loss_agg_mode="token-mean", config=_with_scale_factor(10))
    total = sum(max(-float(adv[i, 0]) * math.exp(delta[i][t]), -float(adv[i, 0]) * min(max(math.exp(delta[i][t]), 0.8), 1.2))
                for i in range(8) for t in range(LENGTHS[i]))
    assert close(float(loss), total / 8 / 10), (float(loss), total / 8 / 10)
    patching.undo_all()

    verl_gspo.install({"verl_gspo.clip_ratio_low": 0.2, "verl_gspo.clip_ratio_high": 0.2})
    fn = core().get_policy_loss_fn("gspo_paper")
    old, new, _ = log_probs([[0.0] * T] * 8)  # on-policy
    err = io.StringIO()
    with redirect_stderr(err):
        fn(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode="seq-mean-token-mean",
           config=run_losses.actor_config("gspo_paper", "seq-mean-token-mean"))
    assert "verl-gspo: warning: clip range 0.2/0.2 is token-scale" in err.getvalue(), err.getvalue()
    assert "verl-gspo: warning: on-policy ratio (old and new log-probs equal" in err.getvalue(), err.getvalue()
    with redirect_stderr(err):
        fn(old_log_prob=old.bfloat16(), log_prob=(new + 0.01).bfloat16(), advantages=adv.bfloat16(), response_mask=mask,
           loss_agg_mode="seq-mean-token-mean", config=run_losses.actor_config("gspo_paper", "seq-mean-token-mean"))
    assert "verl-gspo: warning: bf16 log-probs" in err.getvalue(), err.getvalue()
    from verl.workers.config import ActorConfig

    dual = ActorConfig(strategy="fsdp", rollout_n=4, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=8,
                       loss_agg_mode="seq-mean-token-mean", clip_ratio_c=10.0)
    try:
        fn(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode="seq-mean-token-mean",
           config=dual)
    except ValueError as exc:
        assert "actor clip_ratio_c=10.0 is verl's dual clip" in str(exc), exc
    else:
        raise AssertionError("a dual clip was not refused")
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
    print("refused: conflicting loss_agg_mode, a divisor shorter than a response, per-token advantages, a dual clip; "
          "used: a divisor the caller declares; warned: token-scale clip, on-policy ratio, bf16 log-probs")


def _with_scale_factor(factor):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=8,
                       loss_scale_factor=factor)



# ---- verl's actor loss path (``verl.workers.utils.losses.ppo_loss``), the one both trainers use ----
#
# The hand case of Dr-GRPO's fixed divisor: four responses of one mini-batch, on-policy
# (ratio 1, so each token's loss is -A_i), generation bound 8:
#   token-loss sums  -0.5*6 = -3,  +0.5*2 = 1,  -0.25*3 = -0.75,  +0.25*2 = 0.5   -> total -2.25
#   / 4 responses (the DP-global sequence count) / 8 (the bound)                   -> -0.0703125
# With the micro-batch width as divisor (what verl does on unpadded responses), two
# micro-batches of two give (-3 + 1)/4/6 + (-0.75 + 0.5)/4/3 = -0.0833333 - 0.0208333 = -0.1041667.
HAND_LENGTHS = [6, 2, 3, 2]
HAND_ADVANTAGES = [0.5, -0.5, 0.25, -0.25]
HAND_BOUND = 8
HAND_LOSS = -0.0703125
PROMPT = 2


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _hand_logps():
    """Per-response log-probs (non-degenerate values, all exact in binary)."""
    return [[-1.0 - 0.125 * ((i + t) % 5) for t in range(n)] for i, n in enumerate(HAND_LENGTHS)]


def v1_mini_batch(rows=None, dp_size=1, global_batch_size=4, ref_shift=None, **split):
    """The default trainer's actor input: responses stored unpadded (nested), as TransferQueue hands them.

    *rows* picks the responses this (simulated) DP rank holds; *split* is the micro-batching
    (``micro_batch_size_per_gpu=N`` or ``use_dynamic_bsz=True, max_token_len_per_gpu=N``).
    """
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    rows = list(range(len(HAND_LENGTHS))) if rows is None else rows
    lengths = [HAND_LENGTHS[i] for i in rows]
    logps = _hand_logps()
    fields = {
        "input_ids": _nested([torch.ones(PROMPT + n, dtype=torch.long) for n in lengths]),
        "prompts": _nested([torch.ones(PROMPT, dtype=torch.long) for _ in lengths]),
        "responses": _nested([torch.full((n,), 2, dtype=torch.long) for n in lengths]),
        "response_mask": _nested([torch.ones(n, dtype=torch.long) for n in lengths]),
        "loss_mask": _nested([torch.ones(n, dtype=torch.long) for n in lengths]),
        "old_log_probs": _nested([torch.tensor(logps[i], dtype=torch.float64) for i in rows]),
        "advantages": _nested([torch.full((HAND_LENGTHS[i],), HAND_ADVANTAGES[i], dtype=torch.float64) for i in rows]),
        "row": torch.tensor(rows),
    }
    if ref_shift is not None:  # one shift for all responses, or one per response
        shifts = ref_shift if isinstance(ref_shift, list) else [ref_shift] * len(HAND_LENGTHS)
        fields["ref_log_prob"] = _nested([torch.tensor(logps[i], dtype=torch.float64) - shifts[i] for i in rows])
    td = TensorDict(fields, batch_size=len(rows))
    dynamic = split.pop("use_dynamic_bsz", False)
    tu.assign_non_tensor(td, dp_size=dp_size, batch_num_tokens=sum(HAND_LENGTHS), global_batch_size=global_batch_size,
                         use_dynamic_bsz=dynamic, **split)
    return td


def legacy_mini_batch(micro_batch_size_per_gpu=2):
    """The legacy trainer's actor input (``trainer.use_v1: false``): responses padded to the bound, then
    converted with verl's own ``left_right_2_no_padding`` as ``ray_trainer._update_actor`` does."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    b, logps = len(HAND_LENGTHS), _hand_logps()
    response_mask = torch.zeros(b, HAND_BOUND, dtype=torch.long)
    old = torch.zeros(b, HAND_BOUND, dtype=torch.float64)
    adv = torch.zeros(b, HAND_BOUND, dtype=torch.float64)
    for i, n in enumerate(HAND_LENGTHS):
        response_mask[i, :n] = 1
        old[i, :n] = torch.tensor(logps[i], dtype=torch.float64)
        adv[i, :n] = HAND_ADVANTAGES[i]
    attention = torch.cat([torch.ones(b, PROMPT, dtype=torch.long), response_mask], dim=1)
    td = TensorDict({"input_ids": torch.ones(b, PROMPT + HAND_BOUND, dtype=torch.long), "attention_mask": attention,
                     "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
                     "prompts": torch.ones(b, PROMPT, dtype=torch.long),
                     "responses": torch.full((b, HAND_BOUND), 2, dtype=torch.long), "response_mask": response_mask,
                     "old_log_probs": old, "advantages": adv, "row": torch.arange(b)}, batch_size=b)
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=sum(HAND_LENGTHS), global_batch_size=b,
                         use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size_per_gpu)
    return td


def run_ppo_loss(td, config, leaf, entropy=None):
    """verl's micro-batch loop on one rank: verl's own ``prepare_micro_batches``, then ``ppo_loss``
    per micro-batch with the model's log-probs taken from *leaf* (responses x bound), each
    micro-batch's loss backpropagated as the engine does. Returns (sum of losses, micro-batches)."""
    from verl.workers.engine.utils import prepare_micro_batches
    from verl.workers.utils import losses

    micro_batches, _ = prepare_micro_batches(td)
    total, shapes = 0.0, []
    for mb in micro_batches:
        lengths = mb["responses"].offsets().diff().tolist() if mb["responses"].is_nested else \
            mb["response_mask"].sum(-1).tolist()
        rows = mb["row"].tolist()
        # model output over prompt + response, shifted left by one as verl's no_padding_2_padding reads it
        full = [torch.cat([torch.zeros(PROMPT - 1, dtype=torch.float64), leaf[r, :n], torch.zeros(1, dtype=torch.float64)])
                for r, n in zip(rows, lengths)]
        output = {"log_probs": _nested(full)}
        if entropy is not None:
            output["entropy"] = _nested([torch.full((PROMPT + n,), entropy, dtype=torch.float64) for n in lengths])
        loss, _ = losses.ppo_loss(config, output, mb)
        loss.backward()
        total += float(loss)
        width = mb["response_mask"].to_padded_tensor(0).shape[-1] if mb["response_mask"].is_nested \
            else mb["response_mask"].shape[-1]
        shapes.append((len(rows), int(width)))
    return total, shapes


def hand_leaf():
    leaf = torch.zeros(len(HAND_LENGTHS), HAND_BOUND, dtype=torch.float64)
    for i, row in enumerate(_hand_logps()):
        leaf[i, :len(row)] = torch.tensor(row, dtype=torch.float64)
    return leaf.requires_grad_(True)


def ppo_config(loss_mode, loss_agg_mode="token-mean", **extra):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2,
                       loss_agg_mode=loss_agg_mode, policy_loss={"loss_mode": loss_mode}, **extra)


def check_hand_gradients(leaf):
    """On-policy, unclipped: d loss / d logp of each token of response i = -A_i / (4 x 8)."""
    for i, n in enumerate(HAND_LENGTHS):
        for t in range(HAND_BOUND):
            want = -HAND_ADVANTAGES[i] / (4 * HAND_BOUND) if t < n else 0.0
            assert float(leaf.grad[i, t]) == want, (i, t, float(leaf.grad[i, t]), want)


def expect_refusal(message, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ValueError as exc:
        assert message in str(exc), exc
        return str(exc)
    raise AssertionError(f"not refused: {message}")


def v1_loss_path():
    # verl as it is: the micro-batch width is the divisor, so the hand case comes out wrong
    plain, _ = run_ppo_loss(v1_mini_batch(micro_batch_size_per_gpu=2), ppo_config("vanilla", FIXED_MODE), hand_leaf())
    assert math.isclose(plain, -0.1041666666666667, rel_tol=1e-12), plain

    verl_dr_grpo.install({})
    # the bound in verl's own knob (what verl's config validation puts there): accepted and used
    bound = {"loss_scale_factor": HAND_BOUND}
    for name, td, config in (
        ("two micro-batches of two", v1_mini_batch(micro_batch_size_per_gpu=2), ppo_config("dr_grpo", **bound)),
        ("dynamic micro-batches", v1_mini_batch(use_dynamic_bsz=True, max_token_len_per_gpu=10),
         ppo_config("dr_grpo", **bound)),
        ("one micro-batch", v1_mini_batch(micro_batch_size_per_gpu=4), ppo_config("dr_grpo", FIXED_MODE, **bound)),
    ):
        leaf = hand_leaf()
        err = io.StringIO()
        with redirect_stderr(err):
            loss, shapes = run_ppo_loss(td, config, leaf)
        assert loss == HAND_LOSS, (name, loss, shapes)
        check_hand_gradients(leaf)
        if name == "dynamic micro-batches":
            assert len({s for s, _ in shapes}) > 1 and len({w for _, w in shapes}) > 1, shapes  # sizes and widths differ
        print(f"v1 {name} {shapes} (size, width): loss {loss!r} = {HAND_LOSS!r} (hand)")

    # a simulated data-parallel size of 2: each rank holds two responses (micro-batches of one), the
    # weight stays the DP-global sequence count (4), DDP averages the ranks' gradients
    leaf = hand_leaf()
    ranks = [run_ppo_loss(v1_mini_batch(rows, dp_size=2, micro_batch_size_per_gpu=1), ppo_config("dr_grpo", **bound),
                          leaf) for rows in ([0, 1], [2, 3])]
    loss = sum(value for value, _ in ranks) / 2
    assert loss == HAND_LOSS, (loss, ranks)
    leaf.grad /= 2  # DDP's all-reduce mean
    check_hand_gradients(leaf)
    print(f"v1 data-parallel 2 {[s for _, s in ranks]}: loss {loss!r} = {HAND_LOSS!r} (hand)")

    # entropy and KL in the objective's unit: token sums / 4 responses / the bound
    # KL (k1) = logp - ref = 0.5 per token, entropy 0.25 per token, 13 tokens:
    #   0.5 x (0.5 x 13 / 32) - 0.25 x (0.25 x 13 / 32) = 0.1015625 - 0.025390625, plus the pg loss
    leaf = hand_leaf()
    config = ppo_config("dr_grpo", use_kl_loss=True, kl_loss_type="k1", kl_loss_coef=0.5, entropy_coeff=0.25, **bound)
    loss, _ = run_ppo_loss(v1_mini_batch(micro_batch_size_per_gpu=2, ref_shift=0.5), config, leaf, entropy=0.25)
    want = HAND_LOSS + 0.5 * (0.5 * 13 / 32) - 0.25 * (0.25 * 13 / 32)
    assert loss == want, (loss, want)
    for i, n in enumerate(HAND_LENGTHS):  # k1's gradient is 1 per token: 0.5 x 1 / 32 more on each
        got = leaf.grad[i].tolist()
        assert got == [(-HAND_ADVANTAGES[i] + 0.5) / 32 if t < n else 0.0 for t in range(HAND_BOUND)], (i, got)
    print(f"v1 entropy and KL in the objective's unit: loss {loss!r} = {want!r} (hand)")

    # refused: no bound on unpadded responses; a factor shorter than a response
    td = v1_mini_batch(micro_batch_size_per_gpu=2)
    expect_refusal("the responses are unpadded", run_ppo_loss, td, ppo_config("dr_grpo"), hand_leaf())
    expect_refusal("loss_scale_factor=5 is shorter than a response of 6 tokens", run_ppo_loss, td,
                   ppo_config("dr_grpo", loss_scale_factor=5), hand_leaf())
    expect_refusal("loss_scale_factor=True is not a positive whole number", run_ppo_loss, td,
                   ppo_config("dr_grpo", loss_scale_factor=True), hand_leaf())
    print("v1 refused: no bound on unpadded responses, a factor shorter than a response, a bool factor")


def gspo_loss_path():
    """verl-gspo through verl's actor loss: entropy and KL terms aggregated like the policy term
    (seq-mean-token-mean), not with the actor's token-mean."""
    verl_gspo.install({})
    shifts = [0.5, 0.25, 1.0, 0.75]  # k1 KL = logp - ref: one value per response
    config = ppo_config("gspo_paper", use_kl_loss=True, kl_loss_type="k1", kl_loss_coef=0.5, entropy_coeff=0.25)
    with redirect_stderr(io.StringIO()):
        loss, shapes = run_ppo_loss(v1_mini_batch(use_dynamic_bsz=True, max_token_len_per_gpu=10, ref_shift=shifts),
                                    config, hand_leaf(), entropy=0.25)
    # on-policy: s = 1, each response's token mean is -A_i, and the A_i sum to 0; per response the
    # token mean of the KL is its shift and of the entropy 0.25 (verl's L + 1e-8 is computed in float32
    # from the boolean mask's integer count, where the 1e-8 vanishes):
    #   0 + 0.5 x (0.5 + 0.25 + 1.0 + 0.75) / 4 - 0.25 x 0.25 = 0.3125 - 0.0625 = 0.25
    pg = sum(-a for a in HAND_ADVANTAGES) / 4
    want = pg + 0.5 * sum(shifts) / 4 - 0.25 * 0.25
    # the actor's token-mean would weigh the KL by tokens: sum_i shift_i L_i / 13
    with_token_mean = pg + 0.5 * sum(d * n for d, n in zip(shifts, HAND_LENGTHS)) / 13 - 0.25 * 0.25
    assert loss == want == 0.25 and not close(loss, with_token_mean, 1e-3), (loss, want, with_token_mean)
    print(f"gspo through ppo_loss {shapes}: loss {loss!r} = {want!r} (hand), entropy and KL per response")


def legacy_loss_path():
    """``trainer.use_v1: false``: responses padded to the bound, so the width is the divisor."""
    verl_dr_grpo.install({})
    for factor in (None, HAND_BOUND):
        leaf = hand_leaf()
        with redirect_stderr(io.StringIO()):
            loss, shapes = run_ppo_loss(legacy_mini_batch(), ppo_config("dr_grpo", loss_scale_factor=factor), leaf)
        assert loss == HAND_LOSS and all(w == HAND_BOUND for _, w in shapes), (loss, shapes)
        check_hand_gradients(leaf)
    expect_refusal("loss_scale_factor=10 differs from the rollout's response length 8", run_ppo_loss,
                   legacy_mini_batch(), ppo_config("dr_grpo", loss_scale_factor=10), hand_leaf())
    print(f"legacy (use_v1: false) micro-batches {shapes}: loss {loss!r} = {HAND_LOSS!r} (hand); "
          "refused: a factor that differs from the padded width")


def config_bound():
    """verl's config validation (driver side) puts rollout.response_length into actor.loss_scale_factor."""
    import verl
    from omegaconf import OmegaConf

    def config(**actor):
        cfg = OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer/config/_generated_ppo_trainer.yaml"))
        cfg.trainer.n_gpus_per_node = 1
        cfg.data.train_batch_size, cfg.data.max_response_length = 4, 24
        cfg.actor_rollout_ref.rollout.n = 4
        cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = 2
        cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu = 2
        cfg.actor_rollout_ref.actor.ppo_mini_batch_size = 2
        cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2
        cfg.actor_rollout_ref.actor.policy_loss.loss_mode = "dr_grpo"
        for key, value in actor.items():
            cfg.actor_rollout_ref.actor[key] = value
        return cfg

    verl_dr_grpo.install({})
    from verl.trainer import main_ppo  # the driver's copy of validate_config is the one patched

    err = io.StringIO()
    cfg = config()
    assert cfg.trainer.use_v1 is True and cfg.actor_rollout_ref.rollout.response_length == 24
    with redirect_stderr(err):
        main_ppo.validate_config(cfg, use_reference_policy=False, use_critic=False)
    assert cfg.actor_rollout_ref.actor.loss_scale_factor == 24, cfg.actor_rollout_ref.actor.loss_scale_factor
    assert "verl-dr-grpo: actor loss_scale_factor set to rollout.response_length=24" in err.getvalue(), err.getvalue()
    # the worker's actor config, built from that config as verl's engine worker builds it, carries the bound
    # to verl's loss: the hand case's token sums over 4 responses x 24
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    with redirect_stderr(io.StringIO()):
        loss, _ = run_ppo_loss(v1_mini_batch(micro_batch_size_per_gpu=2), actor, hand_leaf())
    assert type(actor).__name__ == "FSDPActorConfig" and close(loss, -2.25 / 4 / 24), (type(actor), loss)
    cfg = config(loss_scale_factor=24)
    with redirect_stderr(io.StringIO()):
        main_ppo.validate_config(cfg, use_reference_policy=False, use_critic=False)
    assert cfg.actor_rollout_ref.actor.loss_scale_factor == 24
    with redirect_stderr(io.StringIO()):
        expect_refusal("loss_scale_factor=32 differs from rollout.response_length=24", main_ppo.validate_config,
                       config(loss_scale_factor=32), use_reference_policy=False, use_critic=False)
        expect_refusal("actor loss_agg_mode='seq-mean-token-mean' conflicts", main_ppo.validate_config,
                       config(loss_agg_mode="seq-mean-token-mean"), use_reference_policy=False, use_critic=False)
    cfg = config()
    cfg.actor_rollout_ref.actor.policy_loss.loss_mode = "vanilla"
    with redirect_stderr(io.StringIO()):
        main_ppo.validate_config(cfg, use_reference_policy=False, use_critic=False)
    assert cfg.actor_rollout_ref.actor.loss_scale_factor is None  # another loss: left alone
    print(f"config: loss_scale_factor filled from rollout.response_length=24 (worker loss {loss!r} = -2.25/4/24), "
          "accepted when equal, refused when it differs; other losses untouched")


FIXED_MODE = "seq-mean-token-sum-norm"


WORKER_IMPORTS = r"""
import sys, types
from types import SimpleNamespace
sys.path[:0] = {paths!r}
for name in {stand_ins!r}:  # server modules a plain pip install of verl lacks (see import_trainer_module)
    stub = types.ModuleType(name)
    stub.__path__ = []
    stub.__getattr__ = lambda attr: (_ for _ in ()).throw(AttributeError(attr)) if attr.startswith("__") else type(attr, (), {{}})
    sys.modules[name] = stub
from starforge.cluster.import_hooks import TargetWatcher
import verl_dr_grpo, verl_gspo
item = SimpleNamespace(entry=SimpleNamespace(targets=["verl.trainer.ppo.core_algos"]))
activated = []
def activate(due, module):
    activated.append(module)
    verl_dr_grpo.install({{}})
    verl_gspo.install({{}})
sys.meta_path.insert(0, TargetWatcher([item], activate))
import importlib
module = importlib.import_module({module!r})
from verl.workers.utils import losses
from verl.utils import config
from starforge import patching
status = [(r["target"].split(":")[1], r["status"]) for r in patching.records()]
owners = {{"ppo_loss": losses, "validate_config": config,
           "compute_advantage_for_multi_trajectories": sys.modules.get("verl.trainer.ppo.v1.utils")}}
copies = [name for name in owners if hasattr(module, name)]
same = all(getattr(module, name) is getattr(owners[name], name) for name in copies)
print("activated by", activated, "patches", sorted(status), "copies", copies, same)
"""


WORKER_MODULES = ("verl.workers.engine_workers", "verl.trainer.main_ppo", "verl.trainer.main_ppo_v0",
                  "verl.trainer.ppo.v1.trainer_base")
#: The large third-party packages verl's worker and driver modules import (none of them imports verl):
#: loaded once in this process before it forks the import processes, so each of those pays only for verl
PRELOAD = ("torch", "numpy", "tensordict", "transformers", "transformers.modeling_utils", "transformers.modeling_layers",
           "transformers.image_processing_utils", "transformers.models.auto.auto_factory",
           "transformers.models.auto.tokenization_auto", "datasets", "pandas", "peft", "peft.utils.save_and_load",
           "ray", "ray.dag", "ray.experimental.state.api", "ray.util.collective", "aiohttp", "hydra", "hydra.utils",
           "omegaconf", "pydantic", "torchdata.stateful_dataloader")
#: module -> (exit code, output) of its import process (fork_worker_imports, before any case imports verl)
FORKED_IMPORTS: dict = {}


def fork_worker_imports():
    """Import each of WORKER_MODULES in a process of its own forked from this one before anything of
    verl is imported here and before any plugin is installed (called first, when worker-imports is
    asked for): as in a fresh interpreter, the TargetWatcher sees verl's whole import sequence."""
    import importlib
    import tempfile
    import traceback

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # only a speed-up: the import process then loads it itself
            pass
    loaded = [m for m in sys.modules if m == "verl" or m.startswith("verl.")]
    assert not loaded and not patching.records(), (loaded, patching.records())
    paths = [p for p in sys.path if "forge_plugins" in p or "seedrt" in p or p.endswith("runtime")]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    with tempfile.TemporaryDirectory(prefix="verl-worker-imports-") as folder:
        for module in WORKER_MODULES:
            code = WORKER_IMPORTS.format(paths=paths, stand_ins=["uvicorn", "fastapi", "transfer_queue"], module=module)
            out_path = os.path.join(folder, module)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the import process: its output to a file, its result as its exit code
                status = 1
                try:
                    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    exec(compile(code, f"<import {module}>", "exec"), {"__name__": "__main__"})
                    status = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(status)
            _, wait_status = os.waitpid(pid, 0)
            FORKED_IMPORTS[module] = (os.waitstatus_to_exitcode(wait_status), Path(out_path).read_text())


def worker_imports():
    """The plugin activated as the launcher does (right after ``core_algos`` is first imported), in
    processes importing verl's worker and driver modules with nothing of verl loaded before (one
    each, see fork_worker_imports): every hook finds its target, and the modules that copied
    ``ppo_loss`` / ``validate_config`` hold the wrapped ones."""
    assert sorted(FORKED_IMPORTS) == sorted(WORKER_MODULES), FORKED_IMPORTS
    for module in WORKER_MODULES:
        returncode, out = FORKED_IMPORTS[module]
        assert returncode == 0, out[-3000:]
        line = next(ln for ln in out.splitlines() if ln.startswith("activated by"))
        assert line.startswith("activated by ['verl.trainer.ppo.core_algos']") and line.endswith(" True"), line
        # applied, or waiting for a module this process has not imported (v1's advantage module)
        assert "'failed'" not in line and line.count("('ppo_loss', 'applied')") == 2, line  # both plugins
        assert "('validate_config', 'applied')" in line, line
        if module.endswith("trainer_base"):
            assert "('compute_advantage_for_multi_trajectories', 'applied')" in line, line
        print(f"{module}: {line}")



def _outcome_batch(rewards, lengths):
    mask = torch.zeros(len(rewards), T, dtype=torch.float32)
    token_rewards = torch.zeros(len(rewards), T, dtype=torch.float32)
    for i, (r, n) in enumerate(zip(rewards, lengths)):
        mask[i, :n] = 1
        token_rewards[i, n - 1] = r
    return token_rewards, mask


def degenerate_groups():
    """All-equal rewards, a group of one, no uid: what Dr-GRPO's estimator does with them."""
    from verl.protocol import DataProto

    verl_dr_grpo.install({})
    ray_trainer = import_trainer_module("verl.trainer.ppo.ray_trainer")
    estimator = core().get_adv_estimator_fn("dr_grpo")
    rewards, mask = _outcome_batch([0.5, 0.5, 0.5, 0.5, 1.0, 0.0, 0.5, 0.25], LENGTHS)
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    adv, _ = estimator(token_level_rewards=rewards, response_mask=mask, index=index)
    want = [0.0] * 4 + [r - 0.4375 for r in (1.0, 0.0, 0.5, 0.25)]  # an all-equal group: 0 everywhere
    assert [float(adv[i, 0]) for i in range(8)] == want, adv[:, 0]
    assert all(float(adv[i, t]) == (want[i] if t < LENGTHS[i] else 0.0) for i in range(8) for t in range(T))

    # a group of one: r - mean(group) = 0 (verl's own estimator passes the raw reward through)
    rewards, mask = _outcome_batch([0.75, 1.0, 0.0, 0.5], [3, 2, 4, 1])
    index = np.array(["alone", "b", "b", "b"], dtype=object)
    err = io.StringIO()
    with redirect_stderr(err):
        adv, _ = estimator(token_level_rewards=rewards, response_mask=mask, index=index)
    assert [float(adv[i, 0]) for i in range(4)] == [0.0, 0.5, -0.5, 0.0], adv[:, 0]
    assert "1 response(s) alone in their group get advantage 0" in err.getvalue(), err.getvalue()
    verl_adv, _ = core().compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=index,
                                                        norm_adv_by_std_in_grpo=False)
    assert float(verl_adv[0, 0]) == 0.75  # what the plugin corrects

    # no uid: verl's trainer passes no index to a registered estimator; refused, not grouped as one
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask})
    expect_refusal("the batch carries no 'uid' (index) to group responses by prompt", ray_trainer.compute_advantage,
                   data, adv_estimator="dr_grpo")
    print("all-equal group -> 0, a group of one -> 0 (verl's estimator: the raw reward), no uid refused")


STAND_INS = []


def _stand_in_attribute(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})


def import_trainer_module(name):
    """Import one of verl's trainer modules for the pure tensor functions it holds.

    A plain ``pip install verl`` lacks modules the trainers' server code imports (TransferQueue,
    verl's ``verl-core`` extra; uvicorn, ...): each missing one is replaced, in this process
    only, by an empty stand-in module and listed in STAND_INS. The functions checked here
    (``compute_advantage``, ``compute_advantage_for_multi_trajectories``) use none of them.
    """
    import importlib
    import types

    for _ in range(20):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name
            if not missing or missing in sys.modules or missing.split(".")[0] == "verl":
                raise
            stub = types.ModuleType(missing)
            stub.__path__ = []
            stub.__getattr__ = _stand_in_attribute
            sys.modules[missing] = stub
            STAND_INS.append(missing)
            for loaded in [m for m in sys.modules if m.startswith("verl.trainer.ppo.ray_trainer")
                           or m.startswith("verl.trainer.ppo.v1")]:
                del sys.modules[loaded]
    raise AssertionError(f"{name}: too many missing modules ({STAND_INS})")


def multi_trajectories():
    """Agent loops returning several outputs per session: ``dr_grpo`` groups session-final outputs as ``grpo`` does."""
    from verl.protocol import DataProto

    v1 = import_trainer_module("verl.trainer.ppo.v1.utils")  # (stand-ins first: the plugin patches v1 where it can run)
    verl_dr_grpo.install({})
    pad = "pad" + "0123456789abcdef" * 2  # verl's synthetic no-op sample (upsample_batch_to_divisible_size)
    keys = ["a_0_0", "a_0_1", "a_1_0", "a_2_0", "a_2_1", "a_2_2", "b_0_0", "b_1_0", "b_1_1", "c_0_0", f"{pad}_0_0"]
    # non-final outputs carry rewards that must not count: only each session's last output does
    rewards = [1.0, 1.0, 0.0, 1.0, 1.0, 0.5, 0.25, 0.0, 1.0, 0.75, 0.0]
    lengths = [3, 2, 4, 1, 5, 2, 6, 3, 2, 4, 1]

    def run(estimator, norm):
        token_rewards, mask = _outcome_batch(rewards, lengths)
        data = DataProto.from_dict(tensors={"token_level_rewards": token_rewards, "response_mask": mask},
                                   non_tensors={"uid": np.array([k.rsplit("_", 2)[0] for k in keys], dtype=object)})
        err = io.StringIO()
        with redirect_stderr(err):
            out = v1.compute_advantage_for_multi_trajectories(data, keys, estimator, norm_adv_by_std_in_grpo=norm)
        return out.batch["advantages"], out.batch["returns"], err.getvalue()

    adv, returns, err = run("dr_grpo", True)  # the trainer's norm flag is verl's; the plugin's (no std) wins
    # session finals: a -> rows 1, 2, 5 (1.0, 0.0, 0.5; mean 0.5), b -> rows 6, 8 (0.25, 1.0; mean 0.625), c alone
    want = [0.5, 0.5, -0.5, 0.0, 0.0, 0.0, -0.375, 0.375, 0.375, 0.0, 0.0]
    assert [float(adv[i, 0]) for i in range(11)] == want, adv[:, 0]
    assert torch.equal(adv, returns) and torch.equal(adv != 0, (adv != 0) & (_outcome_batch(rewards, lengths)[1] > 0))
    assert "1 output(s) of sessions alone in their group get advantage 0" in err, err  # c's, not verl's padding
    grpo, _, _ = run("grpo", False)  # verl's grpo without the std: the same numbers but for the group of one
    assert torch.equal(adv[:9], grpo[:9]) and float(grpo[9, 0]) == 0.75
    print(f"session-final grouping for dr_grpo: {want} (stand-ins for missing server modules: {STAND_INS})")



CASES = {"dr-grpo-numbers": dr_grpo_numbers, "gspo-numbers": gspo_numbers,
         "defaults-equal-plain": defaults_equal_plain, "refusals": refusals,
         "v1-loss-path": v1_loss_path, "legacy-loss-path": legacy_loss_path, "gspo-loss-path": gspo_loss_path, "config-bound": config_bound,
         "degenerate-groups": degenerate_groups, "multi-trajectories": multi_trajectories,
         "worker-imports": worker_imports}

if __name__ == "__main__":
    if "worker-imports" in sys.argv[1:]:
        fork_worker_imports()
    for name in sys.argv[1:]:
        CASES[name]()
        patching.undo_all()
        print(f"ok {name}", flush=True)
    # every case passed: exit without the interpreter's teardown (seconds of freeing torch's and the
    # framework's modules; nothing here needs it). A failed case raised above and exits as usual.
    sys.stderr.flush()
    os._exit(0)
