"""The ``slurm`` backend: one ``sbatch`` script per job over a shared staging directory.

The job directory is staged on a filesystem every node sees (``slurm.staging`` in
``forge.yaml``, or ``FORGE_SLURM_STAGING``; by default the experiment's
``.forge/jobs/<id>``, which is shared when the experiment lives in a shared home). The
batch script, written to ``<job dir>/slurm/job.sbatch``, holds no value of the job: the
paths and names go to ``sbatch`` as arguments (:func:`sbatch_command`; a newline or other
control character in them is refused). It runs three kinds of step:

1. **prepare**, on every node of the allocation (``srun --ntasks-per-node=1``): copy the
   job (``jobspec.json``, ``forge_plugins/``, ``recipe/``, ``.forge-runtime/``) to a
   node-local directory that has the same unpredictable path on every node (the batch
   host's ``mktemp -d`` under ``slurm.node_dir``, else the job's ``TMPDIR``, else
   ``/tmp``; mode 0700, refused unless this user's own), make the verified inputs
   read-only, and check that copy with the launcher's ``--verify-only``: every
   plugin and built-in is verified and requirement-checked on every node before any
   training starts (nothing is imported or installed there; the run step does that, and
   verifies again);
2. **run** the launcher on the node-local copy: once on the batch host
   (``slurm.launch: once``, the default) or on every node (``slurm.launch: per-node``,
   ``srun --ntasks-per-node=1``). The launcher exports the bootstrap environment to the
   processes it starts; because the copy's path is the same on every node, a process the
   entrypoint starts on another node (``srun python …``, torchrun) verifies and loads that
   node's own copy;
3. **collect**, on every node: copy provenance and launcher status back to the shared job
   directory with the launcher's outputs manifest (:mod:`starforge.cluster.lineage`; made
   here if the launcher was killed), remove the node-local copy. A keeper step per node
   (``srun --overlap``) does the same on SIGTERM: at the job's end, or on ``scancel``.

Every process also writes its provenance record to the shared ``provenance/`` as it makes
it (``FORGE_PROVENANCE_SHARED``), so an attempt killed before its collect step still left
them there. With ``launch: per-node`` the batch script says which host's launcher failed
(``error: HOST: the launcher on this host exited N: <its status message>``, from the code
that launcher left in the shared directory), and the job's exit code is that launcher's,
not that of the other hosts' launchers srun ends because of it.

The script records the exit code in ``slurm/exit_code``; output goes to
``slurm/output.log``. Status comes from ``scontrol show job``, then ``sacct`` where
accounting exists, then that exit-code file. Every Slurm client command runs under
``timeout`` (they hang while slurmctld is down).

Every step starts the launcher the same way: the node's ``python3`` runs the job's
runtime zip (``.forge-runtime/starforge-runtime.zip --spec jobspec.json``), whose entry
resolves the job's Python on the node and starts ``<job python> -m starforge.launch``
under it (SPEC §14); nothing of StarForge is installed on the nodes.

Other settings: ``nodes`` (default 1), ``partition``, ``account``, ``time``,
``cpus_per_task``, ``gpus_per_node``, ``sbatch_args`` (a list of extra ``sbatch``
arguments), ``python`` (the job's Python on the nodes, over ``forge.yaml``'s ``python``),
``srun_args`` (a list of ``srun`` options for every step), ``container`` (a pyxis/enroot
image every step runs in, with the shared job directory and ``node_dir`` mounted at the
same paths, plus ``container_mounts``).

Laptop side (the batch script runs on the cluster and calls only the shell, ``srun`` and the node's ``python3``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ..cluster import atomic
from ..cluster import jobdir_layout as layout
from ..cluster.environment import WORK_DIR_ENV
from ..cluster.provenance import SHARED_ENV as SHARED_PROVENANCE_ENV
from ..cluster.status import VERIFY_EXIT
from ..cluster.utctime import utc_now
from ..errors import BackendError, ManifestError
from ..jobs.binding import Binding
from ..state.credentials import without_credentials
from ..state.directories import make_dirs
from .base import Backend, JobRecord, exit_status, follow_file
from .slurm_client import ClientTimeout, queued_in, run_client

if TYPE_CHECKING:
    from ..jobs.staged import StagedJob

SETTINGS = (
    "staging",
    "launch",
    "nodes",
    "partition",
    "account",
    "time",
    "cpus_per_task",
    "gpus_per_node",
    "node_dir",
    "sbatch_args",
    "python",
    "container",
    "container_mounts",
    "srun_args",
)
LAUNCH_MODES = ("once", "per-node")
JOB_ITEMS = layout.NODE_ITEMS  # what a node copies

# Slurm job state -> record status (anything unknown counts as still running)
PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"}
SUCCEEDED = {"COMPLETED"}
CANCELLED = {"CANCELLED"}
FAILED = {"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT"}


def step_options(settings: Mapping[str, Any]) -> list[str]:
    """``srun`` options applied to every step of the job (SPEC §14).

    ``srun_args`` as given; with ``container`` (a pyxis/enroot image), the image. The batch
    script adds ``--container-mounts``: the job's shared directory, the node-local base
    directory and any ``container_mounts``, bound at the same paths, so the steps find the
    job where the batch script put it.
    """
    options = list(settings.get("srun_args") or [])
    image = settings.get("container")
    if image:
        options.append(f"--container-image={image}")
    return options


def node_base(settings: Mapping[str, Any]) -> str:
    """Where the node-local copies go, as a shell word: ``slurm.node_dir``, else the job's ``TMPDIR``."""
    node_dir = settings.get("node_dir")
    return shlex.quote(node_dir) if node_dir else '"${TMPDIR:-/tmp}"'


