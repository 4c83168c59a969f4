"""gspo: sequence-level importance ratio (Group Sequence Policy Optimization).

Every token of response ``i`` gets the same log-ratio

    z_i = (1/L_i) * sum_t (logp[i][t] - logp_old[i][t]),   ratio s_i = exp(z_i)

so the trainer's epsilon clip keeps or drops whole responses. The gradient follows the
stop-gradient form ``l_t = sg[z_i] + (c_t - sg[c_t])`` with ``c_t = logp[i][t]``: the value
is ``z_i`` on every token and the derivative reaches only that token's own log-prob (slope
1). ``z_i`` is clamped from above at ``params["gspo.max_log_ratio"]`` (default 10; slope 0
where the clamp holds) and not from below. On-policy (``logp == logp_old``) this equals the
token-level ratio in value and gradient.

The loss is checked where it is computed: per-token advantages (a list for a response
instead of one number) are refused, since GSPO is defined for one advantage per response;
a token-scale clip (``clip_eps`` of 0.01 or more, such as the toy trainer's 0.2) is warned
about once on stderr, since sequence ratios stay near 1 and such a clip rarely engages (the
GSPO paper uses 3e-4 / 4e-4; set ``grpo.clip_eps`` accordingly).
"""

import sys

from starforge import patching

TARGET = "toy_grpo.algorithms:compute_log_ratio"
LOSS_TARGET = "toy_grpo.algorithms:clipped_pg_loss"
TOKEN_SCALE = 0.01


def sequence_log_ratio(logp, logp_old, cap=10.0):
    """``(values, slopes)`` rows for each response, as ``toy_grpo.algorithms.LogRatio`` holds them."""
    values, slopes = [], []
    for cur, old in zip(logp, logp_old):
        if not cur:
            values.append([])
            slopes.append([])
            continue
        z = sum(c - o for c, o in zip(cur, old)) / len(cur)
        value, slope = (cap, 0.0) if z > cap else (z, 1.0)
        values.append([value] * len(cur))
        slopes.append([slope] * len(cur))
    return values, slopes


def install(params):
    cap = params.get("gspo.max_log_ratio", 10.0)
    if isinstance(cap, bool) or not isinstance(cap, (int, float)):
        raise TypeError(f"gspo.max_log_ratio must be a number, got {cap!r}")
    cap = float(cap)

    def gspo_log_ratio(logp, logp_old):
        from toy_grpo.algorithms import LogRatio

        return LogRatio(*sequence_log_ratio(logp, logp_old, cap))

    warned = set()

    def sequence_level_checks(original, logp, logp_old, advantages, clip_eps, *args, **kwargs):
        if any(isinstance(a, (list, tuple)) for a in advantages):
            raise ValueError("gspo: per-token advantages; GSPO needs one advantage per response")
        if clip_eps >= TOKEN_SCALE and clip_eps not in warned:
            warned.add(clip_eps)
            print(f"gspo: warning: clip_eps={clip_eps!r} is token-scale; sequence ratios stay near 1, so this clip "
                  "rarely engages (the GSPO paper uses 3e-4/4e-4)", file=sys.stderr, flush=True)
        return original(logp, logp_old, advantages, clip_eps, *args, **kwargs)

    patching.replace(TARGET, gspo_log_ratio, when_imported=True)
    patching.wrap(LOSS_TARGET, sequence_level_checks, when_imported=True)
