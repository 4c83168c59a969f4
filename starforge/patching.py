"""The supported way for a plugin to patch its framework (SPEC §10).

    from starforge import patching
    patching.replace("verl.trainer.ppo.core_algos:compute_grpo_outcome_advantage", my_fn)

Implemented on the cluster side, in :mod:`starforge.cluster.patching` (targets: :mod:`starforge.cluster.patch_targets`).
"""

from __future__ import annotations

from .cluster.patch_targets import Target, parse_target
from .cluster.patching import (
    Patch,
    PatchError,
    PatchTargetError,
    acting_for,
    current_plugin,
    patch,
    patches,
    records,
    replace,
    undo_all,
    wrap,
)

__all__ = [
    "Patch",
    "PatchError",
    "PatchTargetError",
    "Target",
    "acting_for",
    "current_plugin",
    "parse_target",
    "patch",
    "patches",
    "records",
    "replace",
    "undo_all",
    "wrap",
]