def sbatch_escape(path: str) -> str:
    """*path* for an sbatch filename option: ``%`` is a pattern there (``%j``, ``%u``), ``%%`` a ``%``."""
    return path.replace("%", "%%")


def control_character(text: str) -> str | None:
    """The first control character of *text* named (``newline``, ``U+001B``), or None."""
    for ch in text:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029":
            return {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(ch, f"control character U+{ord(ch):04X}")
    return None


def refuse_control_characters(job_dir: str | Path, spec=None, settings: Mapping[str, Any] | None = None) -> None:
    """Refuse a job path, name or ``slurm:`` setting holding a control character (SPEC §11).

    The values reach sbatch as arguments and the batch script as quoted words, but a
    newline has no safe place in a Slurm job (a path in an ``#SBATCH`` line, in the
    output file, in ``scontrol`` listings): it is refused before anything is submitted.
    """
    found = control_character(str(job_dir))
    if found:
        raise BackendError(
            f"the job directory {str(job_dir)!r} holds {found}; Slurm jobs need paths without control characters",
            hint="move the experiment (or slurm.staging / FORGE_SLURM_STAGING) to a path without one",
        )
    if spec is not None:
        found = control_character(spec.name)
        if found:
            raise BackendError(f"the job name {spec.name!r} holds {found}", hint="rename the experiment in forge.yaml")
    for key, value in (settings or {}).items():
        for item in value if isinstance(value, list) else [value]:
            found = control_character(item) if isinstance(item, str) else None
            if found:
                raise ManifestError(
                    f"forge.yaml: slurm.{key}: {item!r} holds {found}", hint="write the value on one line, without control characters"
                )


def sbatch_command(job_dir: Path, spec, settings: Mapping[str, Any], script: Path) -> list[str]:
    """``sbatch`` with every job value as an argument (SPEC §11), the script and its argument.

    Nothing of the job is written into ``#SBATCH`` lines: sbatch reads those itself, line
    by line, so no quoting protects them. ``%`` in the output path is escaped (sbatch
    expands ``%j``, ``%u``, … there). The shared job directory reaches the script as its
    first argument. The user's ``sbatch_args`` come last, so they win.
    """
    shared = str(job_dir)
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.name}",
        f"--output={sbatch_escape(str(Path(job_dir) / layout.SLURM_DIR / layout.SLURM_LOG))}",
        "--open-mode=append",  # a requeued attempt keeps the earlier one's lines (JobFileAppend=0 truncates)
        f"--chdir={shared}",
        f"--nodes={int(settings.get('nodes') or 1)}",
        "--ntasks-per-node=1",
        "--export=ALL",
    ]
    for key, flag in (("partition", "--partition"), ("account", "--account"), ("time", "--time"),
                      ("cpus_per_task", "--cpus-per-task"), ("gpus_per_node", "--gpus-per-node")):  # fmt: skip
        if settings.get(key) is not None:
            argv.append(f"{flag}={settings[key]}")
    return [*argv, *settings.get("sbatch_args", []), str(script), shared]


