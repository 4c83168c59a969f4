"""What an attempt of a job wrote, recorded when it ends (SPEC §18 "Which outputs came out of it").

A job's outputs are its working directory (``work/``) and the directories ``forge.yaml``
declares under ``outputs:``: absolute paths or paths starting with ``$VAR`` / ``${VAR}``,
expanded on the node with the job's id as ``FORGE_JOB_ID``. When an attempt ends, on every
backend, :func:`record_attempt_end`:

- writes the **outputs manifest** of this host into ``<job dir>/lineage/``:
  ``outputs-a<attempt>-<host>.json``, each file's path (relative to its directory), size
  and modification time (ns). No file is read: the walk costs one ``stat`` per file, so it
  fits the end of a Slurm allocation. Digests are made later, by whoever asks;
- writes the **provenance sidecar** ``.forge-provenance.json`` into each declared output
  directory: the job id, the attempt, each plugin's pin with the yank facts known at
  submit, and the parameters. The lineage then travels with the files. A sidecar another
  job left there keeps that job's entry (one entry per job id, the newest attempt).

The launcher records it when its entrypoint returns (in its own process: a few ms); on Ray
it also asks the job's other hosts for theirs (:mod:`.ray_outputs`). A
launcher that was killed (a cancel, a time limit, a preemption) cannot, so each backend
makes up for it where the attempt ends, when this attempt and host have no manifest yet:
the local backend's supervisor (:func:`record_attempt_end`), the Slurm collect and keeper
steps (``python -m starforge.cluster.lineage --spec JOBSPEC --job-dir DIR --if-missing``,
under the node's ``python3`` with the runtime zip on ``PYTHONPATH``). Nothing here runs on
a worker's boot path.

Standard library only.

>>> expand_dir("$FORGE_JOB_ID/x", {"FORGE_JOB_ID": "j1"}) is None  # not absolute once expanded
True
>>> expand_dir("/ckpt/${FORGE_JOB_ID}", {"FORGE_JOB_ID": "j1"})
'/ckpt/j1'
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys

from .jobdir_layout import LINEAGE_DIR, WORK_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping

SIDECAR = ".forge-provenance.json"
MANIFEST_SCHEMA = "forge/outputs/v1"
SIDECAR_SCHEMA = "forge/provenance-sidecar/v1"
OUTPUT_DIR_ENV = "FORGE_OUTPUT_DIR"  # the first declared output directory, as the job sees it
SIDECAR_JOBS_KEPT = 64  # entries of other jobs a sidecar keeps (a shared directory many jobs write)
SIDECAR_READ_CAP = 1 << 20  # bytes of an existing sidecar read before it is replaced
DEFAULT_SAMPLE_ABOVE = 4 << 30  # files above this are matched by size and a sampled digest
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def declared_dir_problem(text: object) -> str | None:
    """Why *text* cannot be an ``outputs:`` directory, or None.

    >>> print(declared_dir_problem("ckpt/run"))
    expected an absolute path or one starting with $VAR, got 'ckpt/run'
    """
    if not isinstance(text, str) or not text.strip():
        return f"expected a directory path, got {text!r}"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return f"{text!r} holds a control character"
    if not (text.startswith("/") or _VAR.match(text)):
        return f"expected an absolute path or one starting with $VAR, got {text!r}"
    return None


def expand_dir(text: str, env: Mapping[str, str]) -> str | None:
    """*text* with ``$VAR`` and ``${VAR}`` replaced from *env*; None when a variable is
    unset, *text* is not a declared directory (:func:`declared_dir_problem`) or the result
    is not an absolute path."""
    if declared_dir_problem(text):
        return None
    missing = []

    def value(m) -> str:
        name = m.group(1) or m.group(2)
        if name not in env:
            missing.append(name)
            return ""
        return env[name]

    out = _VAR.sub(value, text)
    if missing or not out.startswith("/"):
        return None
    return os.path.normpath(out)


def output_dirs(spec, env: Mapping[str, str]) -> list:
    """``[(declared, path or None)]`` for the spec's declared output directories, expanded
    with the job's id as ``FORGE_JOB_ID``."""
    env = dict(env, FORGE_JOB_ID=spec.id)
    return [(d, expand_dir(d, env)) for d in (spec.lineage or {}).get("outputs", ())]


def output_environment(spec, env: Mapping[str, str]) -> dict:
    """``{FORGE_OUTPUT_DIR: first declared directory}`` for the job's processes (``{}`` with none)."""
    for _declared, path in output_dirs(spec, env):
        if path:
            return {OUTPUT_DIR_ENV: path}
    return {}


def scan(root: str) -> list:
    """``[[relpath, size, mtime_ns], …]`` of the regular files under *root*, sorted; links
    are not followed, the sidecar is left out. One ``stat`` per file, no file opened."""
    out: list = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            name = rel + "/" + e.name if rel else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(name)
            elif stat.S_ISREG(st.st_mode) and name != SIDECAR:
                out.append([name, st.st_size, st.st_mtime_ns])
    out.sort()
    return out


def pins(spec, yanks: Mapping[str, Any] | None = None) -> list:
    """``[{ref, digest, yank}]`` of the spec's plugins and built-ins; ``yank`` is the facts
    known at submit (``{"yanked": bool, "reason": …}``), None when none were recorded."""
    facts = (spec.lineage or {}).get("yanks", {}) if yanks is None else yanks
    out = []
    for p in tuple(spec.plugins) + tuple(spec.recipe_plugins):
        out.append({"ref": p.ref, "digest": p.tree_digest, "yank": facts.get(p.ref)})
    return out


