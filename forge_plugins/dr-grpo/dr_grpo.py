"""dr-grpo: GRPO without its two length and difficulty biases (Dr-GRPO).

- Advantages are mean-centred within each group, ``A_i = r_i - mean(group)``, without the
  division by the group's standard deviation. Replaces the estimator function and its
  registry entry.
- The policy-gradient loss sums each response's token losses and divides by the fixed
  generation bound and by the number of responses (``seq-mean-token-sum-fixed``). The
  bound is the one the trainer passes with the loss (``max_tokens``: the rollout's own
  maximum response length), never a second setting that could drift from it; a loss
  without it is refused. The reduction weights are wrapped, so the loss value and its
  gradient agree.
- The trainer's ``loss_type``: its default (``token-mean``) is replaced, with one warning
  on stderr; any other aggregation than ``seq-mean-token-sum-fixed`` is refused, never
  silently ignored.
"""

import sys

from starforge import patching

ESTIMATOR_TARGETS = (
    "toy_grpo.algorithms:compute_advantages",
    "toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]",
)
REDUCTION_TARGET = "toy_grpo.algorithms:loss_weights"
FIXED = "seq-mean-token-sum-fixed"
TRAINER_DEFAULT = "token-mean"


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
    warned = set()

    def fixed_length_weights(original, lengths, loss_type, max_tokens=None):
        if loss_type not in (FIXED, TRAINER_DEFAULT):
            raise ValueError(
                f"dr-grpo: loss_type {loss_type!r} conflicts with Dr-GRPO's {FIXED!r}; "
                f"leave the trainer's default ({TRAINER_DEFAULT!r}) or set {FIXED!r}"
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(
                f"dr-grpo: the loss needs the rollout's generation bound (max_tokens) as a positive int, got {max_tokens!r}"
            )
        if loss_type == TRAINER_DEFAULT and loss_type not in warned:
            warned.add(loss_type)
            print(f"dr-grpo: loss_type {loss_type!r} (the trainer's default) replaced by {FIXED!r} "
                  f"with the generation bound max_tokens={max_tokens}", file=sys.stderr, flush=True)
        return original(lengths, FIXED, max_tokens)

    for target in ESTIMATOR_TARGETS:
        patching.replace(target, mean_centred_advantages, when_imported=True)
    patching.wrap(REDUCTION_TARGET, fixed_length_weights, when_imported=True)
