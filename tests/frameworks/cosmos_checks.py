"""Checks of the Cosmos-RL plugins against Cosmos-RL's own code, run in the Cosmos venv (no
starforge-core there: the caller puts the checkout's cluster-side package on ``PYTHONPATH``).

    python cosmos_checks.py CASE...    CASE: dr-grpo-numbers | gspo-numbers | refusals | dp-ranks | reward-pool

This script's process imports neither torch nor cosmos_rl: it starts one spawn pool worker (a
fresh interpreter, with ``cosmos_cpu/`` first on its ``PYTHONPATH``, whose ``sitecustomize``
lets ``cosmos_rl`` import on CPU and applies ``cosmos-dr-grpo`` when it is imported, as a job's
bootstrap does in every process) and runs the cases there, so ``cosmos_rl`` is imported once.
With ``reward-pool``, that worker first computes advantages with Cosmos-RL's reward calculator
before anything else touches the plugin: the spawn half of that case.

The losses are Cosmos-RL's ``compute_loss`` (as its trainer calls it) on hand-made batches in
float64, the advantages its rule-based algo registry through its reward calculator's
grouping; both are compared with values computed here by hand. Every case prints
"ok CASE"; a failed assertion exits non-zero.
"""

from __future__ import annotations

import io
import math
import os
import sys
import tempfile
from contextlib import redirect_stderr
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PLUGIN_DIRS = [str(REPO / "forge_plugins" / "cosmos-dr-grpo"), str(REPO / "forge_plugins" / "cosmos-gspo")]
sys.path[:0] = PLUGIN_DIRS + [str(HERE / "cosmos_cpu")]

import cosmos_toy  # noqa: E402


def checks(names):
    """In the spawn pool's worker (this module imported as ``__mp_main__``, cosmos_rl with it): the cases."""
    import multiprocessing

    if "reward-pool" in names:
        SPAWNED.extend(spawned_advantages())  # first: the plugin as the worker's import applied it
    patching.undo_all()
    # a spawned worker inherits its start method; a Cosmos-RL process its launcher starts has the
    # platform's (fork on Linux), which its reward dispatcher's pool uses
    multiprocessing.set_start_method("fork", force=True)
    for name in names:
        CASES[name]()
        patching.undo_all()
        print(f"ok {name}", flush=True)
    atexit.register(leave)
    return names


def leave():
    """The worker's exit, once its results are sent: without the interpreter's teardown (seconds of
    freeing torch's and Cosmos-RL's modules; nothing of theirs needs it here)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    os.environ["COSMOS_TEST_PLUGINS"] = "cosmos_dr_grpo"  # the worker's sitecustomize applies it at import
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE / "cosmos_cpu"), *PLUGIN_DIRS,
                                                os.environ.get("PYTHONPATH", "")])
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        assert pool.submit(checks, sys.argv[1:]).result() == sys.argv[1:]
    sys.exit(0)

import atexit  # noqa: E402

import cosmos_dr_grpo  # noqa: E402
import cosmos_gspo  # noqa: E402
import torch  # noqa: E402
from cosmos_rl.policy.config import Config  # noqa: E402
from cosmos_rl.policy.trainer.llm_trainer import grpo_trainer  # noqa: E402

from starforge import patching  # noqa: E402

BOUND = 8  # rollout.max_response_length: Dr-GRPO's divisor
GROUPS = [[1.0, 0.0, 0.5, 0.25], [0.0, 0.75, 1.0, 0.5]]  # two prompts' completions' rewards
#: r - mean(group), exact in float32 (means 0.4375 and 0.5625)
CENTRED = [0.5625, -0.4375, 0.0625, -0.1875, -0.5625, 0.1875, 0.4375, -0.0625]
LENGTHS = [3, 5, 2, 4]
ADV = CENTRED[:4]


def raw(policy=None, **sections):
    """A Cosmos-RL config table as its TOML file would give it."""
    data = {"train": {"output_dir": tempfile.gettempdir(), "timestamp": "checks",
                      "train_policy": {"type": "grpo", **(policy or {})}},
            "rollout": {"max_response_length": BOUND}, "policy": {"model_name_or_path": cosmos_toy.MODEL}}
    for name, table in sections.items():
        data.setdefault(name, {}).update(table)
    return data


def parse(policy=None, **sections):
    """``Config.from_dict`` of :func:`raw`; returns (config, what it printed on stderr)."""
    err = io.StringIO()
    with redirect_stderr(err):
        config = Config.from_dict(raw(policy, **sections))
    return config, err.getvalue()


def refused(message, policy=None, **sections):
    try:
        parse(policy, **sections)
    except ValueError as exc:
        assert message in str(exc), (message, str(exc))
        return str(exc)
    raise AssertionError(f"not refused: {message}")


def close(a, b, tol=1e-12):
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def batch(deltas, lengths, advantages):
    """Flat per-token log-probs as Cosmos-RL's trainer passes them: (current leaf, old, advantages, cu_seqlens, mask).

    current - old = deltas exactly (float64, old chosen so the differences are representable).
    """
    width = max(lengths)
    old = torch.tensor([-1.0 - 0.125 * (t % 4) for n in lengths for t in range(n)], dtype=torch.float64)
    delta = torch.tensor([d for row, n in zip(deltas, lengths) for d in row[:n]], dtype=torch.float64)
    current = (old + delta).detach().requires_grad_(True)
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    adv = torch.zeros(len(lengths), width, dtype=torch.float64)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
        adv[i, :] = advantages[i]
    cu = torch.tensor([0] + [sum(lengths[:i + 1]) for i in range(len(lengths))], dtype=torch.int64)
    return current, old, adv, cu, mask


def loss_of(config, current, old, adv, cu, mask, **kwargs):
    """Cosmos-RL's compute_loss as its trainer looks it up (the module attribute, at call time)."""
    loss, per_token, kl = grpo_trainer.compute_loss(current, old, None, adv, cu, config, mask, **kwargs)
    return loss


