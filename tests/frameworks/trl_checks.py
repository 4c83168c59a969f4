"""Checks of the TRL plugins against TRL's own GRPOTrainer, run in the TRL trainer venv
(which has no starforge-core: the checkout's cluster-side package is put on sys.path by
the caller, as the job's runtime zip would be).

    python trl_checks.py CASE      CASE: dr-grpo-numbers | gspo-numbers | defaults-equal-plain | refusals

Every case asserts and prints "ok CASE" at the end; a failed assertion exits non-zero.
"""

from __future__ import annotations

import io
import math
import os
import sys
from contextlib import redirect_stderr
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "examples" / "trl"), str(REPO / "forge_plugins" / "trl-dr-grpo"),
                str(REPO / "forge_plugins" / "trl-gspo")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import train_grpo  # noqa: E402  the example's tiny model and tokenizer
import trl_dr_grpo  # noqa: E402
import trl_gspo  # noqa: E402

from starforge import patching  # noqa: E402

PROMPTS = ["say yes", "say no"]
REWARDS = [1.0, 0.0, 0.5, 0.25, 0.75, 0.125, 0.0, 1.0]  # two groups of four, never all equal


def scripted_reward(completions, **kwargs):
    return REWARDS[:len(completions)]


def make_trainer(**config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = train_grpo.build_tokenizer()
    model = train_grpo.build_model(tokenizer)
    options = dict(output_dir=os.environ.get("TMPDIR", "/tmp") + "/trl-checks", max_steps=2,
                   per_device_train_batch_size=8, num_generations=4, max_completion_length=6, learning_rate=1e-2,
                   logging_steps=1, save_strategy="no", report_to=[], seed=0, use_cpu=True, bf16=False,
                   disable_tqdm=True, dataloader_num_workers=0)
    options.update(config)
    args = GRPOConfig(**options)
    return GRPOTrainer(model=model, reward_funcs=scripted_reward, args=args,
                       train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}), processing_class=tokenizer)


def scored_batch(trainer):
    """One generation batch through TRL's own rollout and advantage code."""
    prompts = [{"prompt": p} for p in PROMPTS for _ in range(4)]
    trainer.model.eval()
    with torch.no_grad():
        return trainer._generate_and_score_completions(prompts)


def current_logps(trainer, inputs):
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, mask, inputs["completion_ids"].size(1))
    return logps


def with_offsets(trainer, inputs, deltas):
    """*inputs* whose old log-probs sit *deltas* below the current ones (log-ratio = delta)."""
    cur = current_logps(trainer, inputs)
    delta = torch.tensor(deltas, dtype=cur.dtype)[:, :cur.size(1)]
    return {**inputs, "old_per_token_logps": cur - delta}, delta.double().tolist()


def loss_of(trainer, inputs):
    trainer.model.eval()  # eval: no gradient-accumulation normalizer
    with torch.no_grad():
        return float(trainer._compute_loss(trainer.model, inputs))


def close(a, b, tol=2e-6):
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def close_loss(got, want):
    """Float32 agreement: TRL computes in float32, the hand value in float64; the terms are O(1) and
    cancel (advantages sum to ~0), so the absolute error is bounded by float32 rounding (~1e-7 per term)."""
    return math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6)


def check_group_advantages(adv, std_divided):
    for g in range(2):
        group = REWARDS[4 * g:4 * g + 4]
        mean = sum(group) / 4
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / 3)  # TRL's nanstd: unbiased
        want = [(r - mean) / (std + 1e-4) if std_divided else r - mean for r in group]
        got = adv[4 * g:4 * g + 4]
        assert all(close(x, y) for x, y in zip(got, want)), (got, want)


DELTAS = [[0.1 * ((i + t) % 3 - 1) + 0.05 * i for t in range(6)] for i in range(8)]


def dr_grpo_numbers():
    trl_dr_grpo.install({})
    trainer = make_trainer()
    assert (trainer.scale_rewards, trainer.loss_type) == ("none", "dr_grpo")
    inputs = scored_batch(trainer)
    adv = inputs["advantages"].double().tolist()
    check_group_advantages(adv, std_divided=False)  # r - mean: no std division
    inputs, delta = with_offsets(trainer, inputs, DELTAS)
    mask = inputs["completion_mask"].double().tolist()
    assert len({sum(row) for row in mask}) > 1 or any(d != delta[0][0] for row in delta for d in row)
    total = 0.0
    for i, a in enumerate(adv):
        for t, m in enumerate(mask[i]):
            r = math.exp(delta[i][t])
            total += m * -min(r * a, min(max(r, 0.8), 1.2) * a)
    want = total / (8 * 6)  # sum over tokens / (batch x max_completion_length)
    got = loss_of(trainer, inputs)
    assert close_loss(got, want), (got, want)
    print(f"dr-grpo loss {got!r} = {want!r} (hand)")


