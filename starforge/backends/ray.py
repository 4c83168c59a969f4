"""The ``ray`` backend: a staged job submitted through the Ray Jobs REST API.

What it does, with nothing but httpx on the submitting machine (``ray`` is never imported
here):

1. packs the job directory into a zip with deterministic entries (sorted, fixed times,
   normalized modes) and names it after the sha256 of its bytes, so re-submitting the same
   directory uploads nothing new: ``GET /api/packages/gcs/<name>.zip``, ``PUT`` on 404;
2. submits ``POST /api/jobs/`` with that package as ``runtime_env.working_dir``, the
   launcher as the entrypoint (Ray runs it with the extracted package as its working
   directory, so ``jobspec.json`` is found beside it), and as ``runtime_env.env_vars`` the
   JobSpec's binding and, dormant as JSON in one variable, the bootstrap environment of
   the job's workers: the launcher's ``ray.init`` wrapper hands it to the workers with the
   launcher's Ray hook, so every Ray worker of the job verifies and applies the plugins
   too, while Ray's own job supervisor actor (which Ray starts with the job's
   ``runtime_env`` before the entrypoint) runs none of StarForge;
3. maps ``GET /api/jobs/<id>`` (status, ``driver_exit_code``, ``message``), ``/logs`` and
   ``/stop`` onto the job record; an ended job's record is final only once its log was read
   for the provenance records it carries (:func:`after_log_read`: retries bounded in count
   and time).

Settings (the ``ray:`` mapping of ``forge.yaml``): ``address`` (the Jobs API URL, e.g.
``http://127.0.0.1:8265``; ``FORGE_RAY_ADDRESS`` takes precedence, this is the default),
``entrypoint_num_cpus``, ``entrypoint_num_gpus``, ``entrypoint_resources`` (where Ray may
place the launcher process). A token for a head running with ``RAY_AUTH_MODE=token`` is read
from ``FORGE_RAY_TOKEN``, else where the ``ray`` CLI finds it (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``), and sent as ``Authorization: Bearer``.

Laptop side.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import stat
import time
import zipfile
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ..cluster.binding import SPEC_ENV
from ..cluster.jobdir_layout import LINEAGE_DIR, PROVENANCE_DIR, WORK_DIR
from ..cluster.provenance_log import ENV as PROVENANCE_LOG_ENV
from ..cluster.ray_init import PACKAGE_ENV, WORKER_ENV
from ..cluster.status import VERIFY_EXIT
from ..cluster.utctime import utc_now
from ..errors import BackendError, ManifestError
from ..jobs.binding import Binding
from ..state.credentials import without_credentials
from .base import LIVE, Backend, JobRecord, node_entry

if TYPE_CHECKING:
    from ..jobs.staged import StagedJob

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
SETTINGS = ("address", "entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_resources", "python")


# The Ray entrypoint's check of the runtime zip, outside the zip (SPEC §9 "Binding"): a
# few lines under the node's python3 (any version: no f-strings), then the zip's entry in
# the same process, as ``python3 ZIP ENTRY-ARGS...`` runs it (the zip, by its absolute path,
# first on sys.path; no working-directory entry), without a second interpreter start.
# argv: ZIP SHA256 ENTRY-ARGS...
ZIP_CHECK = (
    "import sys\n"
    "if sys.path[:1] == ['']: del sys.path[0]\n"  # before any import: no module from the package's root
    "import hashlib, os, runpy\n"
    "z, h = sys.argv[1], sys.argv[2]\n"
    "with open(z, 'rb') as f: g = hashlib.sha256(f.read()).hexdigest()\n"
    "if g != h:\n"
    "    sys.stderr.write('error: the job\\'s runtime zip %s changed after staging: its sha256 is %s, "
    f"the job was submitted with %s\\n' % (z, g, h)); sys.exit({VERIFY_EXIT})\n"
    "sys.argv[:] = [z] + sys.argv[3:]\n"
    "runpy.run_path(os.path.abspath(z), run_name='__main__')\n"
)


def launcher_command(binding: Binding) -> str:
    """The Ray entrypoint: the job's runtime zip under ``python3``, in the unpacked package.

    ``python3`` is what a plain Ray job entrypoint gets on the node (the PATH ``ray start``
    had); the zip's entry resolves the job's Python there (SPEC §14) and starts the
    launcher under it, so nothing of StarForge needs installing on the cluster. Before,
    :data:`ZIP_CHECK` compares the zip with the *binding* written into the entrypoint at
    submission, and the JobSpec's hash goes to the entry as ``--spec-sha256``. A JobSpec
    or zip changed in the uploaded package is refused here, by the entrypoint (exit 10,
    the usual error line and ``status.json``): nothing of StarForge runs in Ray's job
    supervisor, which starts it.
    """
    import shlex

    python, zip_path, *entry_args = node_entry("python3", spec_sha256=binding.spec_sha256)
    argv = [python, "-c", ZIP_CHECK, zip_path, binding.runtime_sha256, *entry_args]
    return " ".join(shlex.quote(a) for a in argv)

# Ray job status -> record status
STATUS: Mapping[Any, str] = {  # Ray's status (from JSON) -> ours
    "PENDING": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "STOPPED": "cancelled",
}

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_TIMEOUT = 30.0


def resolve_address(settings: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str:
    """The Jobs API base URL: ``FORGE_RAY_ADDRESS``, else ``ray.address``, else the local default.

    >>> resolve_address({"address": "10.0.0.5:8265"}, {})
    'http://10.0.0.5:8265'
    """
    env = os.environ if env is None else env
    address = env.get("FORGE_RAY_ADDRESS") or settings.get("address") or DEFAULT_ADDRESS
    if not isinstance(address, str):
        raise ManifestError(f"forge.yaml: ray.address: expected a URL string, got {address!r}")
    address = address.strip().rstrip("/")
    from ..urls import check_userinfo

    check_userinfo(address if "://" in address else "http://" + address, "Ray address")
    if address.startswith("ray://"):
        raise BackendError(
            f"{address} is a Ray Client address; the ray backend talks to the Jobs API (the dashboard port)",
            hint="use the dashboard URL, e.g. http://HEAD:8265",
        )
    if "://" not in address:
        address = "http://" + address
    if not address.startswith(("http://", "https://")):
        raise BackendError(f"unsupported Ray address {address!r}", hint="use http://HOST:PORT of the Ray dashboard")
    return address


def auth_token(env: Mapping[str, str] | None = None) -> str | None:
    """The bearer token for a head with token auth, or None.

    ``FORGE_RAY_TOKEN``, then Ray's own ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` and
    ``~/.ray/auth_token`` (as the ``ray`` CLI looks them up), unless ``RAY_AUTH_MODE=disabled``.
    """
    env = os.environ if env is None else env
    token = env.get("FORGE_RAY_TOKEN")
    if token or env.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return token or None
    token = env.get("RAY_AUTH_TOKEN")
    if not token and env.get("RAY_AUTH_TOKEN_PATH"):
        try:
            token = Path(env["RAY_AUTH_TOKEN_PATH"]).expanduser().read_text().strip()
        except OSError as exc:
            raise BackendError(f"cannot read the Ray token file: {exc}") from None
    if not token:
        default = Path.home() / ".ray" / "auth_token"
        token = default.read_text().strip() if default.is_file() else None
    return token or None


def build_package(job_dir: Path) -> tuple[str, bytes]:
    """The job directory as a zip with deterministic bytes, and its content-addressed name.

    Entries are the regular files below *job_dir* in sorted order, with fixed times and
    modes 0644, 0755, 0444 or 0555 (after the owner's write and execute bits: the staged
    read-only files stay read-only where Ray unpacks them). The job directory's
    ``provenance/`` and ``lineage/`` (records and outputs manifests read back from the log of
    an earlier run of it) are left out. A symlink or special file is refused:
    the package must hold exactly the bytes the launcher will verify.
    """
    job_dir = Path(job_dir)
    entries = []
    for dirpath, dirnames, filenames in os.walk(job_dir):
        if Path(dirpath) == job_dir:  # records and outputs manifests read back from an earlier run's log stay here
            dirnames[:] = [d for d in dirnames if d not in (PROVENANCE_DIR, LINEAGE_DIR)]
        dirnames.sort()
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            mode = os.lstat(full).st_mode
            rel = full.relative_to(job_dir).as_posix()
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise BackendError(f"{full}: not a regular file or directory; the job package holds files only")
            if stat.S_ISREG(mode):
                normalized = (0o644 if mode & stat.S_IWUSR else 0o444) | (0o111 if mode & stat.S_IXUSR else 0)
                entries.append((rel, full, normalized))
    if not entries:
        raise BackendError(f"{job_dir}: empty job directory")
    entries.sort(key=lambda e: e[0].encode("utf-8"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for rel, full, mode in entries:
            info = zipfile.ZipInfo(rel, date_time=_ZIP_TIME)
            info.create_system = 3  # unix, so the mode below is honoured
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, full.read_bytes())
    data = buf.getvalue()
    return f"starforge_{hashlib.sha256(data).hexdigest()[:32]}.zip", data


# httpx's default TLS context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), made once per
# process and value of those variables: each look at a job opens a client, and loading the
# CA bundle takes 0.1-0.3 s, which `forge jobs` paid once per Ray job listed.
_TLS: dict[tuple, Any] = {}


def _tls_context():
    import httpx

    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if key not in _TLS:
        _TLS[key] = httpx.create_ssl_context()
    return _TLS[key]


class RayJobsClient:
    """A thin client of the Ray Jobs REST API on one head; :meth:`close` ends its connections
    (in a ``with`` block: ``contextlib.closing``, as :meth:`RayBackend._client` gives it)."""

    def __init__(self, address: str, token: str | None = None, timeout: float = _TIMEOUT) -> None:
        import httpx

        self.address = address
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=address, headers=headers, timeout=timeout, verify=_tls_context())

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, ok=(200,), **kwargs):
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise BackendError(
                f"cannot reach the Ray Jobs API at {self.address}: {exc}",
                hint="start a Ray head with the dashboard, or set FORGE_RAY_ADDRESS / ray.address in forge.yaml",
            ) from None
        if response.status_code in (401, 403):
            raise BackendError(
                f"the Ray head at {self.address} refused the request ({response.status_code})",
                hint="set FORGE_RAY_TOKEN (or RAY_AUTH_TOKEN) to the cluster's auth token",
            )
        if response.status_code not in ok:
            body = " ".join(response.text.split())[-300:]
            raise BackendError(f"Ray Jobs API {method} {path}: HTTP {response.status_code}: {body}")
        return response

    def upload_package(self, name: str, data: bytes) -> str:
        """Upload *data* as ``gcs://<name>`` unless the head already has it; return the URI."""
        path = f"/api/packages/gcs/{name}"
        # The GET also pins the URI on the head for a while, covering the upload and submit.
        if self._request("GET", path, ok=(200, 404)).status_code == 404:
            self._request("PUT", path, content=data)
        return f"gcs://{name}"

    def job(self, submission_id: str) -> dict | None:
        """The job's info, or None when the head does not know it."""
        response = self._request("GET", f"/api/jobs/{submission_id}", ok=(200, 404))
        return None if response.status_code == 404 else response.json()

    def submit(self, request: dict) -> str:
        return self._request("POST", "/api/jobs/", json=request).json()["submission_id"]

    def logs(self, submission_id: str) -> str:
        return self._request("GET", f"/api/jobs/{submission_id}/logs").json().get("logs", "")

    def stop(self, submission_id: str) -> bool:
        return bool(self._request("POST", f"/api/jobs/{submission_id}/stop").json().get("stopped"))


