"""The first-party reference plugins (forge_plugins/) and the recipe built-in, on hand-computed cases.

Inputs are chosen so every expected value is exactly representable (rewards in quarters,
group standard deviations that are powers of two, log-probabilities in halves), and are
compared with ``==``. Where a value is not representable, the expectation is written out
in the test with the same float operations, and the test says so.
"""

from __future__ import annotations

import math

import pytest
from reference_plugins import PLUGIN_DIRS, install, manifest, recipe_module

from starforge import patching

# Group 1: mean 0.5, deviations [0.5, -0.25, -0.25, 0.25, -0.25, 0, 0, 0], population std 0.25.
# Group 2: mean 0.5, deviations ±0.5, std 0.5.
REWARDS = [1.0, 0.25, 0.25, 0.75, 0.25, 0.5, 0.5, 0.5] + [0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
GRPO_ADV = [2.0, -1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0] + [-1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0]
CENTRED = [0.5, -0.25, -0.25, 0.25, -0.25, 0.0, 0.0, 0.0] + [-0.5, -0.5, 0.5, 0.5, -0.5, 0.5, -0.5, 0.5]


@pytest.fixture
def alg(monkeypatch):
    """``toy_grpo.algorithms``, importable; every patch made by the test is undone after it."""
    with recipe_module(monkeypatch, "toy_grpo.algorithms") as module:
        yield module


# -- manifests -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLUGIN_DIRS))
def test_manifest_is_valid_and_declares_what_the_plugin_reads(name):
    m = manifest(name)
    assert m.name == name and m.kind == "algorithm" and m.load == "eager"
    assert m.module == name.replace("-", "_") and (PLUGIN_DIRS[name] / f"{m.module}.py").is_file()
    assert m.targets == ("toy_grpo.algorithms",)
    assert m.requires.core == ">=0.1,<1"
    assert all(p.has_default and p.description for p in m.params.values())
    # dr-grpo reads no param: its divisor is the trainer's own generation bound
    assert bool(m.params) == (name != "dr-grpo")
    source = (PLUGIN_DIRS[name] / f"{m.module}.py").read_text()
    for key in m.params:
        assert f'"{key}"' in source  # every declared param is read
    assert "starforge import patching" in source


def test_opsd_patch_is_version_1_2_0_with_a_float_scale():
    m = manifest("opsd-patch")
    assert m.version == "1.2.0"
    scale = m.params["opsd.scale"]
    assert (scale.type, scale.default) == ("float", 1.0)


# -- the unpatched primitives ----------------------------------------------------------------


def test_grpo_advantages_by_hand(alg):
    assert alg.compute_advantages(REWARDS, 8, eps=0.0) == GRPO_ADV
    assert alg.ADVANTAGE_ESTIMATORS["grpo"](REWARDS, 8, 0.0) == GRPO_ADV
    # With eps, written out with the same float operations: (r - mean) / (std + eps).
    assert alg.compute_advantages(REWARDS[:8], 8) == [(r - 0.5) / (0.25 + 1e-6) for r in REWARDS[:8]]


def test_base_reductions_by_hand(alg):
    losses = [[1.0, 2.0, 3.0], [4.0]]
    assert alg.reduce_loss(losses, "token-mean") == 10.0 / 4
    assert alg.reduce_loss(losses, "seq-mean-token-mean") == (2.0 + 4.0) / 2
    assert alg.reduce_loss(losses, "seq-mean-token-sum") == (6.0 + 4.0) / 2
    assert alg.reduce_loss(losses, "seq-mean-token-sum-fixed", max_tokens=4) == (6.0 + 4.0) / 4 / 2
    with pytest.raises(ValueError, match="max_tokens"):
        alg.reduce_loss(losses, "seq-mean-token-sum-fixed")
    with pytest.raises(ValueError, match="unknown loss_type"):
        alg.reduce_loss(losses, "token-sum")


# -- opsd-patch ------------------------------------------------------------------------------


def test_opsd_scales_the_function_and_the_registry_entry(alg):
    install("opsd-patch", {"opsd.scale": 1.5})
    expected = [a * 1.5 for a in GRPO_ADV]
    assert expected[:5] == [3.0, -1.5, -1.5, 1.5, -1.5]
    assert alg.compute_advantages(REWARDS, 8, 0.0) == expected
    assert alg.ADVANTAGE_ESTIMATORS["grpo"](REWARDS, 8, 0.0) == expected
    recs = [r for r in patching.records() if r["plugin"] == "forge/opsd-patch@1.2.0" and r["status"] == "applied"]
    assert [r["target"] for r in recs] == [
        "toy_grpo.algorithms:compute_advantages",
        "toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]",
    ]


def test_opsd_default_scale_leaves_advantages_unchanged(alg):
    install("opsd-patch")
    assert alg.compute_advantages(REWARDS, 8, 0.0) == GRPO_ADV


def test_opsd_installed_twice_scales_once(alg):
    install("opsd-patch", {"opsd.scale": 2.0})
    install("opsd-patch", {"opsd.scale": 2.0})
    assert alg.ADVANTAGE_ESTIMATORS["grpo"](REWARDS, 8, 0.0) == [a * 2.0 for a in GRPO_ADV]


def test_opsd_refuses_a_non_number_scale(alg):
    with pytest.raises(TypeError, match="opsd.scale"):
        install("opsd-patch", {"opsd.scale": "2"})


# -- dr-grpo ---------------------------------------------------------------------------------


def test_dr_grpo_advantages_are_mean_centred_without_std(alg):
    install("dr-grpo")
    assert alg.compute_advantages(REWARDS, 8) == CENTRED
    assert alg.ADVANTAGE_ESTIMATORS["grpo"](REWARDS, 8, 1e-6) == CENTRED


def test_dr_grpo_advantages_of_degenerate_groups_are_zero(alg):
    install("dr-grpo")
    # an all-equal group is centred to 0 (no std to divide by); the other group keeps r - mean
    rewards = [0.75] * 4 + [1.0, 0.0, 0.5, 0.5]
    assert alg.compute_advantages(rewards, 4) == [0.0] * 4 + [0.5, -0.5, 0.0, 0.0]
    # groups of one: r - mean(group) = r - r
    assert alg.ADVANTAGE_ESTIMATORS["grpo"]([1.0, 0.25, 0.0], 1, 1e-6) == [0.0, 0.0, 0.0]


def test_dr_grpo_reduction_divides_by_the_generation_bound_the_trainer_passes(alg, capsys):
    install("dr-grpo")
    losses = [[1.0, 2.0, 3.0], [4.0]]
    assert alg.reduce_loss(losses, "seq-mean-token-sum-fixed", 4) == (6.0 + 4.0) / 4 / 2 == 1.25
    assert alg.reduce_loss(losses, "seq-mean-token-sum-fixed", 5) == (6.0 + 4.0) / 5 / 2 == 1.0
    assert capsys.readouterr().err == ""
    # The trainer's default aggregation is replaced, and said so once.
    assert alg.reduce_loss(losses, "token-mean", 4) == 1.25
    assert alg.reduce_loss(losses, "token-mean", 4) == 1.25
    assert capsys.readouterr().err == (
        "dr-grpo: loss_type 'token-mean' (the trainer's default) replaced by 'seq-mean-token-sum-fixed' "
        "with the generation bound max_tokens=4\n"
    )
    # Padding with zero-loss tokens does not change it: the divisor is fixed, not the length.
    assert alg.reduce_loss([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0]], "token-mean", 4) == 1.25