def gspo_numbers():
    trl_gspo.install({})
    trainer = make_trainer()
    assert (trainer.importance_sampling_level, trainer.loss_type) == ("sequence", "grpo")
    assert (trainer.epsilon_low, trainer.epsilon_high) == (3e-4, 4e-4)
    inputs = scored_batch(trainer)
    adv = inputs["advantages"].double().tolist()
    check_group_advantages(adv, std_divided=True)  # GSPO keeps GRPO's group-normalized advantages
    # small per-token log-ratios: some responses inside the 3e-4/4e-4 clip range, some outside
    deltas = [[(2e-4 if i % 2 else -5e-4) * (i + 1) / 4 + (1e-3 if t % 2 else -1e-3) for t in range(6)] for i in range(8)]
    inputs, delta = with_offsets(trainer, inputs, deltas)
    mask = inputs["completion_mask"].double().tolist()
    losses, clipped = [], 0
    for i, a in enumerate(adv):
        n = sum(mask[i])
        z = sum(d * m for d, m in zip(delta[i], mask[i])) / n
        s = math.exp(z)  # one ratio per response: exp(mean token log-ratio)
        bounded = min(max(s, 1 - 3e-4), 1 + 4e-4)
        clipped += bounded != s
        losses.append(-min(s * a, bounded * a))  # the same loss on each of its tokens; token mean = this
    assert 0 < clipped < 8, clipped
    want = sum(losses) / 8  # mean over responses of token means
    got = loss_of(trainer, inputs)
    assert close_loss(got, want), (got, want)
    print(f"gspo loss {got!r} = {want!r} (hand), {clipped} of 8 responses clipped")


def train_run():
    trainer = make_trainer()
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    with torch.no_grad():
        weights = [p.detach().clone() for p in trainer.model.parameters()]
    return trainer, losses, weights


def defaults_equal_plain():
    _, plain_losses, plain_weights = train_run()
    for install, params in (
        (trl_dr_grpo.install, {"trl_dr_grpo.scale_rewards": "group", "trl_dr_grpo.loss_type": "dapo"}),
        (trl_gspo.install, {"trl_gspo.importance_sampling_level": "token", "trl_gspo.loss_type": "dapo",
                            "trl_gspo.epsilon": 0.2, "trl_gspo.epsilon_high": 0.2}),
    ):
        install(params)
        trainer, losses, weights = train_run()
        patching.undo_all()
        assert trainer.loss_type == "dapo" and trainer.scale_rewards == "group"
        assert losses == plain_losses, (losses, plain_losses)
        assert all(torch.equal(a, b) for a, b in zip(weights, plain_weights))
    # and the plugins' own defaults do change the run
    trl_dr_grpo.install({})
    _, losses, weights = train_run()
    patching.undo_all()
    assert not all(torch.equal(a, b) for a, b in zip(weights, plain_weights))
    print(f"plain losses {plain_losses!r} reproduced bit for bit with TRL's defaults set through the plugins")


def refusals():
    trl_dr_grpo.install({})
    try:
        make_trainer(loss_type="bnpo")
    except ValueError as exc:
        assert "GRPOConfig(loss_type='bnpo') conflicts with the plugin's loss_type='dr_grpo'" in str(exc), exc
    else:
        raise AssertionError("a conflicting GRPOConfig loss_type was not refused")
    patching.undo_all()

    trl_gspo.install({"trl_gspo.epsilon": 0.2, "trl_gspo.epsilon_high": 0.2})
    err = io.StringIO()
    with redirect_stderr(err):
        trainer = make_trainer()
    assert "trl-gspo: warning: epsilon=0.2/0.2 is token-scale" in err.getvalue(), err.getvalue()
    inputs = scored_batch(trainer)
    per_token = inputs["advantages"].unsqueeze(1).expand(-1, inputs["completion_ids"].size(1)).clone()
    try:
        loss_of(trainer, {**inputs, "advantages": per_token})
    except ValueError as exc:
        assert "per-token advantages" in str(exc), exc
    else:
        raise AssertionError("per-token advantages were not refused at the sequence level")
    patching.undo_all()
    print("refused: conflicting loss_type, per-token advantages; warned: token-scale epsilon")


def expect_refusal(message, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ValueError as exc:
        assert message in str(exc), exc
        return
    raise AssertionError(f"not refused: {message}")


def grads_of(trainer, inputs):
    """The parameter gradient of TRL's loss on *inputs* (eval mode: no accumulation normalizer)."""
    trainer.model.eval()
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, inputs).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])