def token_level_loss(deltas, lengths, advantages, eps_low=0.2, eps_high=0.2, lower_bound_ratio=3.0):
    """Per-token losses of Cosmos-RL's clipped GRPO surrogate (dual clip for A < 0), and d loss_t / d logp_t."""
    losses, grads = [], []
    for row, n, a in zip(deltas, lengths, advantages):
        for d in row[:n]:
            r = math.exp(min(max(d, -20.0), 20.0))
            bounded = min(max(r, 1 - eps_low), 1 + eps_high)
            clip1 = -min(r * a, bounded * a)
            unclipped = r * a <= bounded * a
            loss = min(-lower_bound_ratio * a, clip1) if a < 0 else clip1
            dual = a < 0 and -lower_bound_ratio * a < clip1
            losses.append(loss)
            grads.append(0.0 if dual or not unclipped else -a * r)
    return losses, grads


DR_DELTAS = [[0.1 * ((i + 2 * t) % 7 - 3) for t in range(5)] for i in range(4)]  # some beyond the 0.2 clip


def dr_grpo_numbers():
    cosmos_dr_grpo.install({})
    config, err = parse()
    assert "cosmos-dr-grpo: train_policy algo='dr_grpo', unbiased_advantage=True, loss_type='seq-mean-token-mean', " \
           f"unbiased_loss_max_tokens={BOUND} (filled in)" in err, err
    err = io.StringIO()
    with redirect_stderr(err):  # the whole config, as the controller hands it to its workers, agrees as it is
        again = Config.from_dict(config.model_dump())
    assert err.getvalue() == "" and again.train.train_policy == config.train.train_policy, err.getvalue()
    current, old, adv, cu, mask = batch(DR_DELTAS, LENGTHS, ADV)
    loss = loss_of(config, current, old, adv, cu, mask)
    loss.backward()
    losses, grads = token_level_loss(DR_DELTAS, LENGTHS, ADV)
    n_seq = len(LENGTHS)
    want = sum(losses) / BOUND / n_seq  # token-loss sums / generation bound / number of responses
    assert close(float(loss), want), (float(loss), want)
    assert sum(g == 0.0 for g in grads) > 0  # the clip acts on some tokens
    for t, g in enumerate(grads):
        assert close(float(current.grad[t]), g / BOUND / n_seq), (t, float(current.grad[t]), g / BOUND / n_seq)
    # Cosmos-RL's own path with the same settings, no plugin: bit for bit
    patching.undo_all()
    own = loss_of(config, *batch(DR_DELTAS, LENGTHS, ADV)[:1], old, adv, cu, mask)
    assert torch.equal(own.detach(), loss.detach()), (own, loss)
    cosmos_dr_grpo.install({})
    # two mini-batches of one optimizer step, each loss scaled by its share of the batch as the trainer does
    total, grad = 0.0, []
    for part in (slice(0, 2), slice(2, 4)):
        lengths = LENGTHS[part]
        c, o, a, q, m = batch(DR_DELTAS[part], lengths, ADV[part])
        part_loss = loss_of(config, c, o, a, q, m) * (len(lengths) / n_seq)
        part_loss.backward()
        total += float(part_loss)
        grad += c.grad.tolist()
    assert close(total, want), (total, want)
    assert all(close(g, float(h)) for g, h in zip(grad, current.grad)), (grad, current.grad.tolist())
    print(f"dr-grpo loss {float(loss)!r} = {want!r} (hand: token-loss sum / {BOUND} / {n_seq}); "
          f"Cosmos-RL's own path bit for bit; two mini-batches {total!r}")


