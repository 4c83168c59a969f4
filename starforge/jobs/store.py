"""The jobs store: where job records live and where ``forge jobs`` finds them.

One JSON file per job, ``<data dir>/jobs/<job id>.json``, where the data dir is
``$FORGE_HOME`` when set, else ``$XDG_DATA_HOME/starforge`` (see :mod:`starforge.state.home`).
The records are per user, not per project, so ``forge jobs list`` shows every job the user
submitted from any experiment on any backend; each record names its job directory
(``dir``) and experiment. ``FORGE_JOBS_DIR`` moves the store elsewhere.

Writes are atomic (temp file + rename) and read-modify-write updates hold an exclusive
``flock`` on ``<id>.lock``, so a supervising process recording an exit code and a
``forge jobs cancel`` cannot lose each other's change.

Laptop side, standard library only.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..cluster import atomic
from ..errors import BackendError, NotFoundError, UsageError
from ..state.directories import make_dirs
from ..state.filelock import exclusive_lock
from .jobrecord import JobRecord

REMOVED_DIR = "removed"  # tombstones of removed jobs: what they ran survives their files (SPEC §18)
AMBIGUOUS_SHOWN = 8  # ids an ambiguous prefix error lists before "…"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def jobs_dir() -> Path:
    """The default store directory (``FORGE_JOBS_DIR``, else ``<data dir>/jobs``)."""
    env = os.environ.get("FORGE_JOBS_DIR")
    if env:
        return Path(env).expanduser()
    from ..state.home import home

    return home().data_dir / "jobs"


@dataclass(frozen=True)
class UnreadableRecord:
    """A file of the store that holds no job record (truncated, not JSON, not a record's shape)."""

    id: str  # the file's name without ``.json``: the id ``forge jobs rm`` takes
    path: Path
    reason: str


class JobStore:
    """Job records on disk, one JSON file each."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else jobs_dir()

    def path(self, job_id: str) -> Path:
        if not _ID_RE.match(job_id):
            raise UsageError(f"'{job_id}' is not a valid job id")
        return self.root / f"{job_id}.json"

    def save(self, record) -> None:
        """Write *record* atomically."""
        make_dirs(self.root)
        atomic.write_file(self.path(record.id), json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n")

    def get(self, job_id: str):
        """The record of *job_id*; a unique prefix of an id is accepted."""
        path = self.path(job_id)
        if not path.exists():
            matches = [p for p in self._files() if p.stem.startswith(job_id)]
            if len(matches) > 1:
                ids = sorted(p.stem for p in matches)
                shown = ", ".join(ids[:AMBIGUOUS_SHOWN]) + (", …" if len(ids) > AMBIGUOUS_SHOWN else "")
                raise UsageError(f"job id prefix '{job_id}' matches {len(ids)} jobs", hint=f"give more of the id: {shown}")
            if not matches:
                raise NotFoundError(f"no job '{job_id}' in {self.root}", hint="list jobs with: forge jobs list")
            path = matches[0]
        return _record_in(path)

    def list(self) -> builtins.list[JobRecord]:
        """Every readable record, oldest first (:meth:`scan` also says which files are not)."""
        return self.scan()[0]

    def scan(self) -> tuple[builtins.list[JobRecord], builtins.list[UnreadableRecord]]:
        """Every readable record, oldest first, and every file of the store that holds none."""
        records, unreadable = [], []
        for p in self._files():
            try:
                records.append(_record_in(p))
            except _Unreadable as exc:
                unreadable.append(UnreadableRecord(id=p.stem, path=p, reason=exc.reason))
        return sorted(records, key=lambda r: (r.created, r.id)), unreadable

    def unreadable(self, job_id: str) -> UnreadableRecord | None:
        """The file of *job_id* (or of the one id it is a prefix of) when it holds no
        readable record; None when it is readable or there is no such file."""
        path = self.path(job_id)
        if not path.exists():
            matches = [p for p in self._files() if p.stem.startswith(job_id)]
            if len(matches) != 1:
                return None
            path = matches[0]
        try:
            _record_in(path)
        except _Unreadable as exc:
            return UnreadableRecord(id=path.stem, path=path, reason=exc.reason)
        return None

    def remove(self, job_id: str, tombstone: JobRecord | None = None, lineage: builtins.list | None = None) -> None:
        """Delete the record of *job_id* (an exact id) and its lock file, leaving *tombstone*
        (the record as it was, default: as stored) under ``removed/``: which plugins and
        parameters the job ran is kept when its files go, and, as its ``lineage``, the
        outputs manifests its job directory held (*lineage*), which ``forge trace`` and
        ``forge audit`` read."""
        with self.locked(job_id):
            path = self.path(job_id)
            if tombstone is None:
                with contextlib.suppress(BackendError):
                    tombstone = _record_in(path)
            if tombstone is not None:
                make_dirs(self.root / REMOVED_DIR)
                kept = tombstone.to_dict()
                if lineage:
                    kept["lineage"] = lineage
                atomic.write_file(self.root / REMOVED_DIR / f"{job_id}.json",
                                  json.dumps(kept, indent=2, sort_keys=True) + "\n")
            path.unlink(missing_ok=True)
        (self.root / f"{job_id}.lock").unlink(missing_ok=True)

    def update(self, job_id: str, change: Callable[[JobRecord], JobRecord]) -> JobRecord:
        """Apply ``change(record) -> record`` under the record's lock; save and return the result."""
        with self.locked(job_id):
            record = self.get(job_id)
            new = change(record)
            if new != record:
                self.save(new)
            return new

    @contextlib.contextmanager
    def locked(self, job_id: str) -> Iterator[None]:
        make_dirs(self.root)
        with exclusive_lock(self.root / f"{job_id}.lock"):
            yield

    def _files(self) -> builtins.list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob("*.json"))


class _Unreadable(BackendError):
    """A job record that cannot be read; ``reason`` says why, without the path."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: unreadable job record: {reason}",
                         hint=f"forge jobs rm {path.stem} removes it (forge jobs list shows every such file)")
        self.reason = reason


def _record_in(path: Path) -> JobRecord:
    """The record *path* holds; :class:`BackendError` (with a ``reason``) when it holds none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _Unreadable(path, str(exc)) from None
    try:
        return JobRecord.from_dict(data)
    except (TypeError, ValueError, AttributeError) as exc:
        raise _Unreadable(path, f"not a job record ({exc})") from None