def batch_script(job_dir: Path, spec, settings: Mapping[str, Any], binding: Binding) -> str:
    """The sbatch script of one job (see the module docstring for its steps).

    It holds no ``#SBATCH`` line and no path of the job: the shared job directory is its
    first argument (:func:`sbatch_command`), the node-local directory a fresh ``mktemp -d``.
    It does hold the job's *binding* (SPEC §9): slurmctld stores the script at submit, so
    nothing written to the shared directory later changes the hashes the nodes check.
    """
    q = shlex.quote
    # The job's runtime zip under the node's python3: its entry resolves the job's Python
    # there and starts the launcher under it (SPEC §14); nothing of ours is installed.
    run = f'python3 "$LOCAL/{layout.RUNTIME_DIR}/{layout.RUNTIME_ZIP}" --spec "$LOCAL/{layout.SPEC_FILE}" --spec-sha256 "$SPEC_SHA256"'
    opts = " ".join(q(o) for o in step_options(settings))
    if settings.get("container"):
        opts += (" " if opts else "") + '"--container-mounts=$CONTAINER_MOUNTS"'
    per_node = settings.get("launch", "once") == "per-node"
    # With step options (a container image) even a single run is an srun step, so it runs
    # where the other steps do; without, it runs in the batch script itself.
    # Per node, a launcher that fails says on which host (each host checks its own copy).
    runner = "on_each_node bash -c " + q(NAME_HOST) + ' forge-run "$SHARED" ' if per_node else ("one_step " if opts else "")
    mounts = ",".join(q(m) for m in settings.get("container_mounts") or [])
    lines = [
        "#!/bin/bash",
        "# Written by forge submit (starforge slurm backend); job values come as sbatch arguments.",
        "set -u",
        "# Nothing the job writes in its directories (bootstrap, provenance) is writable by others.",
        'umask "$(printf %04o $(( 0$(umask) | 2 )))"',
        "# Not a worker of some other forge job: the launcher sets up this job's environment.",
        "unset FORGE_JOBSPEC FORGE_JOB_DIR FORGE_JOB_ID FORGE_HYPERPARAMS FORGE_RUNTIME FORGE_WORK_DIR FORGE_PROVENANCE_LOG",
        "# The prepare step and the run share one attempt number (provenance file names).",
        'export FORGE_ATTEMPT="${SLURM_RESTART_COUNT:-0}"',
        "# The log is opened for appending (sbatch --open-mode=append): say where a requeued attempt begins.",
        'if [ "$FORGE_ATTEMPT" != 0 ]; then echo "forge: Slurm requeued this job: attempt $((FORGE_ATTEMPT + 1)) (recorded as attempt'
        ' $FORGE_ATTEMPT) starts on $(hostname -s) at $(date -u +%Y-%m-%dT%H:%M:%SZ); the earlier attempts\' output is above"; fi',
        'SHARED="$1"',
        "# The job's working directory stays on the shared file system: what the job writes",
        "# survives the node-local copy, and a requeued attempt finds it as the last one left it.",
        f'if [ -d "$SHARED/{layout.WORK_DIR}" ]; then export {WORK_DIR_ENV}="$SHARED/{layout.WORK_DIR}"; fi',
        "# Every process writes its provenance record to the shared directory as it is made too:",
        "# the collect step of a killed or cancelled attempt never runs.",
        f'mkdir -p "$SHARED/{layout.PROVENANCE_DIR}" && export {SHARED_PROVENANCE_ENV}="$SHARED/{layout.PROVENANCE_DIR}"',
        "# Each host says there when it removed its node-local copy (a host that died cannot).",
        f'mkdir -p "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_CLEANUP_DIR}"',
        f"# The binding of what was staged (sha256 of the runtime zip and of {layout.SPEC_FILE}).",
        f"RUNTIME_SHA256={binding.runtime_sha256}",
        f"SPEC_SHA256={binding.spec_sha256}",
        f"BASE={node_base(settings)}",
        "# The node-local copy: an unpredictable name (mktemp -d, mode 0700) under the job's",
        "# TMPDIR, the same path on every node of the allocation (each node makes its own).",
        'LOCAL=$(mktemp -d "$BASE/starforge-${SLURM_JOB_ID:-job}.XXXXXXXXXX") || { echo "error: cannot create a node-local directory under $BASE" >&2; exit 1; }',
        'NODES="${SLURM_JOB_NUM_NODES:-1}"',
        *(['CONTAINER_MOUNTS="$SHARED:$SHARED,$BASE:$BASE' + ("," + mounts if mounts else "") + '"'] if settings.get("container") else []),
        'on_each_node() { srun --nodes="$NODES" --ntasks="$NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 '
        + (opts + " " if opts else "") + '"$@"; }',
        *(['one_step() { srun --nodes=1 --ntasks=1 ' + opts + ' "$@"; }'] if opts and not per_node else []),
        "",
        "# 1. every node: a node-local read-only copy, verified (the launcher's --verify-only)",
        "on_each_node bash -c " + q(_PREPARE) + ' forge-prepare "$SHARED" "$LOCAL" "$RUNTIME_SHA256" "$SPEC_SHA256" ' + " ".join(q(i) for i in JOB_ITEMS),
        "code=$?",
        'if [ "$code" -eq 0 ]; then',
        "    # every node: a keeper step that collects and removes this node's copy when it is",
        "    # signalled: at the end of the job below, or when the job is cancelled (scancel",
        "    # signals every step, and no new step can start then); one keeper that ends early does",
        "    # not end the others (no --kill-on-bad-exit for it)",
        "    on_each_node --overlap --kill-on-bad-exit=0 bash -c " + q(KEEPER) + ' forge-keep "$SHARED" "$LOCAL" ' + q(COLLECT) + " &",
        "    keeper=$!",
        "    # 2. the training entrypoint on the local copy; the launcher exports the bootstrap",
        "    #    environment, whose paths are the same on every node",
        f"    {runner}{run}",
        "    code=$?",
        *([
            "    # srun ends the other hosts' launchers when one fails: the job's code is the failing host's",
            f'    for f in "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_FAILED_PREFIX}$FORGE_ATTEMPT-"*; do',
            '        if [ -f "$f" ] && [ "$(cat "$f")" -lt 128 ] 2>/dev/null; then code=$(cat "$f"); break; fi',
            "    done",
        ] if per_node else []),
        "fi",
        "# 3. every node: provenance and launcher status back to the shared directory",
        'if [ -n "${keeper:-}" ]; then kill -TERM "$keeper" 2>/dev/null; wait "$keeper"; fi',
        "on_each_node bash -c " + q(COLLECT) + ' forge-collect "$SHARED" "$LOCAL"',
        'rmdir "$LOCAL" 2>/dev/null',
        *([
            f"# which host's launcher failed, and why (its {layout.STATUS_FILE}, collected above)",
            f'for f in "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_FAILED_PREFIX}$FORGE_ATTEMPT-"*; do',
            '    if [ -f "$f" ] && [ "$(cat "$f")" -lt 128 ] 2>/dev/null; then',
            f'        host=${{f##*/{layout.SLURM_FAILED_PREFIX}$FORGE_ATTEMPT-}}',
            f'        why=$(sed -n \'s/^  "message": "\\(.*\\)",\\{{0,1\\}}$/\\1/p\' "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_STATUS_PREFIX}$host.json" 2>/dev/null)',
            '        echo "error: $host: the launcher on this host exited $(cat "$f")${why:+: $why}" >&2',
            "    fi",
            "done",
        ] if per_node else []),
        f'echo "$code" > "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_EXIT_FILE}.tmp" && mv -f "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_EXIT_FILE}.tmp" "$SHARED/{layout.SLURM_DIR}/{layout.SLURM_EXIT_FILE}"',
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)


