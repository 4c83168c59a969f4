"""Runtime API for training code (SPEC §10, §17): hyperparams, deferred and environment plugins.

    from starforge.plugins import hyperparams, install_deferred, load_environment

Implemented on the cluster side, in :mod:`starforge.cluster.plugins`.
"""

from __future__ import annotations

from .cluster.plugins import (
    ContextMismatchError,
    UnknownPluginError,
    hyperparams,
    install_deferred,
    load_environment,
    registered,
)

__all__ = ["hyperparams", "install_deferred", "registered", "load_environment", "UnknownPluginError", "ContextMismatchError"]