@pytest.mark.parametrize("loss_type", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_dr_grpo_refuses_an_aggregation_it_would_override(alg, loss_type):
    install("dr-grpo")
    with pytest.raises(ValueError, match=f"loss_type '{loss_type}' conflicts with Dr-GRPO's 'seq-mean-token-sum-fixed'"):
        alg.reduce_loss([[1.0], [2.0]], loss_type, 4)


def test_dr_grpo_gradient_uses_the_fixed_divisor(alg):
    install("dr-grpo")
    logp = [[-1.0, -0.5, -2.0], [-1.5]]
    loss = alg.clipped_pg_loss(logp, logp, [1.0, -1.0], 0.2, "seq-mean-token-sum-fixed", max_tokens=4)
    # On-policy: ratio 1, token loss -A, d/dlogp = -A / max_tokens / n_sequences.
    assert loss.grad == [[-0.125, -0.125, -0.125], [0.125]]
    assert loss.value == 0.125 * -3.0 + 0.125 * 1.0 == -0.25


def test_dr_grpo_then_opsd_stack_in_load_order(alg):
    install("dr-grpo")
    install("opsd-patch", {"opsd.scale": 2.0})
    assert alg.ADVANTAGE_ESTIMATORS["grpo"](REWARDS, 8, 1e-6) == [a * 2.0 for a in CENTRED]


@pytest.mark.parametrize("bound", [None, 0, True, 6.0])
def test_dr_grpo_refuses_a_loss_without_the_generation_bound(alg, bound):
    install("dr-grpo")
    with pytest.raises(ValueError, match="needs the rollout's generation bound"):
        alg.reduce_loss([[1.0], [2.0]], "seq-mean-token-sum-fixed", bound)


# -- gspo ------------------------------------------------------------------------------------

# Four responses; log-prob differences (logp - logp_old) in halves so every z_i is exact.
LOGP_OLD = [[-1.0, -1.0, -1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0]]
DIFFS = [[0.5, 0.5, -0.5, -0.5], [-0.5, 0.5], [-0.5, -0.5, -0.5], [0.5, 0.0]]
LOGP = [[o + d for o, d in zip(old, diff)] for old, diff in zip(LOGP_OLD, DIFFS)]
ADV = [1.0, -1.0, -1.0, 1.0]
Z = [0.0, 0.0, -0.5, 0.25]  # mean of each row of DIFFS


def test_gspo_gives_each_response_one_log_ratio_with_unit_slope(alg):
    install("gspo")
    ratio = alg.compute_log_ratio(LOGP, LOGP_OLD)
    assert ratio.values == [[z] * len(row) for z, row in zip(Z, LOGP)]
    assert ratio.slopes == [[1.0] * len(row) for row in LOGP]
    loss = alg.clipped_pg_loss(LOGP, LOGP_OLD, ADV, 0.2, "seq-mean-token-sum")
    assert loss.ratio == [[math.exp(z)] * len(row) for z, row in zip(Z, LOGP)]


def test_gspo_clips_whole_responses_where_token_level_clips_tokens(alg):
    token = alg.clipped_pg_loss(LOGP, LOGP_OLD, ADV, 0.2, "seq-mean-token-sum")
    assert token.clipped == [[True, True, False, False], [True, False], [True, True, True], [True, False]]
    install("gspo")
    seq = alg.clipped_pg_loss(LOGP, LOGP_OLD, ADV, 0.2, "seq-mean-token-sum")
    # z = 0 keeps responses 0 and 1 whole; exp(-0.5) < 0.8 with A < 0 and exp(0.25) > 1.2
    # with A > 0 drop responses 2 and 3 whole.
    assert seq.clipped == [[False] * 4, [False] * 2, [True] * 3, [True] * 2]
    # Unclipped tokens: d/dc_t = -A * s_i * 1 * w with s_i = 1 and w = 1/4 sequences.
    assert seq.grad == [[-0.25] * 4, [0.25] * 2, [0.0] * 3, [0.0] * 2]
    # Token losses -min(sA, clip(s)A): -1 (resp 0), 1 (resp 1), 0.8 (resp 2), -1.2 (resp 3);
    # written out with the reduction's float operations.
    expected = sum([0.25 * sum([-1.0] * 4), 0.25 * sum([1.0] * 2), 0.25 * sum([0.8] * 3), 0.25 * sum([-1.2] * 2)])
    assert seq.value == expected


def test_gspo_clamps_the_log_ratio_above_at_10_and_not_below(alg):
    install("gspo")
    old = [[-20.0, -20.0], [-1.0, -1.0]]
    cur = [[-8.0, -8.0], [-31.0, -31.0]]
    ratio = alg.compute_log_ratio(cur, old)
    assert ratio.values == [[10.0, 10.0], [-30.0, -30.0]]
    assert ratio.slopes == [[0.0, 0.0], [1.0, 1.0]]
    loss = alg.clipped_pg_loss(cur, old, [-1.0, 1.0], 0.2, "seq-mean-token-sum")
    assert loss.grad[0] == [0.0, 0.0]  # held by the clamp: no gradient, whatever the clip says
    assert loss.clipped[0] == [False, False]
    # The token level clamps at ±20 instead.
    patching.undo_all()
    assert alg.compute_log_ratio(cur, old).values == [[12.0, 12.0], [-20.0, -20.0]]


def test_gspo_cap_is_a_param(alg):
    install("gspo", {"gspo.max_log_ratio": 0.25})
    assert alg.compute_log_ratio(LOGP, LOGP_OLD).values[3] == [0.25, 0.25]
    assert alg.compute_log_ratio(LOGP, LOGP_OLD).slopes[3] == [1.0, 1.0]  # z == cap: not held


@pytest.mark.parametrize("loss_type", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-fixed"])
def test_gspo_equals_token_level_on_policy(alg, loss_type):
    logp = [[-0.3, -1.7, -0.01], [-2.2], [-0.9, -0.4]]
    adv = [0.7, -1.3, 0.25]
    token = alg.clipped_pg_loss(logp, logp, adv, 0.2, loss_type, max_tokens=5)
    install("gspo")
    seq = alg.clipped_pg_loss(logp, logp, adv, 0.2, loss_type, max_tokens=5)
    assert (seq.value, seq.grad, seq.ratio, seq.clipped) == (token.value, token.grad, token.ratio, token.clipped)


def test_gspo_gradient_matches_the_sequence_objective_numerically(alg):
    """Under seq-mean-token-mean the stop-gradient form has the gradient of
    J = -(1/n) sum_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t(c_t - c_old_t)),
    checked here by central finite differences (approximate by nature)."""
    install("gspo")
    old = [[-1.0, -2.0, -0.5], [-1.2, -0.7]]
    cur = [[-0.98, -2.05, -0.45], [-1.25, -0.69]]
    adv = [0.8, -0.6]

    def objective(c):
        total = 0.0
        for row, row_old, a in zip(c, old, adv):
            s = math.exp(sum(x - y for x, y in zip(row, row_old)) / len(row))
            total += -min(s * a, min(max(s, 0.8), 1.2) * a)
        return total / len(c)

    loss = alg.clipped_pg_loss(cur, old, adv, 0.2, "seq-mean-token-mean")
    assert loss.value == pytest.approx(objective(cur), rel=1e-12)
    h = 1e-6
    for i, row in enumerate(cur):
        for t in range(len(row)):
            up = [list(r) for r in cur]
            down = [list(r) for r in cur]
            up[i][t] += h
            down[i][t] -= h
            numeric = (objective(up) - objective(down)) / (2 * h)
            assert loss.grad[i][t] == pytest.approx(numeric, rel=1e-6, abs=1e-9)


# -- reward-clip (recipe built-in) -----------------------------------------------------------


def test_reward_clip_clips_into_the_param_range(alg):
    target = [1, 2, 3, 0]
    responses = [[1, 2, 3, 0], [2, 0], [1, 2, 0]]
    assert alg.compute_rewards(responses, target) == [1.0, 0.0, 0.5]
    install("reward-clip", {"reward_clip.lo": 0.25, "reward_clip.hi": 0.75})
    assert alg.compute_rewards(responses, target) == [0.75, 0.25, 0.5]


def test_reward_clip_refuses_an_empty_range(alg):
    with pytest.raises(ValueError, match="reward_clip.lo"):
        install("reward-clip", {"reward_clip.lo": 1.0, "reward_clip.hi": 0.0})


def test_gspo_refuses_per_token_advantages(alg):
    install("gspo")
    with pytest.raises(ValueError, match="per-token advantages"):
        alg.clipped_pg_loss(LOGP, LOGP_OLD, [[1.0] * 4, -1.0, -1.0, 1.0], 3e-4, "seq-mean-token-mean")


def test_gspo_warns_once_about_a_token_scale_clip(alg, capsys):
    install("gspo")
    alg.clipped_pg_loss(LOGP, LOGP_OLD, ADV, 4e-4, "seq-mean-token-mean")
    assert capsys.readouterr().err == ""
    alg.clipped_pg_loss(LOGP, LOGP_OLD, ADV, 0.2, "seq-mean-token-mean")
    alg.clipped_pg_loss(LOGP, LOGP_OLD, ADV, 0.2, "seq-mean-token-mean")
    assert capsys.readouterr().err == (
        "gspo: warning: clip_eps=0.2 is token-scale; sequence ratios stay near 1, so this clip rarely engages "
        "(the GSPO paper uses 3e-4/4e-4)\n"
    )