# bash -c '<this>' forge-prepare SHARED LOCAL RUNTIME_SHA256 SPEC_SHA256 ITEM...
# LOCAL is the batch host's fresh `mktemp -d` name: this node makes it (mkdir fails on
# anything already there) unless it is the batch host's own; either way it must be a real
# directory, not a link, owned by this user, mode 0700 and empty — another user who
# guessed or raced the name stops the job, and never gets the job's files or its exec.
_PREPARE = rf"""set -eu
shared=$1; local=$2; runtime_sha=$3; spec_sha=$4; shift 4
# every folder and link its path depends on: this user's or root's, and not writable by
# others without the sticky bit (else another user renames the copy and puts theirs there)
base=$(dirname -- "$local"); case $base in /*) ;; *) base="$PWD/$base" ;; esac
unsafe=
for p in "$base" "$(readlink -f -- "$base" || echo "$base")"; do
    while [ -z "$unsafe" ]; do
        if ! read -r uid hex < <(stat -c '%u %f' -- "$p" 2>/dev/null); then unsafe="$p cannot be checked"; break; fi
        m=$((16#$hex))
        if [ "$uid" != 0 ] && [ "$uid" != "$(id -u)" ]; then unsafe="$p is owned by uid $uid (not this user, not root)"
        elif [ $((m & 0xF000)) != $((0xA000)) ] && [ $((m & 022)) != 0 ] && [ $((m & 01000)) = 0 ]; then
            unsafe="$p is writable by others without the sticky bit"
        fi
        if [ "$p" = / ]; then break; fi
        p=$(dirname -- "$p")
    done
done
if [ -n "$unsafe" ]; then
    echo "error: $(hostname -s): the node-local directory's folder is not safe: $unsafe; the job stops (set slurm: node_dir: or TMPDIR to a folder of your own)" >&2
    exit {VERIFY_EXIT}
fi
mkdir -m 0700 "$local" 2>/dev/null || true
if [ -L "$local" ] || [ ! -d "$local" ] || [ ! -O "$local" ] || [ "$(stat -c %a "$local")" != 700 ] \
   || [ -n "$(ls -A "$local")" ]; then
    echo "error: $(hostname -s): the node-local directory $local is not a fresh private directory of $(id -un) (another user's, a link, not mode 0700, or not empty); the job stops" >&2
    exit {VERIFY_EXIT}
fi
# a requeued attempt: this job's node-local copies an earlier attempt left on this node (a
# host that died could not remove them), this user's own and real directories only
if [ -n "${{SLURM_JOB_ID:-}}" ]; then
    swept=0; left=0
    for old in "$(dirname "$local")/starforge-$SLURM_JOB_ID".*; do
        if [ "$old" != "$local" ] && [ -d "$old" ] && [ ! -L "$old" ] && [ -O "$old" ]; then
            chmod -R u+w "$old" 2>/dev/null || true; rm -rf "$old" 2>/dev/null || true
            if [ -e "$old" ]; then left=$((left + 1)); echo "warning: $(hostname -s): an earlier attempt's node-local copy $old could not be removed entirely" >&2
            else swept=$((swept + 1)); fi
        fi
    done
    # the mark says every earlier copy on this host is gone (forge jobs show reports them removed): only then
    if [ "$swept" -gt 0 ] && [ "$left" -eq 0 ]; then echo "$swept" > "$shared/{layout.SLURM_DIR}/{layout.SLURM_CLEANUP_DIR}/a${{FORGE_ATTEMPT:-0}}-$(hostname -s).swept" || true; fi
fi
for item in "$@"; do
    if [ -e "$shared/$item" ]; then cp -R "$shared/$item" "$local/"; fi
done
# the verified inputs are read-only; {layout.RUNTIME_DIR}/, {layout.STATUS_FILE} and {layout.PROVENANCE_DIR}/ are the launcher's
for item in {" ".join(layout.VERIFIED_ITEMS)}; do
    if [ -e "$local/$item" ]; then chmod -R a-w "$local/$item"; fi
done
# the zip cannot vouch for itself: checked here, on the private copy, before it runs
zip="$local/{layout.RUNTIME_DIR}/{layout.RUNTIME_ZIP}"
got=$(sha256sum "$zip" | cut -d' ' -f1)
if [ "$got" != "$runtime_sha" ]; then
    echo "error: $(hostname -s): the job's runtime zip $zip changed after staging: its sha256 is $got, the job was submitted with $runtime_sha" >&2
    exit {VERIFY_EXIT}
fi
exec python3 "$zip" --spec "$local/{layout.SPEC_FILE}" --spec-sha256 "$spec_sha" --verify-only
"""

