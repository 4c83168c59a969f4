"""Runtime API for training code (SPEC §10): the job's hyperparams and deferred plugins.

    from starforge.plugins import hyperparams, install_deferred

Implemented on the cluster side, in :mod:`starforge.cluster.plugins`.
"""

from __future__ import annotations

from .cluster.plugins import (
    ContextMismatchError,
    UnknownPluginError,
    hyperparams,
    install_deferred,
    registered,
)

__all__ = ["hyperparams", "install_deferred", "registered", "UnknownPluginError", "ContextMismatchError"]