GSPO_LENGTHS = [3, 5, 2, 4, 2]
GSPO_ADV = [0.5625, -0.4375, 0.0625, -0.1875, -0.25]
#: per-response mean log-ratios around the 3e-4/4e-4 clip: inside, below (A < 0: clipped), above (A > 0: clipped),
#: inside, and one beyond the cap of 10 with a negative advantage
GSPO_MEANS = [1e-4, -6e-4, 6e-4, 2e-4, 12.0]


def gspo_deltas():
    rows = []
    for z, n in zip(GSPO_MEANS, GSPO_LENGTHS):
        wiggle = [(2e-3 if t % 2 else -2e-3) for t in range(n)]
        if n % 2:
            wiggle[-1] = 0.0
        rows.append([z + w for w in wiggle])
    return rows


def gspo_numbers():
    cosmos_gspo.install({})
    config, err = parse({"mu_iterations": 2})
    assert "cosmos-gspo: train_policy variant='gspo', loss_type='seq-mean-token-mean', epsilon_low=0.0003, " \
           "epsilon_high=0.0004 (filled in)" in err, err
    assert "warning" not in err, err
    deltas = gspo_deltas()
    current, old, adv, cu, mask = batch(deltas, GSPO_LENGTHS, GSPO_ADV)
    loss = loss_of(config, current, old, adv, cu, mask)
    loss.backward()
    per_seq, grads, clipped, capped = [], [], 0, 0
    n_seq = len(GSPO_LENGTHS)
    for row, n, a in zip(deltas, GSPO_LENGTHS, GSPO_ADV):
        z = sum(row[:n]) / n
        cap = z > 10.0
        s = math.exp(min(z, 10.0))
        bounded = min(max(s, 1 - 3e-4), 1 + 4e-4)
        cut = s * a > bounded * a  # the clipped branch of -min(sA, clip(s)A) holds: no gradient
        clipped += cut
        capped += cap
        per_seq.append(-min(s * a, bounded * a))  # seq-mean-token-mean of a value shared by the response's tokens
        # stop-gradient token form: d/dlogp_t of sg[z] + logp_t - sg[logp_t]; 0 above the cap
        grads += [0.0 if cut or cap else -a * s / n / n_seq] * n
    assert (clipped, capped) == (2, 1), (clipped, capped)
    want = sum(per_seq) / n_seq
    assert close(float(loss), want), (float(loss), want)
    for t, g in enumerate(grads):
        assert close(float(current.grad[t]), g), (t, float(current.grad[t]), g)
    # on-policy (old = current): the sequence level equals the token level in value and gradient under every loss_type
    policy = config.train.train_policy
    for loss_type in ("seq-mean-token-mean", "seq-mean-token-sum", "token-mean", "token-sum"):
        runs = []
        for variant in ("gspo", "grpo"):
            policy.variant, policy.loss_type = variant, loss_type
            c, o, a, q, m = batch(deltas, GSPO_LENGTHS, GSPO_ADV)
            on_policy = c.detach().clone()
            value = loss_of(config, c, on_policy, a, q, m)
            value.backward()
            runs.append((value.detach(), c.grad))
        (v1, g1), (v2, g2) = runs
        assert torch.equal(v1, v2), (loss_type, v1, v2)
        assert all(close(float(x), float(y)) for x, y in zip(g1, g2)), (loss_type, g1, g2)
    print(f"gspo loss {float(loss)!r} = {want!r} (hand), 2 of {n_seq} responses clipped, 1 capped at 10, "
          "gradients of the stop-gradient form; on-policy equal to the token level under every loss_type")