# bash -c '<this>' forge-run SHARED ARGV...: run ARGV; on a failure, leave its code in
# SHARED/slurm/failed-<attempt>-<host> (a launcher that srun ended because another host
# failed is killed with this shell and leaves nothing). The batch script names the host from
# it: a line printed here could be lost, as srun drops what a failed task printed last when
# it ends the step (--kill-on-bad-exit) before that output reached it.
NAME_HOST = rf"""shared=$1; shift
"$@"
code=$?
if [ "$code" -ne 0 ]; then
    echo "$code" > "$shared/{layout.SLURM_DIR}/{layout.SLURM_FAILED_PREFIX}${{FORGE_ATTEMPT:-0}}-$(hostname -s)"
fi
exit "$code"
"""

# bash -c '<this>' forge-keep SHARED LOCAL COLLECT: wait; on SIGTERM run COLLECT (below)
KEEPER = r"""shared=$1; local=$2; collect=$3
trap 'trap "" TERM; bash -c "$collect" forge-collect "$shared" "$local"; kill "$pid" 2>/dev/null; exit 0' TERM
# Slurm signals every process of the step at once: the sleep may die of the SIGTERM before
# this shell gets it; waiting again keeps the shell here until its trap runs.
while :; do
    sleep 3600 &
    pid=$!
    wait "$pid"
done
"""

