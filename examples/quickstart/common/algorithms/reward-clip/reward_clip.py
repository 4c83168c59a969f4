"""reward-clip (recipe built-in): clip every reward into ``[reward_clip.lo, reward_clip.hi]``."""

from starforge import patching


def install(params):
    lo = float(params.get("reward_clip.lo", 0.0))
    hi = float(params.get("reward_clip.hi", 1.0))
    if lo > hi:
        raise ValueError(f"reward_clip.lo ({lo}) is above reward_clip.hi ({hi})")

    def clip_rewards(original, responses, target):
        return [min(max(r, lo), hi) for r in original(responses, target)]

    patching.wrap("toy_grpo.algorithms:compute_rewards", clip_rewards, when_imported=True)