def refusals():
    cosmos_dr_grpo.install({})
    for policy, sections, message in (
        ({"algo": "grpo"}, {}, "train.train_policy.algo='grpo' conflicts with Dr-GRPO's 'dr_grpo'"),
        ({"unbiased_advantage": False}, {}, "train.train_policy.unbiased_advantage=False conflicts"),
        ({"loss_type": "token-mean"}, {}, "reads unbiased_loss_max_tokens (Dr-GRPO's divisor) under no other loss_type"),
        ({"unbiased_loss_max_tokens": 4}, {}, "train.train_policy.unbiased_loss_max_tokens=4 conflicts with Dr-GRPO's 8"),
        ({}, {"rollout": {"max_response_length": 0}}, "rollout.max_response_length=0 is not a positive whole number"),
    ):
        refused(message, policy, **sections)
    config, err = parse({"unbiased_loss_max_tokens": BOUND, "loss_type": "seq-mean-token-mean"})
    assert "algo='dr_grpo', unbiased_advantage=True (filled in)" in err, err
    # the loss's backstop, for a config built without from_dict, and a response longer than the bound
    bypass = Config.model_validate(raw({"algo": "dr_grpo", "unbiased_advantage": True}))
    current, old, adv, cu, mask = batch(DR_DELTAS, LENGTHS, ADV)
    for cfg, lengths, message in ((bypass, LENGTHS, "loss_type='token-mean' with algo 'dr_grpo'"),
                                  (config, [3, 9], "a response of 9 tokens is longer than rollout.max_response_length=8")):
        c, o, a, q, m = batch([[0.0] * 9] * 2, lengths, ADV[:2]) if lengths != LENGTHS else (current, old, adv, cu, mask)
        try:
            loss_of(cfg, c, o, a, q, m)
        except ValueError as exc:
            assert message in str(exc), exc
        else:
            raise AssertionError(f"not refused: {message}")
    patching.undo_all()

    cosmos_gspo.install({})
    for policy, sections, message in (
        ({"variant": "dapo"}, {}, "train.train_policy.variant='dapo': GSPO is Cosmos-RL's 'gspo' variant"),
        ({"lower_bound_ratio": 5.0}, {}, "lower_bound_ratio=5.0 is Cosmos-RL's dual clip, which GSPO does not have"),
        ({"aipo_rho": 4.0}, {}, "aipo_rho=4.0 replaces the clipped surrogate"),
        ({}, {"distillation": {"enable": True}}, "distillation.enable=true gives per-token (teacher) advantages"),
    ):
        refused(message, policy, **sections)
    config, err = parse({"epsilon_low": 0.2, "loss_type": "token-mean"}, train={"logprob_dtype": "bfloat16"})
    policy = config.train.train_policy
    assert (policy.variant, policy.loss_type, policy.epsilon_low, policy.epsilon_high) == \
        ("gspo", "token-mean", 0.2, 4e-4), policy  # the configured reduction and epsilon are kept
    for warning in ("cosmos-gspo: warning: clip range epsilon_low=0.2/epsilon_high=0.0004 is token-scale",
                    "cosmos-gspo: warning: mu_iterations=1 with one optimizer step per batch",
                    "cosmos-gspo: warning: train.logprob_dtype='bfloat16'"):
        assert warning in err, (warning, err)
    # the whole config as the controller hands it to its workers (every default written out) parses again
    again = Config.from_dict(config.model_dump())
    assert again.train.train_policy.variant == "gspo"
    # per-token advantages: values that differ within a response
    current, old, adv, cu, mask = batch(DR_DELTAS, LENGTHS, ADV)
    adv[1, 2] += 0.5
    try:
        loss_of(config, current, old, adv, cu, mask)
    except ValueError as exc:
        assert "per-token advantages (values differ within a response)" in str(exc), exc
    else:
        raise AssertionError("per-token advantages not refused")
    print("refused: Dr-GRPO's disagreeing algo/advantage/loss_type/divisor, GSPO's variant/dual clip/AIPO/"
          "distillation/per-token advantages; warned: token-scale clip, on-policy ratio, bf16 log-probs")