# bash -c '<this>' forge-collect SHARED LOCAL
COLLECT = rf"""shared=$1; local=$2
host=$(hostname -s)
# copied beside the name, then renamed: a collect killed mid-copy (past KillWait) leaves the
# record the process wrote there itself whole, and at most a hidden temp file
put() {{ tmp="${{2%/*}}/.${{2##*/}}.$$.tmp"; cp "$1" "$tmp" 2>/dev/null && mv -f "$tmp" "$2"; rm -f "$tmp"; }}
for d in {layout.PROVENANCE_DIR} {layout.LINEAGE_DIR}; do  # records, and the launcher's outputs manifest (SPEC §18)
    for f in "$local/$d"/*.json; do if [ -f "$f" ]; then mkdir -p "$shared/$d"; put "$f" "$shared/$d/${{f##*/}}"; fi; done
done
if [ -f "$local/{layout.STATUS_FILE}" ]; then put "$local/{layout.STATUS_FILE}" "$shared/{layout.SLURM_DIR}/{layout.SLURM_STATUS_PREFIX}$host.json"; fi
z="$local/{layout.RUNTIME_DIR}/{layout.RUNTIME_ZIP}"; [ -f "$z" ] && PYTHONPATH="$z" python3 -m starforge.cluster.lineage --spec "$local/{layout.SPEC_FILE}" --job-dir "$shared" --host "$host" --if-missing >&2
if [ "${{SLURM_NODEID:-0}}" = 0 ] && [ -f "$local/{layout.STATUS_FILE}" ]; then put "$local/{layout.STATUS_FILE}" "$shared/{layout.STATUS_FILE}"; fi
if [ -d "$local" ] && [ ! -L "$local" ] && [ -O "$local" ]; then chmod -R u+w "$local" 2>/dev/null; rm -rf "$local"; fi
# this host cleaned up after this attempt (what `forge jobs show` reads; a host that died did not)
if [ ! -e "$local" ] && [ -d "$shared/{layout.SLURM_DIR}/{layout.SLURM_CLEANUP_DIR}" ]; then echo removed > "$shared/{layout.SLURM_DIR}/{layout.SLURM_CLEANUP_DIR}/a${{FORGE_ATTEMPT:-0}}-$host.done"; fi
true
"""


