"""The credential variables StarForge reads, and the environment a job gets without them.

These stay on the laptop (SPEC §9): they are removed from the environment handed to a
backend's submit call itself — the local launcher process, ``sbatch`` (slurmctld keeps the
submit environment, and ``--export=ALL`` hands it to every step), the Ray job request — so
no plugin and no trainer can read push credentials. The user's own variables
(``WANDB_API_KEY``, ``HF_TOKEN``, Ray's ``RAY_AUTH_TOKEN``) are the job's business and are
left alone. ``docs/security.md`` lists the same names. Standard library only.

>>> without_credentials({"FORGE_REGISTRY_PASSWORD": "x", "WANDB_API_KEY": "k"})
{'WANDB_API_KEY': 'k'}
"""

from __future__ import annotations

import os
from typing import Mapping

CREDENTIAL_VARIABLES = (
    "FORGE_REGISTRY_USER",  # OCI registry user (publish, pull)
    "FORGE_REGISTRY_PASSWORD",  # OCI registry password or token
    "FORGE_KEY_PASSPHRASE",  # passphrase of the signing key
    "FORGE_RAY_TOKEN",  # bearer token forge sends to the Ray Jobs API
)


def without_credentials(env: Mapping[str, str] | None = None) -> dict:
    """A copy of *env* (default: this process's environment) without :data:`CREDENTIAL_VARIABLES`."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k not in CREDENTIAL_VARIABLES}