LENGTHS8 = LENGTHS + [1, 5, 3, 2]
DR_DELTAS8 = [[0.1 * ((i + 2 * t) % 7 - 3) for t in range(5)] for i in range(8)]  # some beyond the 0.2 clip
ON_POLICY8 = [[0.0] * 5 for _ in range(8)]  # ratio exactly 1: every token's loss is -A, exact in binary
#: (name, deltas, per rank: its responses split into optimizer steps, each into mini-batches, batch_size_per_optimize,
#: mu_iterations, exact): how Cosmos-RL's step loop may split one batch over two data-parallel ranks
LAYOUTS = (
    # the ranks hold 3 and 1 responses, one mini-batch each
    ("3 + 1 responses", DR_DELTAS8, [[[[0, 1, 2]]], [[[3]]]], None, 1, False),
    # 4 + 4 responses, two optimizer steps of 3 and 1 per rank, the first split 2 + 1 on one rank and 1 + 2 on the
    # other (token-balanced mini-batches differ by rank), two mu iterations
    ("4 + 4 responses, optimizer steps of 3 and 1, mini-batches 2 + 1 and 1 + 2, mu 2", DR_DELTAS8,
     [[[[0, 1], [2]], [[3]]], [[[4], [5, 6]], [[7]]]], 3, 2, False),
    # pipeline parallelism: the last stage calls the loss per micro-batch (a tuple) with the mini-batch's counts; 4 + 4
    # responses, mini-batches 3 + 1 and 1 + 3, each 3 in micro-batches 2 + 1
    ("4 + 4 responses, pipeline micro-batches (2 + 1) + 1 and 1 + (1 + 2)", DR_DELTAS8,
     [[[([0, 1], [2]), [3]]], [[[4], ([5], [6, 7])]]], None, 1, False),
    # 4 + 3 responses (replicas' batches may differ), optimizer steps of 2, each rank's first in pipeline micro-batches
    # 1 + 1, two mu iterations: a repeated mini-batch's counts do not move the loss calls' place in the batch
    ("4 + 3 responses, optimizer steps of 2, pipeline micro-batches 1 + 1 first, mu 2", DR_DELTAS8,
     [[[([0], [1])], [[2, 3]]], [[([4], [5])], [[6]]]], 2, 2, False),
    # 4 + 4 responses, one optimizer step, mini-batches 2 + 1 + 1 and 1 + 1 + 2: every divisor and share a power of
    # two, so on-policy (per-token loss -A) every operation is exact
    ("4 + 4 responses on-policy, mini-batches 2 + 1 + 1 and 1 + 1 + 2", ON_POLICY8,
     [[[[0, 1], [2], [3]]], [[[4], [5], [6, 7]]]], None, 1, True),
)


def sub_batch(leaf, offsets, deltas, indices):
    """Responses *indices* of the 8-response batch: their slice of the one leaf (gradients land there) and the rest."""
    _, old, adv, cu, mask = batch([deltas[i] for i in indices], [LENGTHS8[i] for i in indices],
                                  [CENTRED[i] for i in indices])
    current = torch.cat([leaf[offsets[i]:offsets[i] + LENGTHS8[i]] for i in indices])
    return current, old, adv, cu, mask


def flat(minibatch):
    """The responses of a mini-batch (a tuple: its pipeline micro-batches)."""
    return [i for micro in minibatch for i in micro] if isinstance(minibatch, tuple) else minibatch