class RayBackend(Backend):
    """Runs jobs on a Ray cluster through its Jobs REST API."""

    name = "ray"
    settings_keys = SETTINGS  # forge.yaml's ray: mapping; unknown keys are refused (the default check)
    outputs_elsewhere = f"{WORK_DIR}/ in each Ray node's copy of the job package (deleted by Ray; write to shared storage)"
    records_later = "a Ray job's records are read from its log once it has ended"

    @classmethod
    def cpu_only_settings(cls, settings: Mapping[str, Any]) -> dict:
        """No ``entrypoint_num_gpus``, no GPU-named ``entrypoint_resources``."""
        out = {k: v for k, v in settings.items() if k != "entrypoint_num_gpus"}
        if isinstance(out.get("entrypoint_resources"), dict):
            out["entrypoint_resources"] = {k: v for k, v in out["entrypoint_resources"].items() if "gpu" not in k.lower()}
        return out

    def _client(self, address: str) -> closing[RayJobsClient]:
        """A client of the Jobs API at *address*, for one ``with`` block (closed at its end)."""
        return closing(RayJobsClient(address, auth_token()))

    def submit(self, staged: StagedJob, *, detach: bool) -> JobRecord:
        from ..launch import bootstrap_env

        job_dir = Path(staged.dir)
        spec = staged.spec
        address = resolve_address(self.settings)
        # Relative paths: Ray unpacks the package elsewhere on each node and starts the
        # entrypoint and every worker inside it. This also writes .forge-runtime/ into the
        # job directory, so it must come before the package is built.
        workers = without_credentials({str(k): str(v) for k, v in bootstrap_env(job_dir, relative=True).items()})
        bound = staged.binding
        env = {
            SPEC_ENV: bound.spec_sha256,  # Ray workers compare their jobspec.json with it
            # Dormant until the driver's ray.init hands it, with our setup hook, to the
            # job's workers: Ray starts its job supervisor actor with this runtime_env too,
            # and the bootstrap must not act there (cluster/ray_init.py).
            WORKER_ENV: json.dumps(workers, sort_keys=True),
            # No shared file system: every process's provenance record travels in the log too.
            PROVENANCE_LOG_ENV: "1",
        }
        name, data = build_package(job_dir)
        # Where Ray unpacks it, the launcher makes the plugin folders deletable again when it
        # ends (Ray's cleanup of its copy is a plain rmtree; cluster/readonly.py).
        env[PACKAGE_ENV] = name.removesuffix(".zip")
        with self._client(address) as client:
            uri = client.upload_package(name, data)
            request = {
                "entrypoint": launcher_command(bound),
                "runtime_env": {"working_dir": uri, "env_vars": env},
                "metadata": {"forge_job_id": spec.id, "forge_job_name": spec.name},
            }
            for key in ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_resources"):
                if key in self.settings:
                    request[key] = self.settings[key]
            submission_id = _submit_unique(client, f"forge-{spec.id}", request)
        return self._save_new_record(
            staged, backend_ref={"address": address, "submission_id": submission_id, "package": uri}
        )

    def refresh(self, record: JobRecord) -> JobRecord:
        """The record as Ray reports the job now; an ended job is final only once its log
        was read for provenance (or the reads gave up: :func:`after_log_read`)."""
        if record.final:
            return record
        waiting = record.backend_ref.get(LOG_READ)
        if isinstance(waiting, dict) and time.time() < float(waiting.get("next", 0)):
            return record  # its log is asked for again at "next"
        with self._client(record.backend_ref["address"]) as client:
            info = client.job(record.backend_ref["submission_id"])
        if info is None or not _apply(record, info).final:  # still running, or lost (no log left to read)
            return self.store.update(record.id, lambda r: r if r.final else _apply(r, info))
        problem = self.read_log_provenance(record)
        return self.store.update(record.id, lambda r: r if r.final else after_log_read(r, _apply(r, info), problem))

    def read_log_provenance(self, record: JobRecord) -> str | None:
        """Read the provenance records of an ended job from its log into its directory; return
        None when that is done (now or before), else why it could not be.

        With no shared file system the records travel in the job's log
        (:mod:`starforge.cluster.provenance_log`); they are checked as untrusted input and
        written under ``<job dir>/provenance/`` (:mod:`.log_provenance`). A job directory no
        longer here (deleted by hand) has nowhere to keep them: nothing to ask again.
        """
        from ..jobs import log_provenance

        job_dir = Path(record.dir)
        if not job_dir.is_dir() or log_provenance.fetched(job_dir):
            return None
        try:
            with self._client(record.backend_ref["address"]) as client:
                text = client.logs(record.backend_ref["submission_id"])
        except BackendError as exc:
            return exc.message
        try:
            from ..jobs.log_outputs import read_outputs, store_outputs

            found = read_outputs(text, record.id)  # the end of each attempt, on every host (SPEC §18)
            store_outputs(job_dir, found.manifests, found.summary())
            log_provenance.store(job_dir, log_provenance.collect(text, record.id))
        except OSError as exc:
            return f"cannot write {job_dir / PROVENANCE_DIR}: {exc.strerror or exc}"
        return None

    def logs(self, record: JobRecord, follow: bool = False) -> Iterator[str]:
        sid = record.backend_ref["submission_id"]
        seen = 0
        with self._client(record.backend_ref["address"]) as client:
            while True:
                # Status before logs: once a read status is final, the logs read after it are complete.
                info = client.job(sid)
                if info is None:
                    return
                text = client.logs(sid)
                if len(text) > seen:
                    yield text[seen:]
                    seen = len(text)
                if not follow or STATUS.get(info.get("status")) not in LIVE:
                    return
                time.sleep(0.5)

    def cancel(self, record: JobRecord) -> JobRecord:
        record = self.refresh(record)
        if record.final:
            return record
        with self._client(record.backend_ref["address"]) as client:
            stopped = client.stop(record.backend_ref["submission_id"])
        if not stopped:  # it ended on its own first
            return self.refresh(record)
        self._wait_ended(record)
        problem = self.read_log_provenance(record)
        return self.store.update(record.id, lambda r: r if r.final else after_log_read(
            r, r.with_changes(status="cancelled", finished=utc_now(), message="stopped through the Ray Jobs API"), problem))

    def _wait_ended(self, record: JobRecord, timeout: float = 10.0) -> None:
        """Wait until Ray reports the stopped job ended (its log complete then), at most *timeout* seconds."""
        deadline = time.monotonic() + timeout
        with self._client(record.backend_ref["address"]) as client:
            while time.monotonic() < deadline:
                info = client.job(record.backend_ref["submission_id"])
                if info is None or STATUS.get(info.get("status")) not in LIVE:
                    break
                time.sleep(0.3)


