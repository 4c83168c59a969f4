"""dr-grpo: GRPO without its two length and difficulty biases (Dr-GRPO).

- Advantages are mean-centred within each group, ``A_i = r_i - mean(group)``, without the
  division by the group's standard deviation. Replaces the estimator function and its
  registry entry.
- The policy-gradient loss sums each response's token losses and divides by the fixed
  bound ``params["dr_grpo.max_tokens"]`` and by the number of responses, whatever
  ``loss_type`` the trainer asks for (the reduction weights are wrapped, so the loss value
  and its gradient agree).
"""

from starforge import patching

ESTIMATOR_TARGETS = (
    "toy_grpo.algorithms:compute_advantages",
    "toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]",
)
REDUCTION_TARGET = "toy_grpo.algorithms:loss_weights"


def mean_centred_advantages(rewards, group_size, eps=1e-6):
    """``r - mean`` within each consecutive group of *group_size* (``eps`` is unused)."""
    if not isinstance(group_size, int) or group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        out.extend(r - mean for r in group)
    return out


def install(params):
    fixed = params.get("dr_grpo.max_tokens", 6)
    if isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 1:
        raise ValueError(f"dr_grpo.max_tokens must be a positive int, got {fixed!r}")

    def fixed_length_weights(original, lengths, loss_type, max_tokens=None):
        return original(lengths, "seq-mean-token-sum-fixed", fixed)

    for target in ESTIMATOR_TARGETS:
        patching.replace(target, mean_centred_advantages, when_imported=True)
    patching.wrap(REDUCTION_TARGET, fixed_length_weights, when_imported=True)
