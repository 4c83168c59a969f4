"""GRPO primitives of the toy trainer: the functions algorithm plugins patch.

The trainer reaches every primitive through this module at call time (and advantage
estimators through :data:`ADVANTAGE_ESTIMATORS`, the way verl dispatches them), so a patch
made with ``starforge.patching`` takes effect on the next step.

Shapes: a batch is a list of responses; ``logp[i][t]`` is the log-probability of token
``t`` of response ``i`` (responses have their own lengths); groups are consecutive runs of
``group_size`` responses to one prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# -- rewards ------------------------------------------------------------------------------


def pattern_reward(response: list, target: list) -> float:
    """Fraction of *target* matched position by position (the end token counts as a position).

    >>> pattern_reward([1, 2, 0], [1, 2, 3, 0])
    0.5
    """
    hits = sum(1 for t, token in enumerate(target) if t < len(response) and response[t] == token)
    return hits / len(target)


def compute_rewards(responses: list, target: list) -> list:
    """One scalar reward per response."""
    return [pattern_reward(r, target) for r in responses]


def episode_reward(env, response: list) -> float:
    """The total reward of one episode of *env* that takes the response's tokens as actions.

    *env* is what an environment plugin's factory built (``task.environment``): ``reset()``,
    then ``step(action) -> (observation, reward, done)`` for each token until ``done``.
    """
    env.reset()
    total = 0.0
    for token in response:
        _, reward, done = env.step(token)
        total += float(reward)
        if done:
            break
    return total


# -- advantages ---------------------------------------------------------------------------


def _groups(rewards: list, group_size: int) -> list:
    if not isinstance(group_size, int) or group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    return [rewards[s:s + group_size] for s in range(0, len(rewards), group_size)]


def compute_advantages(rewards: list, group_size: int, eps: float = 1e-6) -> list:
    """Standard GRPO: ``(r - mean) / (std + eps)`` within each group (population std).

    >>> compute_advantages([1.0, 0.0, 1.0, 0.0], 4, eps=0.0)
    [1.0, -1.0, 1.0, -1.0]
    """
    out = []
    for group in _groups(rewards, group_size):
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) * (r - mean) for r in group) / len(group))
        out.extend((r - mean) / (std + eps) for r in group)
    return out


#: Estimators by name; the trainer calls ``ADVANTAGE_ESTIMATORS[config name]``.
ADVANTAGE_ESTIMATORS = {"grpo": compute_advantages}


# -- importance ratio ---------------------------------------------------------------------

#: Token-level log-ratios are clamped into [-LOG_RATIO_BOUND, LOG_RATIO_BOUND].
LOG_RATIO_BOUND = 20.0


@dataclass(frozen=True)
class LogRatio:
    """Per-token log importance ratio and its slope.

    ``slopes[i][t]`` is the derivative of ``values[i][t]`` with respect to token t's own
    current log-probability ``logp[i][t]`` (1.0, or 0.0 where a clamp holds the value).
    Every ratio form the loss accepts has no derivative with respect to other tokens.
    """

    values: list
    slopes: list


def compute_log_ratio(logp: list, logp_old: list) -> LogRatio:
    """Token level: ``logp - logp_old`` per token, clamped into ±LOG_RATIO_BOUND."""
    values, slopes = [], []
    for cur, old in zip(logp, logp_old):
        row_v, row_s = [], []
        for c, o in zip(cur, old):
            d = c - o
            clamped = min(max(d, -LOG_RATIO_BOUND), LOG_RATIO_BOUND)
            row_v.append(clamped)
            row_s.append(1.0 if clamped == d else 0.0)
        values.append(row_v)
        slopes.append(row_s)
    return LogRatio(values, slopes)


# -- loss reduction -----------------------------------------------------------------------

LOSS_TYPES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-fixed")


def loss_weights(lengths: list, loss_type: str, max_tokens: int | None = None) -> list:
    """Weight of each token loss of response ``i`` in the reduced loss (the same for all its tokens).

    - ``token-mean``: 1 / (tokens in the batch)
    - ``seq-mean-token-mean``: 1 / L_i / (number of responses)
    - ``seq-mean-token-sum``: 1 / (number of responses)
    - ``seq-mean-token-sum-fixed``: 1 / max_tokens / (number of responses)
    """
    n = len(lengths)
    if n == 0:
        return []
    if loss_type == "token-mean":
        total = sum(lengths)
        return [1.0 / total for _ in lengths]
    if loss_type == "seq-mean-token-mean":
        return [1.0 / length / n for length in lengths]
    if loss_type == "seq-mean-token-sum":
        return [1.0 / n for _ in lengths]
    if loss_type == "seq-mean-token-sum-fixed":
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"loss_type {loss_type!r} needs max_tokens as a positive int, got {max_tokens!r}")
        return [1.0 / max_tokens / n for _ in lengths]
    raise ValueError(f"unknown loss_type {loss_type!r} (known: {', '.join(LOSS_TYPES)})")


def reduce_loss(token_losses: list, loss_type: str, max_tokens: int | None = None) -> float:
    """``sum_i w_i * sum_t token_losses[i][t]`` with the weights of :func:`loss_weights`."""
    weights = loss_weights([len(row) for row in token_losses], loss_type, max_tokens)
    return sum(w * sum(row) for w, row in zip(weights, token_losses))


# -- clipped policy-gradient loss ---------------------------------------------------------


@dataclass(frozen=True)
class PolicyLoss:
    """The reduced loss, its gradient with respect to every ``logp[i][t]``, and what the clip did."""

    value: float
    grad: list
    ratio: list
    clipped: list

    @property
    def clip_fraction(self) -> float:
        flags = [c for row in self.clipped for c in row]
        return sum(flags) / len(flags) if flags else 0.0


def clipped_pg_loss(logp: list, logp_old: list, advantages: list, clip_eps: float,
                    loss_type: str = "token-mean", max_tokens: int | None = None) -> PolicyLoss:
    """PPO-clip surrogate: token loss ``-min(r A, clip(r, 1-eps, 1+eps) A)``, reduced by *loss_type*.

    The ratio ``r = exp(log_ratio)`` comes from :func:`compute_log_ratio`. A token is
    clipped (no gradient) when ``A > 0, r > 1+eps`` or ``A < 0, r < 1-eps``.
    """
    log_ratio = compute_log_ratio(logp, logp_old)
    weights = loss_weights([len(row) for row in logp], loss_type, max_tokens)
    losses, grads, ratios, clipped = [], [], [], []
    for i, adv in enumerate(advantages):
        row_l, row_g, row_r, row_c = [], [], [], []
        for value, slope in zip(log_ratio.values[i], log_ratio.slopes[i]):
            r = math.exp(value)
            bounded = min(max(r, 1.0 - clip_eps), 1.0 + clip_eps)
            row_l.append(-min(r * adv, bounded * adv))
            cut = (adv > 0 and r > 1.0 + clip_eps) or (adv < 0 and r < 1.0 - clip_eps)
            row_c.append(cut)
            row_g.append(0.0 if cut else -adv * r * slope * weights[i])
            row_r.append(r)
        losses.append(row_l)
        grads.append(row_g)
        ratios.append(row_r)
        clipped.append(row_c)
    return PolicyLoss(reduce_loss(losses, loss_type, max_tokens), grads, ratios, clipped)