# An ended job's record becomes final only once its log was read for provenance: a final
# record is never refreshed again, so a read that failed then lost the records for good.
# A failed read is tried again by a later refresh, at least LOG_RETRY_GAP seconds after the
# last; after LOG_TRIES reads, or LOG_DEADLINE seconds after the first failed one, the job
# ends anyway (its Ray log may be gone with its node), its message saying why.
LOG_READ = "log_read"  # backend_ref key: {tries, first, next, error} while reads are failing
LOG_TRIES = 5
LOG_RETRY_GAP = 2.0
LOG_DEADLINE = 300.0


def after_log_read(record: JobRecord, ended: JobRecord, problem: str | None, now: float | None = None) -> JobRecord:
    """What *record* becomes once its job ended as *ended* (a final record) and its log was
    read (*problem* None) or not (*problem*: why): *ended*, or *record* waiting to read again."""
    now = time.time() if now is None else now
    ref = {k: v for k, v in record.backend_ref.items() if k != LOG_READ}
    if problem is None:
        return ended.with_changes(backend_ref=ref)
    waiting = record.backend_ref.get(LOG_READ)
    waiting = waiting if isinstance(waiting, dict) else {}
    tries = int(waiting.get("tries", 0)) + 1
    first = float(waiting.get("first", now))
    if tries >= LOG_TRIES or now - first >= LOG_DEADLINE:
        why = f"its provenance was not read: the job's log could not be read ({tries} tries in {now - first:.0f} s): {problem}"
        return ended.with_changes(backend_ref=ref, message="; ".join(m for m in (ended.message.rstrip("."), why) if m))
    ref[LOG_READ] = {"tries": tries, "first": first, "next": now + LOG_RETRY_GAP, "error": problem}
    return record.with_changes(backend_ref=ref, message=f"ended on Ray ({ended.status}); its log could not be read for "
                               f"provenance yet (try {tries} of {LOG_TRIES}, again in {LOG_RETRY_GAP:.0f} s): {problem}")


