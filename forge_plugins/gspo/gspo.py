"""gspo: sequence-level importance ratio (Group Sequence Policy Optimization).

Every token of response ``i`` gets the same log-ratio

    z_i = (1/L_i) * sum_t (logp[i][t] - logp_old[i][t]),   ratio s_i = exp(z_i)

so the trainer's epsilon clip keeps or drops whole responses. The gradient follows the
stop-gradient form ``l_t = sg[z_i] + (c_t - sg[c_t])`` with ``c_t = logp[i][t]``: the value
is ``z_i`` on every token and the derivative reaches only that token's own log-prob (slope
1). ``z_i`` is clamped from above at ``params["gspo.max_log_ratio"]`` (default 10; slope 0
where the clamp holds) and not from below. On-policy (``logp == logp_old``) this equals the
token-level ratio in value and gradient.
"""

from starforge import patching

TARGET = "toy_grpo.algorithms:compute_log_ratio"


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

    patching.replace(TARGET, gspo_log_ratio, when_imported=True)
