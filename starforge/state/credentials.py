"""The credential variables StarForge reads, and the environment a job gets without them.

These stay on the laptop (SPEC §9): they are removed from the environment handed to a
backend's submit call itself — the local launcher process, ``sbatch`` (slurmctld keeps the
submit environment, and ``--export=ALL`` hands it to every step), the Ray job request — so
no plugin and no trainer can read push credentials. The user's own variables
(``WANDB_API_KEY``, ``HF_TOKEN``, Ray's ``RAY_AUTH_TOKEN``) are the job's business and are
left alone. ``docs/security.md`` lists the same names. Standard library only.

Before ``forge`` starts plugin code on the laptop (``forge prep``, ``forge plan``, a local
job), :func:`shield_credentials` also keeps this very process's credentials from it: the
plugin runs as the same user, and could otherwise read them from ``/proc/<forge pid>/``.

>>> without_credentials({"FORGE_REGISTRY_PASSWORD": "x", "WANDB_API_KEY": "k"})
{'WANDB_API_KEY': 'k'}
"""

from __future__ import annotations

import os
import sys
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


PR_SET_DUMPABLE = 4  # prctl(2)
_shielded = False


def shield_credentials() -> None:
    """Keep the credentials this process holds from the plugin code it is about to start (Linux).

    * The process becomes non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): another process of
      the same user (not root, nor one with ``CAP_SYS_PTRACE``) can no longer read its
      ``/proc/<pid>/environ`` or ``/proc/<pid>/mem``, nor attach a debugger to it.
    * The credential variables are cut out of the environment block the process started
      with, which ``/proc/<pid>/environ`` shows whatever ``os.environ`` holds since (for root
      too, whom the first point does not stop): their bytes are zeroed in place, and the C
      environment drops them, so no child inherits them by default. ``os.environ`` keeps
      them, for forge's own use in this process.

    Once per process; nothing where ``/proc`` or ``prctl`` is missing (the laptop is not Linux).
    """
    global _shielded
    if _shielded or not sys.platform.startswith("linux"):
        return
    _shielded = True
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    _zero_initial_environment(CREDENTIAL_VARIABLES)


def _zero_initial_environment(names) -> None:
    """Zero every ``NAME=value`` of *names* in this process's initial environment block."""
    import ctypes

    wanted = {name.encode("ascii") for name in names}
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50 and 51 of proc(5))
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except (OSError, IndexError, ValueError):
        return
    if not start or len(block) > end - start:
        return
    for name in names:
        os.unsetenv(name)  # out of the C environment first: its entry may point into the block
    offset = 0
    for entry in block.split(b"\0"):
        if entry.partition(b"=")[0] in wanted:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1
