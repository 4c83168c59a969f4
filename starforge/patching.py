"""The supported way for a plugin to patch its framework (SPEC §10).

    from starforge import patching
    patching.replace("verl.trainer.ppo.core_algos:compute_grpo_outcome_advantage", my_fn)

Implemented on the cluster side, in :mod:`starforge.cluster.patching` (targets: :mod:`starforge.cluster.patch_targets`).
"""

from __future__ import annotations

# The API is the implementing module's __all__ (its functions, Patch, the errors, the target parser).
from .cluster.patching import *  # noqa: F403
from .cluster.patching import __all__  # noqa: F401
