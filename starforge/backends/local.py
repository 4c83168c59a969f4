"""The ``local`` backend: run the launcher on this machine as a subprocess.

The job directory is staged under the experiment (``<experiment>/.forge/jobs/<id>/``).
A small supervising process starts in its own session while the job is staged
(``python -m starforge.backends.local --supervise STORE ID JOB_DIR SUBMIT_PID``) and waits
on its start pipe. ``submit`` saves the job's record naming that supervisor (one write),
then hands it the job's binding; the supervisor

1. starts ``python .forge-runtime/starforge-runtime.zip --spec <job dir>/jobspec.json``
   (the interpreter running forge is the job's default Python: SPEC §14) in a new process
   group (and session) with the job directory as working directory, its stdout and
   stderr going to ``<job dir>/log.txt``;
2. records status ``running`` and the launcher's pid (= its process group id);
3. waits, records the end of the attempt when the launcher could not (the outputs manifest
   and sidecars of :mod:`starforge.cluster.lineage`), then records the exit code (a death by signal N is 128+N, as a shell says) and
   ``succeeded``, ``failed`` or, when a cancel was asked for, ``cancelled``.

A ``forge submit`` killed before the handover leaves no job pending for ever: with no record
saved, its supervisor removes what was staged (:func:`abandoned_by_submit`); with one, the
supervisor ends unused and :meth:`LocalBackend.refresh` turns the job ``lost``.

Because the supervisor owns the job, ``forge submit --detach`` can return at once and the
record is still completed. A waiting ``forge submit`` follows ``log.txt`` (so the output
reaches the terminal and stays in the log); Ctrl-C reaches only the submitting process
(the job is in another session), which then cancels the job: SIGTERM to the launcher's
process group, SIGKILL after a grace period (``FORGE_CANCEL_GRACE``, default 10 s).

Laptop side, standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..cluster.atomic import process_alive
from ..cluster.jobdir_layout import LOCAL_LOG, SPEC_FILE, STATUS_FILE
from ..cluster.status import SPEC_EXIT, VERIFY_EXIT
from ..cluster.utctime import utc_now
from ..errors import BackendError
from ..jobs.binding import check_runtime
from ..jobs.store import JobStore
from ..state.credentials import shield_credentials, without_credentials
from .base import Backend, JobRecord, exit_status, follow_file, node_entry

if TYPE_CHECKING:
    from ..jobs.staged import StagedJob

LOG_NAME = LOCAL_LOG
_POLL = 0.1
CLAIM_GRACE = 60.0  # seconds an earlier release's record may go without naming its supervisor


class LocalBackend(Backend):
    name = "local"
    resolves_python_here = True  # the job runs on this machine: its python: is checked at submit

    def __init__(self, settings=None, store: JobStore | None = None) -> None:
        super().__init__(settings, store)
        self._children: dict = {}  # job id -> Popen of the supervisor this process started
        self._ended: dict = {}  # job id -> read end of a pipe that ends when that supervisor ends
        self._waiting: dict = {}  # job id -> (Popen, write end of its start pipe, ended) of a prepared supervisor

    def prepare(self, job_id: str, job_dir: Path) -> None:
        """Start the supervisor of *job_id* while the job is staged at *job_dir*: its
        interpreter starts and imports meanwhile (on another CPU where there is one), then
        waits for the job's binding on its start pipe (:meth:`submit` writes it). When the
        pipe closes without one (staging failed, or this process was killed), it ends,
        having removed what this process left of a job no record names
        (:func:`abandoned_by_submit`)."""
        self.discard(job_id)
        try:
            self._waiting[job_id] = self._start_waiting(job_id, job_dir)
        except OSError:
            return  # submit starts one, as it does for a job nobody prepared

    def discard(self, job_id: str) -> None:
        waiting = self._waiting.pop(job_id, None)
        if waiting is not None:
            proc, start_write, ended = waiting
            os.close(start_write)  # end-of-file before any binding: it ends
            os.close(ended)
            proc.wait()

    def _start_waiting(self, job_id: str, job_dir: Path) -> tuple:
        """A supervisor for *job_id* waiting on its start pipe: ``(Popen, start pipe's write end, ended)``.

        It holds the write end of the *ended* pipe and nothing else does (it starts the
        launcher with every other descriptor closed): the read end sees end-of-file the
        moment the supervisor ends, so a waiting submit wakes then, not at its next poll.
        """
        job_dir = Path(job_dir).parent.resolve() / Path(job_dir).name
        ended, holder = os.pipe()
        start_read, start_write = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "starforge.backends.local", "--supervise", str(self.store.root), job_id,
                 str(job_dir), str(os.getpid())],
                stdin=start_read,
                stdout=subprocess.DEVNULL,  # once started, its output goes to the job's log
                start_new_session=True,
                pass_fds=(holder,),
                env=without_credentials(),  # the supervisor and the job never see push credentials
            )
        except OSError:
            for fd in (ended, start_write):
                os.close(fd)
            raise
        finally:
            os.close(holder)
            os.close(start_read)
        return proc, start_write, ended

    def submit(self, staged: StagedJob, *, detach: bool) -> JobRecord:
        job_dir = Path(staged.dir).resolve()
        spec = staged.spec
        if not (job_dir / SPEC_FILE).is_file():
            self.discard(spec.id)
            raise BackendError(f"{job_dir}: no {SPEC_FILE}; stage the job first")
        try:
            waiting = self._waiting.pop(spec.id, None) or self._start_waiting(spec.id, job_dir)
        except OSError as exc:
            raise BackendError(f"cannot start job {spec.id}: {exc}") from None
        self._waiting[spec.id] = waiting
        # The record names its supervisor from its first write, and the supervisor gets the
        # job only after that: a submit killed at any point leaves either no record (its
        # supervisor then removes what was staged) or one whose supervisor's end turns it lost.
        try:
            self._save_new_record(dataclasses.replace(staged, dir=job_dir), created=spec.created,
                                  backend_ref={"supervisor_pid": waiting[0].pid})
        except BaseException:
            self.discard(spec.id)
            raise
        del self._waiting[spec.id]
        shield_credentials()  # the job's plugin code runs on this machine, below this process
        proc, ended = self._hand_over(spec.id, job_dir, staged.binding, waiting)
        self._children[spec.id] = proc
        if detach:
            os.close(ended)  # nothing here waits for this job
        else:
            self._ended[spec.id] = ended
        return self.store.get(spec.id)

    def _hand_over(self, job_id: str, job_dir: Path, bound, waiting: tuple) -> tuple:
        """Write the binding to the recorded supervisor's start pipe: ``(Popen, ended)``. One that
        ended before its job was ready (a broken pipe) is reaped and replaced by another, named
        in the record before it gets the job."""
        line = f"{bound.runtime_sha256} {bound.spec_sha256}\n".encode("ascii")
        proc, start_write, ended = waiting
        if _write_start(start_write, line):
            return proc, ended
        os.close(ended)
        proc.wait()
        try:
            proc, start_write, ended = self._start_waiting(job_id, job_dir)
        except OSError as exc:
            message = f"could not start: {exc}"
            self.store.update(job_id, lambda r: r.with_changes(status="failed", message=message, finished=utc_now()))
            raise BackendError(f"cannot start job {job_id}: {exc}") from None
        pid = proc.pid
        self.store.update(job_id, lambda r: r.with_changes(backend_ref={**r.backend_ref, "supervisor_pid": pid}))
        if _write_start(start_write, line):
            return proc, ended
        os.close(ended)
        proc.wait()
        self.store.update(job_id, lambda r: r.with_changes(
            status="failed", message="could not start: its supervisor ended before it was handed the job",
            finished=utc_now()))
        raise BackendError(f"cannot start job {job_id}: its supervising process ended at once")

    def refresh(self, record: JobRecord) -> JobRecord:
        record = self.store.get(record.id)
        if record.final:
            return record
        sup = record.backend_ref.get("supervisor_pid")
        if sup is None:
            # Saved by an earlier release, which named the supervisor in a second write: a
            # record still without one a while later was left by a submit killed in between.
            if not self._unclaimed(record):
                return record
            message = "no supervising process was ever recorded: forge submit ended before it started the job"
        elif self._supervisor_alive(record.id, sup):
            return record
        elif "pid" not in record.backend_ref:
            message = ("the job never started: its supervising process ended before it started the launcher "
                       "(as when forge submit is killed before it hands the job over)")
        else:
            message = "the supervising process ended without recording an exit code"

        def lost(r: JobRecord) -> JobRecord:
            if r.final:
                return r
            return r.with_changes(status="lost", finished=utc_now(), message=message)

        return self.store.update(record.id, lost)

    def logs(self, record: JobRecord, follow: bool = False) -> Iterator[str]:
        child = self._children.get(record.id)
        if child is None:
            return follow_file(Path(record.dir) / LOG_NAME, self, record, follow, poll=_POLL)

        def pause(seconds: float) -> None:
            # The supervisor this process started ends right after it records the exit
            # code: waiting for its pipe to end (end-of-file) ends the wait then, not at
            # the next poll (Popen.wait with a timeout polls, up to 50 ms late).
            ended = self._ended.get(record.id)
            if ended is not None:
                readable, _, _ = select.select([ended], [], [], seconds)
                if readable:
                    child.wait()
                    self._forget_pipe(record.id)
                return
            try:
                child.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass

        def chunks() -> Iterator[str]:
            try:
                yield from follow_file(Path(record.dir) / LOG_NAME, self, record, follow, poll=_POLL, pause=pause)
            finally:
                if follow:
                    self._forget_pipe(record.id)  # followed to the end (or given up): nothing waits on it now

        return chunks()

    def _forget_pipe(self, job_id: str) -> None:
        ended = self._ended.pop(job_id, None)
        if ended is not None:
            os.close(ended)

    def cancel(self, record: JobRecord) -> JobRecord:
        def ask(r: JobRecord) -> JobRecord:
            return r if r.final else r.with_changes(backend_ref={**r.backend_ref, "cancel_requested": True})

        record = self.store.update(record.id, ask)
        if record.final:
            return record
        grace = float(os.environ.get("FORGE_CANCEL_GRACE", "10"))
        pgid = record.backend_ref.get("pgid")
        if pgid is not None:
            _signal_group(pgid, signal.SIGTERM, record)
        record = self._wait_final(record, grace)
        if record.final:
            return record
        record = self.store.get(record.id)
        pgid = record.backend_ref.get("pgid")
        if pgid is not None:
            _signal_group(pgid, signal.SIGKILL, record)
        record = self._wait_final(record, 5.0)
        if record.final:
            return record
        return self.store.update(
            record.id,
            lambda r: r
            if r.final
            else r.with_changes(status="cancelled", finished=utc_now(), message="cancelled; no exit code was recorded"),
        )

    def _wait_final(self, record: JobRecord, seconds: float) -> JobRecord:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            record = self.refresh(record)
            if record.final:
                return record
            time.sleep(_POLL)
        return record

    def _unclaimed(self, record: JobRecord) -> bool:
        """Whether *record*, naming no supervisor, was written over :data:`CLAIM_GRACE` seconds ago."""
        try:
            return time.time() - self.store.path(record.id).stat().st_mtime > CLAIM_GRACE
        except OSError:
            return False

    def _supervisor_alive(self, job_id: str, pid: int) -> bool:
        child = self._children.get(job_id)
        if child is not None:
            return child.poll() is None
        return _process_matches(pid, job_id)


def _write_start(fd: int, line: bytes) -> bool:
    """Write *line* to a supervisor's start pipe and close it; False when that supervisor is gone."""
    try:
        os.write(fd, line)
        return True
    except OSError:  # a broken pipe: it ended before its job was ready
        return False
    finally:
        os.close(fd)


def _process_matches(pid: int, marker: str) -> bool:
    """Whether *pid* is alive and (where /proc tells) its command line mentions *marker*."""
    if not process_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return marker.encode() in cmdline


def _signal_group(pgid: int, sig: int, record: JobRecord) -> None:
    """Signal the launcher's process group, unless its id now belongs to someone else.

    While the leader lives, its command line must name this job's spec (a recycled pid
    would not). Once the leader is gone, a group with that id can only be the job's own
    leftover processes: Linux does not hand out a pid still used as a process group id.
    """
    if process_alive(pgid) and not _process_matches(pgid, str(Path(record.dir) / SPEC_FILE)):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# -- the supervising process ----------------------------------------------------------------

def _open_log(job_dir: Path, buffering: int = -1):
    """The job's log for appending, created readable by all and writable by the user only."""
    fd = os.open(job_dir / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "ab", buffering=buffering)


def _outlive(signum, frame) -> None:
    """The supervisor's handler for SIGINT and SIGHUP: it keeps supervising."""


def supervise(store_root: str, job_id: str, runtime_sha256: str, spec_sha256: str) -> int:
    """Run the launcher for *job_id* and record how it ended (the body of the supervisor).

    The job's binding (SPEC §9) comes as arguments: the runtime zip is checked here,
    outside it, before it runs; the JobSpec's hash goes to the launcher as ``--spec-sha256``.
    """
    # Whatever the submitter's umask, nothing the job creates in its directory (the
    # bootstrap on every process's path, provenance) is writable by other users.
    os.umask(os.umask(0) | 0o002)
    # The supervisor outlives these signals; the job starts with them as forge submit had
    # them (docs/launcher.md, "Signals"): one the submitting shell ignored (nohup, a
    # background job without job control) stays ignored, otherwise the launcher gets the
    # default back, since a handler (unlike SIG_IGN) is reset when it starts.
    for sig in (signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _outlive)
    store = JobStore(Path(store_root))
    record = store.get(job_id)
    job_dir = Path(record.dir)
    env = without_credentials()
    for stale in ("FORGE_PYTHON", "FORGE_PYTHON_FROM"):  # the node entry works these out for this job
        env.pop(stale, None)
    env["PYTHONUNBUFFERED"] = "1"
    env["FORGE_JOB_ID"] = job_id
    with store.locked(job_id):
        record = store.get(job_id)
        if record.backend_ref.get("cancel_requested"):
            store.save(record.with_changes(status="cancelled", finished=utc_now(), message="cancelled before it started"))
            return 0
        with _open_log(job_dir, buffering=0) as log:
            refused = check_runtime(job_dir, runtime_sha256)
            if refused:
                log.write(f"error: {refused}\n".encode())
                _write_status(job_dir, "verify", VERIFY_EXIT, refused)
                store.save(record.with_changes(status="failed", exit_code=VERIFY_EXIT, finished=utc_now(), message=refused))
                return 0
            try:
                proc = subprocess.Popen(
                    node_entry(sys.executable, str(job_dir), spec_sha256),
                    cwd=job_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                )
            except OSError as exc:
                store.save(record.with_changes(status="failed", finished=utc_now(), message=f"could not start the launcher: {exc}"))
                return 1
        store.save(
            record.with_changes(status="running", backend_ref={**record.backend_ref, "pid": proc.pid, "pgid": proc.pid})
        )
    returncode = proc.wait()
    code = exit_status(returncode)
    record_outputs(job_dir, env)

    def finish(r: JobRecord) -> JobRecord:
        if r.backend_ref.get("cancel_requested"):
            return r.with_changes(status="cancelled", exit_code=code, finished=utc_now(), message="cancelled")
        status = "succeeded" if code == 0 else "failed"
        message = "" if code == 0 else _failure_message(job_dir, code)
        return r.with_changes(status=status, exit_code=code, finished=utc_now(), message=message)

    store.update(job_id, finish)
    return 0


def record_outputs(job_dir: Path, env: dict) -> None:
    """The end of the attempt (SPEC §18): the outputs manifest and the sidecars, written here
    when the launcher could not (it was cancelled or killed); a failure is said in the log."""
    from ..cluster.lineage import record_attempt_end

    try:
        record_attempt_end(str(job_dir / SPEC_FILE), str(job_dir), env=env, if_missing=True, by="local supervisor")
    except Exception as exc:  # the job's own end stays what it was
        with contextlib.suppress(OSError), _open_log(job_dir) as log:
            log.write(f"warning : outputs manifest not recorded: {exc}\n".encode())


def supervise_when_staged(store_root: str, job_id: str, job_dir: str, stager: str) -> int:
    """The body of a supervisor started before its job was handed over (:meth:`LocalBackend.prepare`):
    wait for the binding on the start pipe (standard input), then, its own output going to
    the job's log from there on, :func:`supervise` the job. End-of-file first: the submit
    (process *stager*, staging the job at *job_dir*) ended without handing it over; see
    :func:`abandoned_by_submit`."""
    words = sys.stdin.buffer.readline().decode("ascii", "replace").split()
    if len(words) != 2:
        abandoned_by_submit(JobStore(Path(store_root)), job_id, Path(job_dir), int(stager))
        return 0
    job_dir = JobStore(Path(store_root)).get(job_id).dir
    with _open_log(Path(job_dir)) as log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    os.chdir(job_dir)
    return supervise(store_root, job_id, *words)


def abandoned_by_submit(store: JobStore, job_id: str, job_dir: Path, stager: int) -> list:
    """Remove what the submit *stager* left of *job_id* when it ended without handing the job
    over and no record names it: its staging folders of that job (killed while staging)
    and the job directory it renamed into place (killed before recording it). A recorded
    job keeps its directory: its supervisor's end turns it lost. Returns what was removed.

    After a failure the submit cleaned up itself, so nothing is left to remove.
    """
    from ..jobs.leftovers import sweep
    from ..jobs.staged import remove_tree

    if store.path(job_id).exists():
        return []
    removed = [leftover.path for leftover in sweep(job_dir.parent, job_id=job_id, pid=stager)]
    with contextlib.suppress(OSError):
        st = os.lstat(job_dir)
        if os.path.realpath(job_dir.parent) == str(job_dir.parent) and stat.S_ISDIR(st.st_mode) \
                and st.st_uid == os.geteuid():  # this user's own directory there, never a link or through one
            remove_tree(job_dir)
            removed.append(job_dir)
    return removed


def _write_status(job_dir: Path, phase: str, code: int, message: str) -> None:
    """``status.json`` as the launcher writes it, for a job whose launcher never ran."""
    from ..cluster.launcher import write_status

    write_status(str(job_dir), phase, code, None, message)


def _failure_message(job_dir: Path, code: int) -> str:
    """Which launcher phase failed, from its ``status.json`` ("" when the trainer decided)."""
    import json

    try:
        status = json.loads((job_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(status, dict):
        return ""
    phase, plugin = status.get("phase"), status.get("plugin")
    if phase and phase != "entrypoint" or plugin:
        return f"launcher phase {phase}" + (f", plugin {plugin}" if plugin else "")
    return ""


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--supervise":  # the binding comes on standard input
        sys.exit(supervise_when_staged(*sys.argv[2:6]))
    print("usage: python -m starforge.backends.local --supervise STORE_DIR JOB_ID JOB_DIR SUBMIT_PID", file=sys.stderr)
    sys.exit(SPEC_EXIT)  # bad usage, as the launcher says it