def sidecar_entry(spec, attempt: int, ended: str) -> dict:
    """This job's entry in a sidecar."""
    return {
        "job_id": spec.id, "name": spec.name, "attempt": attempt, "ended": ended, "backend": spec.backend,
        "plugins": pins(spec), "params": dict(spec.hyperparams),
    }


def write_sidecar(directory: str, entry: dict) -> None:
    """Write *entry* into *directory*'s sidecar, keeping other jobs' entries (bounded)."""
    from .atomic import write_file

    path = os.path.join(directory, SIDECAR)
    others: list = []
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            raw = f.read(SIDECAR_READ_CAP + 1)
        old = json.loads(raw) if len(raw) <= SIDECAR_READ_CAP else None
        if isinstance(old, dict) and isinstance(old.get("jobs"), list):
            others = [j for j in old["jobs"] if isinstance(j, dict) and j.get("job_id") != entry["job_id"]]
    except (OSError, ValueError):
        pass
    doc = {"schema": SIDECAR_SCHEMA, "jobs": others[-SIDECAR_JOBS_KEPT:] + [entry]}
    write_file(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def manifest_name(attempt: int, host: str) -> str:
    return f"outputs-a{attempt}-{host}.json"


def record_attempt_end(spec_path: str, job_dir: str, attempt: int | None = None, host: str | None = None,
                       env: Mapping[str, str] | None = None, work: str | None = None, if_missing: bool = False,
                       by: str = "launcher", spec=None, node_local_work: bool = False) -> str | None:
    """Record the end of an attempt (see the module doc); return the manifest's path (None
    for a ``forge plan --backend`` job, which runs no entrypoint).

    *spec*: the job's JobSpec when the caller holds it parsed (else read from *spec_path*);
    *work*: the job's working directory (default: as the environment names it); *by*: who
    records it (the manifest's ``recorded_by``: the launcher, or the backend making up for
    a launcher that was killed); *node_local_work*: ``work/`` is this host's own copy (Ray,
    no shared file system), perhaps at the same path as other hosts' copies, so the
    manifest marks it ``node_local`` and its files are told apart by host. With
    *if_missing*, nothing is done when this attempt and host already have a manifest (the
    launcher wrote it; the backend's own end of the attempt only makes up for a launcher
    that was killed). Nothing here raises for a directory that is missing, unreadable or
    not writable: the manifest says so (``missing``, ``sidecar`` holds the reason).
    """
    from .atomic import write_file
    from .attempts import last_attempt
    from .environment import work_dir
    from .jobspec import read_spec
    from .utctime import utc_now

    env = dict(os.environ if env is None else env)
    if attempt is None:
        attempt = last_attempt(job_dir, env)
    host = host or short_host()
    out = os.path.join(job_dir, LINEAGE_DIR, manifest_name(attempt, host))
    if if_missing and os.path.exists(out):
        return out
    if spec is None:
        spec = read_spec(spec_path)
    if spec.ledger_only:  # forge plan --backend: the load phase only, nothing trained or written
        return None
    ended = utc_now()
    dirs: list[dict[str, Any]] = [{"kind": "work", "declared": WORK_DIR + "/", "path": work or work_dir(job_dir, env)}]
    if node_local_work:
        dirs[0]["node_local"] = True
    dirs += [{"kind": "declared", "declared": d, "path": p} for d, p in output_dirs(spec, env)]
    entry = sidecar_entry(spec, attempt, ended)
    for d in dirs:
        path = d["path"]
        if path is None:
            d["unresolved"] = True
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            d["missing"] = True
            continue
        d["files"] = scan(path)
        if d["kind"] == "declared":
            try:
                write_sidecar(path, entry)
                d["sidecar"] = True
            except OSError as exc:
                d["sidecar"] = f"not written: {exc.strerror or exc}"
    doc = {
        "schema": MANIFEST_SCHEMA, "job_id": spec.id, "attempt": attempt, "host": host, "ended": ended, "recorded_by": by,
        "sample_above": (spec.lineage or {}).get("sample_above", DEFAULT_SAMPLE_ABOVE), "dirs": dirs,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_file(out, json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    return out


def short_host() -> str:
    """This host's short name, as manifests are named by it (``hostname -s``; the kernel's node
    name, as ``socket.gethostname`` reads it, without importing ``socket`` at a job's end)."""
    name = os.uname().nodename.split(".")[0]
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "host"


def main(argv: list | None = None) -> int:
    """``python -m starforge.cluster.lineage --spec JOBSPEC --job-dir DIR [--attempt N] [--host H] [--if-missing]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m starforge.cluster.lineage")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--attempt", type=int)
    parser.add_argument("--host")
    parser.add_argument("--if-missing", action="store_true")
    parser.add_argument("--by", default="collect step")
    args = parser.parse_args(argv)
    try:
        record_attempt_end(args.spec, args.job_dir, args.attempt, args.host, if_missing=args.if_missing, by=args.by)
    except Exception as exc:  # the end of an attempt: say it, never hide the job's own exit
        sys.stderr.write(f"warning : outputs manifest not recorded: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