SUBMIT_TOKEN = "forge_submit_token"  # metadata key: this submission's own random token


def _submit_unique(client: RayJobsClient, base: str, request: dict) -> str:
    """Submit under ``base``, or ``base-2``, ``base-3`` … when an earlier submit took the id.

    Ray answers a reused submission id with HTTP 500, so look first; if the submit fails and
    the id is taken after all, the job there is either another client's (try the next id) or
    this submission's own, whose answer was lost (a timeout after the head had created it):
    the request carries a random token in its metadata, and the job with that token is ours,
    never started twice.
    """
    token = secrets.token_hex(16)
    request = {**request, "metadata": {**request.get("metadata", {}), SUBMIT_TOKEN: token}}
    for attempt in range(1, 100):
        sid = base if attempt == 1 else f"{base}-{attempt}"
        if client.job(sid) is not None:
            continue
        try:
            return client.submit({**request, "submission_id": sid})
        except BackendError:
            there = client.job(sid)
            if there is None:
                raise
            if (there.get("metadata") or {}).get(SUBMIT_TOKEN) == token:
                return sid
    raise BackendError(f"no free Ray submission id for {base}", hint="delete old jobs on the head (ray job delete)")


def _apply(record: JobRecord, info: dict | None) -> JobRecord:
    if info is None:
        return record.with_changes(
            status="lost", finished=utc_now(), message="the Ray head no longer knows this job (restarted or deleted)"
        )
    status = STATUS.get(info.get("status"), record.status)
    changes: dict[str, Any] = {"status": status}
    if status in ("succeeded", "failed", "cancelled"):
        code = info.get("driver_exit_code")
        if code is None and status == "succeeded":
            code = 0
        changes.update(exit_code=code, finished=utc_now(), message=_first_line(info.get("message")))
    return record.with_changes(**changes)

def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