def trainer_step(trainer, rollouts, inter_policy_nccl, steps, mu, leaf, offsets, deltas):
    """What Cosmos-RL's ``GRPOTrainer.step_training`` does with the losses, its model, data packer and CUDA parts aside
    (it cannot run on CPU): per mu iteration, per optimizer step, per mini-batch, ``compute_loss`` looked up on its
    module, times the mini-batch's share of the optimizer step (``loss_scaling_factor``), backward; the optimizer
    step takes the gradient. Under pipeline parallelism (a mini-batch given as a tuple of micro-batches) the last
    stage's calls, one per micro-batch with the mini-batch's ``normalization_counts``, each times the share, summed.
    Returns each optimizer step's (loss, gradient), for every mu iteration."""
    config, out = trainer.config, []
    for _ in range(mu):
        for minibatches in steps:
            size, total = sum(len(flat(m)) for m in minibatches), 0.0
            for minibatch in minibatches:
                share = len(flat(minibatch)) / size
                if isinstance(minibatch, tuple):  # pipeline: one call per micro-batch, the mini-batch's counts
                    counts = {"sequences": len(flat(minibatch)), "tokens": None, "dp_workers": 1}
                    losses = [loss_of(config, *sub_batch(leaf, offsets, deltas, micro), dp_group=trainer.dp_group,
                                      normalization_counts=counts) * share for micro in minibatch]
                    loss = torch.sum(torch.stack(losses))
                else:
                    c, o, a, q, m = sub_batch(leaf, offsets, deltas, minibatch)
                    loss = loss_of(config, c, o, a, q, m, dp_group=trainer.dp_group) * share
                loss.backward()
                total += float(loss.detach())
            out.append((total, leaf.grad.tolist()))
            leaf.grad = None
    return out


def _dp_rank(rank, world, store_path, queue):
    """One data-parallel rank of a gloo group of *world* processes: every layout's steps through the plugin's
    wrap of ``step_training`` (the counts agreed with the other rank), then without it (each loss call's own
    count reduced, what a trainer that replaces step_training gets)."""
    from types import SimpleNamespace

    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    try:
        results = []
        for name, deltas, ranks, per_optimize, mu, _ in LAYOUTS:
            config, _ = parse({"mu_iterations": mu})
            group = dist.group.WORLD
            trainer = SimpleNamespace(config=config, batch_size_per_optimize=per_optimize, device=torch.device("cpu"),
                                      parallel_dims=SimpleNamespace(dp_enabled=True,
                                                                    mesh={"dp": SimpleNamespace(get_group=lambda: group)}),
                                      dp_group=group)
            steps = ranks[rank]
            rollouts = [i for minibatches in steps for m in minibatches for i in flat(m)]
            runs = []
            for wrapped in (True, False):
                leaf, *_ = batch(deltas, LENGTHS8, CENTRED)
                offsets = [sum(LENGTHS8[:i]) for i in range(8)]
                args = (trainer, rollouts, None, steps, mu, leaf, offsets, deltas)
                if wrapped:
                    runs.append(cosmos_dr_grpo.step_hook("dr_grpo")(
                        lambda t, rollouts, inter_policy_nccl: trainer_step(t, rollouts, inter_policy_nccl, *args[3:]),
                        trainer, rollouts=rollouts, inter_policy_nccl=None))
                else:
                    runs.append(trainer_step(*args))
            results.append(runs)
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


def dp_ranks():
    """Two data-parallel ranks (real gloo collectives, forked processes) splitting one batch unevenly, by the
    layouts above: through the plugin's wrap of Cosmos-RL's ``step_training`` each optimizer step's loss and
    gradient averaged over the ranks (what FSDP's reduction does) equal the one-process loss of that step's
    responses (bit for bit in the exact layout); each loss call's own count reduced over the ranks does not."""
    import multiprocessing as mp

    cosmos_dr_grpo.install({})
    ctx = mp.get_context("fork")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        queue = ctx.Queue()
        procs = [ctx.Process(target=_dp_rank, args=(r, 2, os.path.join(tmp, "store"), queue)) for r in range(2)]
        for p in procs:
            p.start()
        for _ in procs:
            rank, runs = queue.get(timeout=120)
            results[rank] = runs
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0, p.exitcode
    shown = []
    for (name, deltas, ranks, per_optimize, mu, exact), run0, run1 in zip(LAYOUTS, results[0], results[1]):
        config, _ = parse({"mu_iterations": mu})
        # the one-process value of each optimizer step: its responses on every rank in one loss call
        wanted = []
        for k in range(len(ranks[0])):
            indices = [i for steps in ranks for m in steps[k] for i in flat(m)]
            leaf, *_ = batch(deltas, LENGTHS8, CENTRED)
            c, o, a, q, m = sub_batch(leaf, [sum(LENGTHS8[:i]) for i in range(8)], deltas, indices)
            loss = loss_of(config, c, o, a, q, m)
            loss.backward()
            wanted.append((float(loss.detach()), leaf.grad.tolist()))
        wanted *= mu
        if exact:  # by hand: each response's token losses are -A, so sum(-A * length) / bound / 8 responses
            hand = sum(-CENTRED[i] * LENGTHS8[i] for i in range(8)) / BOUND / 8
            assert wanted[0][0] == hand, (name, wanted[0][0], hand)
        (wrapped0, own0), (wrapped1, own1) = run0, run1
        for (l0, g0), (l1, g1), (want, grad) in zip(wrapped0, wrapped1, wanted):
            averaged, grads = (l0 + l1) / 2, [(x + y) / 2 for x, y in zip(g0, g1)]
            if exact:
                assert averaged == want and grads == grad, (name, averaged, want, grads, grad)
            else:
                assert close(averaged, want), (name, averaged, want)
                assert all(close(x, y) for x, y in zip(grads, grad)), (name, grads, grad)
        own = [(l0 + l1) / 2 for (l0, _), (l1, _) in zip(own0, own1)]
        if len(ranks[0][0]) > 1:  # several mini-batches: each call's own count weighs the ranks' shares wrongly
            assert not close(own[0], wanted[0][0], 1e-6), (name, own, wanted)
        shown.append(f"{name}: {wanted[0][0]!r}" + (" bit for bit" if exact else "") +
                     ("" if len(ranks[0][0]) == 1 else f" (per-call counts: {own[0]!r})"))
    print("dp ranks (gloo), one optimizer step's averaged loss = one-process value: " + "; ".join(shown))