def gspo_seed_fidelity():
    """The sequence log-ratio capped at 10 from above (TRL's is not), no dual clip, the inert-knob warnings."""
    trl_gspo.install({})
    err = io.StringIO()
    with redirect_stderr(err):
        trainer = make_trainer()
    assert "trl-gspo: warning: num_iterations=1 with one optimizer step per generation" in err.getvalue(), err.getvalue()
    inputs = scored_batch(trainer)
    adv = inputs["advantages"].double().tolist()
    assert adv[1] < 0  # a negative advantage: only the cap bounds its term
    # response 1: mean token log-ratio 12 (> 10: capped); response 5: 9.5 (< 10: left alone); others small
    deltas = [[12.0 if i == 1 else 9.5 if i == 5 else (2e-4 if i % 2 else -5e-4) * (i + 1) / 4 for _ in range(6)]
              for i in range(8)]
    inputs, delta = with_offsets(trainer, inputs, deltas)
    mask = inputs["completion_mask"].double().tolist()
    want, unclamped = 0.0, 0.0
    for i, a in enumerate(adv):
        z = sum(d * m for d, m in zip(delta[i], mask[i])) / sum(mask[i])
        for cap, acc in ((MAX_LOG_RATIO, "want"), (float("inf"), "unclamped")):
            s = math.exp(min(z, cap))
            term = -min(s * a, min(max(s, 1 - 3e-4), 1 + 4e-4) * a) / 8
            if acc == "want":
                want += term
            else:
                unclamped += term
    got = loss_of(trainer, inputs)
    assert close_loss(got, want) and not close_loss(got, unclamped), (got, want, unclamped)
    # the capped response carries no gradient through its ratio: zeroing its advantage changes nothing
    g = grads_of(trainer, inputs)
    zeroed = inputs["advantages"].clone()
    zeroed[1] = 0.0
    g0 = grads_of(trainer, {**inputs, "advantages": zeroed})
    assert torch.allclose(g, g0, rtol=1e-5, atol=1e-7), float((g - g0).abs().max())
    zeroed[5] = 0.0  # while the uncapped one does
    assert not torch.allclose(g0, grads_of(trainer, {**inputs, "advantages": zeroed}), rtol=1e-5, atol=1e-7)
    before = inputs["old_per_token_logps"].clone()
    loss_of(trainer, inputs)
    assert torch.equal(before, inputs["old_per_token_logps"])
    patching.undo_all()

    trl_gspo.install({})
    expect_refusal("GRPOConfig(delta=1.5) adds a two-sided (dual) clip", make_trainer, delta=1.5)
    err = io.StringIO()
    with redirect_stderr(err):
        try:
            make_trainer(bf16=True)
        except (ValueError, RuntimeError) as exc:  # a CPU without bf16 support: the warning came first
            print(f"(bf16 trainer not built here: {exc})")
    assert "trl-gspo: warning: bf16=True: log-probs carry bf16 rounding" in err.getvalue(), err.getvalue()
    patching.undo_all()
    print(f"gspo capped loss {got!r} = {want!r} (hand; uncapped would be {unclamped!r}); capped response has no "
          "gradient; delta refused; on-policy and bf16 warned")


def dr_grpo_seed_fidelity():
    """Refusals of TRL options that break Dr-GRPO, and the degenerate groups."""
    trl_dr_grpo.install({})
    expect_refusal("GRPOConfig(multi_objective_aggregation='normalize_then_sum') ignores scale_rewards='none'",
                   make_trainer, multi_objective_aggregation="normalize_then_sum")
    for bound in (0, -4, True, None):  # refused before TRL's own init sees them
        expect_refusal(f"GRPOConfig(max_completion_length={bound!r}) is not a positive whole number",
                       make_trainer, max_completion_length=bound)
    # an all-equal group: advantage 0 (no std division, nothing to divide by zero)
    trainer = make_trainer()
    global REWARDS
    saved, REWARDS = REWARDS, [0.5] * 4 + REWARDS[4:]
    try:
        adv = scored_batch(trainer)["advantages"].double().tolist()
    finally:
        REWARDS = saved
    assert adv[:4] == [0.0] * 4, adv
    check = [r - sum(REWARDS[4:]) / 4 for r in REWARDS[4:]]
    assert all(close(x, y) for x, y in zip(adv[4:], check)), (adv, check)
    # a group of one: TRL refuses it itself
    try:
        make_trainer(num_generations=1, per_device_train_batch_size=2)
    except ValueError as exc:
        assert "GRPO requires at least 2 generations per prompt" in str(exc), exc
    else:
        raise AssertionError("num_generations=1 not refused")
    patching.undo_all()
    print("refused: normalize_then_sum, max_completion_length 0/-4/True/None, num_generations=1 (TRL); "
          "all-equal group -> 0")


MAX_LOG_RATIO = 10.0


CASES = {"dr-grpo-numbers": dr_grpo_numbers, "gspo-numbers": gspo_numbers,
         "defaults-equal-plain": defaults_equal_plain, "refusals": refusals,
         "gspo-seed-fidelity": gspo_seed_fidelity, "dr-grpo-seed-fidelity": dr_grpo_seed_fidelity}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        CASES[name]()
        patching.undo_all()
        print(f"ok {name}", flush=True)
    # every case passed: exit without the interpreter's teardown (seconds of freeing torch's and the
    # framework's modules; nothing here needs it). A failed case raised above and exits as usual.
    sys.stderr.flush()
    os._exit(0)
