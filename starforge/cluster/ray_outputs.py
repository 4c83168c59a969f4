"""The outputs manifests of a Ray job's other hosts, asked for by the launcher (SPEC §18).

On Ray every node unpacks the job package at a path of its own, and a worker of the job
writes relative paths into that host's copy of ``work/``; a declared output directory may be
a node-local path too. Ray deletes those copies after the job. The job's workers cannot
record their host's outputs on their way out: when a Ray job ends (its driver returns, or
calls ``ray.shutdown()``), the raylets end the job's workers with ``SIGKILL`` (seen with Ray
2.60: actors by ``KillLocalActor``, leased workers "because its job finished", idle ones
"whose job has exited"), so neither an ``atexit`` handler nor a ``SIGTERM`` handler of a
worker runs. So the launcher asks, while Ray still runs, once per attempt: just before the
training entrypoint shuts Ray down, or when it returns with Ray still connected
(:class:`OtherHosts`).

It runs :func:`host_manifest` as one task pinned to each other live node of the cluster
(no CPU asked for; its own worker, never one of the job's: the task carries an environment
variable of its own, so Ray starts a fresh worker for it). On a node where no other process
of the job wrote its provenance record, it lists nothing and returns None; elsewhere it
records the end of the attempt for that host (:func:`.lineage.record_attempt_end`:
``work/`` as Ray unpacked it there, the declared directories as that host sees them,
``recorded_by: ray worker host``) and returns the manifest's text. The launcher prints each
one it gets (up to :data:`.provenance_log.OUTPUTS_HOST_CAP`, and none naming the launcher's
own host, whose manifest the launcher writes itself) as numbered frames into the
job's log (:func:`.provenance_log.emit_outputs`; before its own when asked at
``ray.shutdown()``, after it otherwise), where the Ray backend reads them back as untrusted
input. The manifests come back through Ray's object store rather
than through the workers' own output: Ray forwards a worker's output to the driver's log
a while later, and the driver ending first would lose it.

Nothing of this runs on a worker's boot path: :func:`host_manifest` only in the task the
launcher starts, the rest in the launcher. Standard library only (``ray`` only inside the
Ray job, imported there by the entrypoint already).
"""

from __future__ import annotations

import os
import sys

from .lineage import short_host
from .provenance_log import OUTPUTS_HOST_CAP, emit_outputs

ASKED_ENV = "FORGE_RAY_OUTPUTS_TASK"  # set in the task's own worker: never one of the job's
TIMEOUT = 60.0  # seconds the launcher waits for the other hosts' manifests, all together
RECORDED_BY = "ray worker host"


def ran_here(job_dir: str, pid: int | None = None) -> bool:
    """Whether a process of the job other than *pid* (default: this one) wrote its provenance
    record into this host's copy of the job directory."""
    from .provenance import others_recorded

    return others_recorded(job_dir, os.getpid() if pid is None else pid)


def host_manifest(attempt: int) -> str | None:
    """In a Ray worker on another node: this host's outputs manifest for *attempt*, as text,
    or None when no other process of the job ran on this host."""
    from .environment import work_dir
    from .jobdir_layout import SPEC_FILE
    from .lineage import record_attempt_end

    job_dir = os.environ.get("FORGE_JOB_DIR") or os.getcwd()
    if not ran_here(job_dir):
        return None
    path = record_attempt_end(os.path.join(job_dir, SPEC_FILE), job_dir, attempt, work=work_dir(job_dir),
                              by=RECORDED_BY, node_local_work=True)
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        return f.read(OUTPUTS_HOST_CAP + 1)


def _host_of(text: str):
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc.get("host") if isinstance(doc, dict) else None


class OtherHosts:
    """The launcher's question to the other hosts of its Ray job, asked at most once."""

    def __init__(self, attempt: int, say=None, timeout: float = TIMEOUT) -> None:
        self.attempt = attempt
        self.timeout = timeout
        self.asked = False
        self._say = say or (lambda line: sys.stderr.write(line + "\n"))

    def gather(self) -> int:
        """Ask every other live node for its manifest and print those that come back; return
        how many were printed. Nothing happens when Ray is not connected, or when asked before."""
        ray = sys.modules.get("ray")
        if self.asked or ray is None or not getattr(ray, "is_initialized", lambda: False)():
            return 0
        self.asked = True
        try:
            return self._gather(ray)
        except Exception as exc:  # noqa: BLE001 - the job's own end stands whatever happens here
            self._say(f"warning : outputs of the job's other hosts not gathered: {type(exc).__name__}: {exc}")
            return 0

    def _gather(self, ray) -> int:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        own = ray.get_runtime_context().get_node_id()
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("NodeID") != own)
        if not nodes:
            return 0
        task = ray.remote(num_cpus=0, max_retries=0)(host_manifest)
        asked = {
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                         runtime_env={"env_vars": {ASKED_ENV: "1"}}).remote(self.attempt): node
            for node in nodes
        }
        ready, late = ray.wait(list(asked), num_returns=len(asked), timeout=self.timeout)
        printed = 0
        for ref in ready:
            try:
                text = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - one node's failure loses that node only
                self._say(f"warning : outputs of node {asked[ref][:12]} not gathered: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if not isinstance(text, str):
                continue
            if len(text) > OUTPUTS_HOST_CAP:
                self._say(f"warning : outputs of node {asked[ref][:12]} not kept: the manifest is larger than "
                          f"{OUTPUTS_HOST_CAP} bytes")
                continue
            if _host_of(text) == short_host():  # its manifest would take the name of the launcher's own
                self._say(f"warning : outputs of node {asked[ref][:12]} not kept: that node's host name is this one's, "
                          f"{short_host()}")
                continue
            if emit_outputs(text):
                printed += 1
        for ref in late:
            self._say(f"warning : outputs of node {asked[ref][:12]} not gathered: no answer within {self.timeout:.0f} s")
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - it may have ended meanwhile
                pass
        return printed