def _payloads():
    from cosmos_rl.dispatcher.data.schema import RLPayload

    return [RLPayload(prompt=f"prompt {i}", prompt_idx=i, reference_answer="",
                      completions=[repr(r) for r in rewards]) for i, rewards in enumerate(GROUPS)]


def _advantages(payloads):
    return [a for p in sorted(payloads, key=lambda p: p.prompt_idx) for a in p.advantages]


#: what :func:`spawned_advantages` computed, for :func:`reward_pool`
SPAWNED: list = []


def spawned_advantages():
    """In this spawn pool worker, before any case installs or undoes a plugin: Cosmos-RL's own calculator
    (set up as its dispatcher's workers are) and ``compute_rewards``, with the registry entry the plugin
    made when this fresh interpreter imported cosmos_rl."""
    from cosmos_rl.dispatcher.algo.base import REGISTERED_ALGOs
    from cosmos_rl.reward.dispatcher import RewardDispatcher

    assert sys.modules["__main__"].__name__ == "__mp_main__", "not a spawned process"
    assert "dr_grpo" in REGISTERED_ALGOs, "the plugin was not applied when this process imported cosmos_rl"
    cosmos_toy.register_tokenizer()
    config, _ = parse()
    cosmos_toy.calculator_init(config)
    spawned, _, _ = RewardDispatcher.compute_rewards(_payloads(), False, 0)
    return _advantages(spawned)


def reward_pool():
    """Dr-GRPO's advantages from Cosmos-RL's reward worker pool: its own dispatcher's pool (fork, the
    platform's start method) and a spawn pool's worker (this process: see :func:`spawned_advantages`), which
    got the plugin when it imported cosmos_rl, as every process of a job does."""
    import multiprocessing as mp
    import time

    from cosmos_rl.reward.dispatcher import RewardDispatcher

    cosmos_dr_grpo.install({})
    cosmos_toy.register_tokenizer()
    config, _ = parse()
    dispatcher = RewardDispatcher(payload_per_task=1)
    dispatcher.setup(config=config, reward_fns=[cosmos_toy.reward], num_workers=1)
    assert mp.get_start_method() == "fork"
    dispatcher.enqueue_rewards_cal(_payloads(), False, 0)
    forked, deadline = [], time.monotonic() + 120
    while len(forked) < len(GROUPS) and time.monotonic() < deadline:
        payloads, _, _, done = dispatcher.dequeue_rewards_cal()
        forked += payloads or []
        time.sleep(0.05 if payloads is None else 0)
    dispatcher.shutdown()
    assert _advantages(forked) == CENTRED, _advantages(forked)

    assert SPAWNED == CENTRED, SPAWNED  # computed first in this spawned worker
    print(f"reward pool advantages (fork and spawn) {CENTRED} = r - mean(group), no std division")


CASES = {"dr-grpo-numbers": dr_grpo_numbers, "gspo-numbers": gspo_numbers, "refusals": refusals,
         "dp-ranks": dp_ranks, "reward-pool": reward_pool}