class SlurmBackend(Backend):
    """Runs jobs with sbatch on a Slurm cluster."""

    name = "slurm"
    settings_keys = SETTINGS  # forge.yaml's slurm: mapping, checked by check_settings
    node_local_copies = True  # each node runs its own copy (prepare), removed by collect

    @classmethod
    def cpu_only_settings(cls, settings: Mapping[str, Any]) -> dict:
        """No ``gpus_per_node`` and no GPU options in ``sbatch_args``; one node, launched once."""
        out = {k: v for k, v in settings.items() if k != "gpus_per_node"}
        if "nodes" in out:
            out["nodes"] = 1
        if "launch" in out:
            out["launch"] = "once"
        if isinstance(out.get("sbatch_args"), list):
            out["sbatch_args"] = [a for a in out["sbatch_args"] if not str(a).startswith(("--gres", "--gpus", "-G"))]
        return out

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> dict:
        """The ``slurm:`` mapping with unknown keys and bad values refused, ``launch`` defaulted."""
        out = super().check_settings(settings)
        refuse_control_characters("", None, settings)
        launch = out.setdefault("launch", "once")
        if launch not in LAUNCH_MODES:
            raise ManifestError(f"forge.yaml: slurm.launch: expected once or per-node, got {launch!r}")
        for key in ("nodes", "cpus_per_task", "gpus_per_node"):
            value = out.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ManifestError(f"forge.yaml: slurm.{key}: expected a positive integer, got {value!r}")
        for key in ("staging", "partition", "account", "time", "node_dir", "python", "container"):
            value = out.get(key)
            if value is not None and not isinstance(value, str):
                raise ManifestError(f"forge.yaml: slurm.{key}: expected a string, got {value!r}")
        for key in ("sbatch_args", "srun_args", "container_mounts"):
            args = out.get(key, [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ManifestError(f"forge.yaml: slurm.{key}: expected a list of strings")
        return out

    def staging_dir(self, experiment_dir: Path, job_id: str) -> Path:
        """``$FORGE_SLURM_STAGING/<id>``, else ``slurm.staging/<id>``, else the experiment's ``.forge/jobs/<id>``."""
        root = os.environ.get("FORGE_SLURM_STAGING") or self.settings.get("staging")
        path = Path(root).expanduser() / job_id if root else super().staging_dir(experiment_dir, job_id)
        refuse_control_characters(path)  # before anything is staged there
        return path

    def submit(self, staged: StagedJob, *, detach: bool) -> JobRecord:
        job_dir = Path(staged.dir).resolve()
        spec = staged.spec
        refuse_control_characters(job_dir, spec, self.settings)
        out = job_dir / layout.SLURM_DIR
        make_dirs(out)
        script = out / layout.SLURM_SCRIPT
        atomic.write_file(script, batch_script(job_dir, spec, self.settings, staged.binding))
        # slurmctld stores the submit environment and --export=ALL hands it to every step:
        # sbatch runs without the credential variables.
        try:
            result = run_client(sbatch_command(job_dir, spec, self.settings, script), env=without_credentials())
        except ClientTimeout as exc:
            slurm_id = queued_in(job_dir)
            if slurm_id is None:
                raise BackendError(f"{exc.message}, and no job of {job_dir} is in Slurm's queue (it may still appear: "
                                   f"squeue --me -o '%i %Z')", hint=exc.hint) from None
        else:
            slurm_id = result.stdout.strip().split(";")[0]
            if not slurm_id.isdigit():
                raise BackendError(f"sbatch printed no job id: {result.stdout.strip()!r}")
        return self._save_new_record(
            dataclasses.replace(staged, dir=job_dir),
            backend_ref={"job_id": slurm_id, "output": str(out / layout.SLURM_LOG), "launch": self.settings["launch"]},
        )

    def refresh(self, record: JobRecord) -> JobRecord:
        if record.final:
            return record
        state = query_state(record.backend_ref["job_id"], Path(record.dir))
        return self.store.update(record.id, lambda r: r if r.final else _apply(r, state))

    def logs(self, record: JobRecord, follow: bool = False) -> Iterator[str]:
        return follow_file(Path(record.backend_ref["output"]), self, record, follow)

    def cancel(self, record: JobRecord) -> JobRecord:
        record = self.refresh(record)
        if record.final:
            return record
        run_client(["scancel", record.backend_ref["job_id"]])
        return self.store.update(
            record.id,
            lambda r: r if r.final else r.with_changes(status="cancelled", finished=utc_now(), message="cancelled with scancel"),
        )


def query_state(slurm_id: str, job_dir: Path) -> dict:
    """``{state, exit_code, reason}`` from scontrol, else sacct, else the job's exit-code file.

    ``state`` is a Slurm state name, or ``None`` when nothing knows the job.
    """
    result = run_client(["scontrol", "show", "job", "-o", slurm_id], check=False)
    if result.returncode == 0 and "JobState=" in result.stdout:
        text = result.stdout
        found = re.search(r"\bJobState=(\S+)", text)
        assert found is not None, text  # scontrol writes a value after JobState=
        state = found.group(1)
        reason = re.search(r"\bReason=(\S+)", text)
        restarts = re.search(r"\bRestarts=(\d+)", text)
        start = re.search(r"\bStartTime=(\S+)", text)
        return {"state": state, "exit_code": _exit_code(text), "reason": reason.group(1) if reason else "",
                "restarts": int(restarts.group(1)) if restarts else 0, "start": start.group(1) if start else ""}
    try:  # accounting is optional: no sacct, no slurmdbd, or no record there is not an error
        result = run_client(["sacct", "-j", slurm_id, "-X", "-n", "-P", "-o", "State,ExitCode"], check=False)
        line = result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else ""
    except BackendError:
        line = ""
    if "|" in line:
        state, code = line.split("|", 1)
        return {"state": state.split()[0], "exit_code": _exit_code("ExitCode=" + code), "reason": ""}
    try:
        code = int((job_dir / layout.SLURM_DIR / layout.SLURM_EXIT_FILE).read_text().strip())
    except (OSError, ValueError):
        return {"state": None, "exit_code": None, "reason": ""}
    return {"state": "COMPLETED" if code == 0 else "FAILED", "exit_code": code, "reason": ""}


def _exit_code(text: str) -> int | None:
    m = re.search(r"\bExitCode=(\d+):(\d+)", text)
    if not m:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    return exit_status(-sig) if sig else code


def requeue_message(state: dict, pending: bool) -> str:
    """What a live job's record says once Slurm requeued it: attempts counted from 1 here, from 0 in its records."""
    restarts, when, why = state.get("restarts") or 0, state.get("start") or "Unknown", state.get("reason") or "None"
    if not restarts:
        return ""
    said = f"requeued (attempt {restarts + 1}, recorded as attempt {restarts})"
    if not pending:
        return said + " and running again"
    return said + (f"; Slurm starts it again at {when}" if when != "Unknown" else "") + (f" ({why})" if why != "None" else "")


def _apply(record: JobRecord, state: dict) -> JobRecord:
    name = state["state"]
    if name is None:
        return record.with_changes(
            status="lost", finished=utc_now(), message="Slurm no longer knows this job and it recorded no exit code"
        )
    if name in PENDING:
        return record.with_changes(status="pending", message=requeue_message(state, pending=True))
    final = "succeeded" if name in SUCCEEDED else "cancelled" if name in CANCELLED else "failed" if name in FAILED else None
    if final is None:
        return record.with_changes(status="running", message=requeue_message(state, pending=False))
    code = state["exit_code"]
    message = "" if final == "succeeded" else f"Slurm state {name}" + (f" ({state['reason']})" if state["reason"] not in ("", "None") else "")
    return record.with_changes(status=final, exit_code=code, finished=utc_now(), message=message)

