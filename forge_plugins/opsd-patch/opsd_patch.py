"""opsd-patch: multiply every GRPO advantage by ``params["opsd.scale"]``.

The trainer may reach the estimator as the module function or through the registry
``ADVANTAGE_ESTIMATORS`` (the way verl dispatches), so both are wrapped.
"""

from starforge import patching

TARGETS = (
    "toy_grpo.algorithms:compute_advantages",
    "toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]",
)


def install(params):
    scale = params.get("opsd.scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"opsd.scale must be a number, got {scale!r}")
    scale = float(scale)

    def scale_advantages(original, rewards, group_size, eps=1e-6):
        return [a * scale for a in original(rewards, group_size, eps)]

    for target in TARGETS:
        patching.wrap(target, scale_advantages, when_imported=True)
