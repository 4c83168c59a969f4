"""The Slurm client commands forge runs on the laptop (``sbatch``, ``squeue``, ``scontrol``,
``sacct``, ``scancel``): each under ``timeout``, with what their failures mean to a user.

Laptop side.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Mapping

from ..errors import BackendError

CLIENT_TIMEOUT = 30  # seconds for each sbatch/squeue/scontrol/sacct/scancel call


class ClientTimeout(BackendError):
    """A Slurm client command that did not answer within :data:`CLIENT_TIMEOUT`."""


def run_client(argv: list, *, check: bool = True, env: Mapping[str, str] | None = None,
               hint: str | None = None) -> subprocess.CompletedProcess:
    """Run a Slurm client command under ``timeout``; a missing command or a hang is a BackendError
    (a hang: :class:`ClientTimeout`)."""
    try:
        result = subprocess.run(
            ["timeout", str(CLIENT_TIMEOUT), *argv], capture_output=True, text=True, env=dict(env) if env is not None else None
        )
    except FileNotFoundError:
        raise BackendError("the 'timeout' command is missing (coreutils)") from None
    if result.returncode == 127:
        raise BackendError(f"'{argv[0]}' not found", hint="run forge submit on a Slurm login node (slurm-client installed)")
    if result.returncode == 124:
        raise ClientTimeout(
            f"'{' '.join(argv[:2])}' did not answer within {CLIENT_TIMEOUT} s",
            hint="is slurmctld running and reachable (scontrol ping)?",
        )
    if check and result.returncode != 0:
        err = " ".join((result.stderr or result.stdout).split())[-300:]
        raise BackendError(f"{argv[0]} failed ({result.returncode}): {err}", hint=hint or sbatch_hint(err) if argv[0] == "sbatch" else hint)
    return result


# what sbatch says -> what to do about it
_NO_CONFIG = ("no Slurm configuration here: sbatch needs the cluster's slurm.conf (SLURM_CONF, /etc/slurm/slurm.conf, "
              "or the cluster's DNS SRV record); submit from a login node of the cluster, or point SLURM_CONF at its slurm.conf")
_SBATCH_HINTS = (
    ("could not establish a configuration source", _NO_CONFIG),
    ("unable to process configuration file", _NO_CONFIG),
    ("fetch_config", _NO_CONFIG),
    ("invalid partition", "name a partition the cluster has ('sinfo -s' lists them) in slurm.sbatch_args (--partition=NAME)"),
    ("invalid account", "name an account you may charge in slurm.sbatch_args (--account=NAME); 'sacctmgr show assoc user=$USER'"),
    ("node configuration is not available", "the job asks for more than a node has: lower nodes, cpus_per_task or gpus_per_node under slurm:"),
    ("unable to contact slurm controller", "is slurmctld running and reachable ('scontrol ping')?"),
    ("time limit", "the time limit exceeds the partition's: set --time=... in slurm.sbatch_args"),
)


def sbatch_hint(error: str) -> str:
    """A hint for an sbatch refusal: a known cause, else where the settings live."""
    low = error.lower()
    for needle, hint in _SBATCH_HINTS:
        if needle in low:
            return hint
    return "sbatch refused the job's batch script: check the slurm: settings in forge.yaml (sbatch_args, nodes, cpus_per_task)"


def queued_in(job_dir: Path) -> str | None:
    """The id of this user's queued or running Slurm job whose working directory is *job_dir*
    (the one sbatch was given: ``--chdir``), or None when there is none or it cannot be asked.

    What a submit whose sbatch did not answer in time asks: slurmctld may have queued the
    job all the same, and submitting it again would run it twice."""
    try:
        result = run_client(["squeue", "--me", "--noheader", "--format=%i|%Z"], check=False)
    except BackendError:
        return None
    found = [line.split("|", 1)[0] for line in result.stdout.splitlines()
             if "|" in line and line.split("|", 1)[1] == str(job_dir)]
    return found[0] if len(found) == 1 and found[0].isdigit() else None
