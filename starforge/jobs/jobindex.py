"""The job index: which jobs ran which plugin version, with which parameters.

The job records (:mod:`starforge.jobs.store`) stay the source of truth; the index is an
SQLite file (standard library) that answers ``forge jobs list --plugin/--yanked/--param``
without parsing every record on each call. It is kept in step with the records by their
file facts (inode, size, modification time, from one directory listing): a record whose
facts changed is read again, one that went is dropped, so the staleness check never reads
a record that did not change. Removed jobs' tombstones (``removed/<id>.json`` beside the
records) are indexed too, so lineage survives ``jobs rm`` and ``prune``.

Where the index lives: beside the records on a local file system; where the records are on a
network file system (NFS, Lustre, CIFS, …: SQLite's locking is unreliable there) in a private
folder on local disk (``/var/tmp/starforge-<uid>/``); where neither can be had, no index:
the queries read the records. A missing, corrupt or foreign index is rebuilt (said once,
on stderr, by the caller). Several ``forge`` processes may sync and query at once: writes
are SQLite transactions (``BEGIN IMMEDIATE``) with a busy timeout.

Laptop side, standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..cluster.jobdir_layout import SPEC_FILE
from .jobrecord import JobRecord
from .store import REMOVED_DIR, JobStore

SCHEMA = 1
BUSY_TIMEOUT_S = 30.0
INDEX_NAME = ".index/jobs.sqlite"  # in a folder of its own: its writes leave the records' folder as it is
# File systems whose locking SQLite cannot rely on (fstype as /proc/self/mountinfo names it).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "fuse.glusterfs",
    "fuse.sshfs", "9p", "afs", "panfs", "wekafs", "fuse.ceph", "ncpfs", "davfs", "fuse.s3fs", "orangefs",
})

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (name TEXT PRIMARY KEY, facts TEXT NOT NULL, job_id TEXT, problem TEXT);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, file TEXT NOT NULL, created TEXT NOT NULL,
                                 removed INTEGER NOT NULL, pins_known INTEGER NOT NULL, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pins (job_id TEXT NOT NULL, owner TEXT, name TEXT NOT NULL, version TEXT NOT NULL,
                                 digest TEXT NOT NULL, ref TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS params (job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS pins_by_name ON pins (owner, name);
CREATE INDEX IF NOT EXISTS pins_by_digest ON pins (digest);
CREATE INDEX IF NOT EXISTS pins_by_job ON pins (job_id);
CREATE INDEX IF NOT EXISTS params_by_key ON params (key);
CREATE INDEX IF NOT EXISTS params_by_job ON params (job_id);
"""


@dataclass(frozen=True)
class IndexedJob:
    """One job as the index knows it: its record, whether its files were removed, its pins."""

    record: JobRecord
    removed: bool = False

    @property
    def pins_known(self) -> bool:
        return self.record.plugins is not None


@dataclass
class Sync:
    """What one sync of the index did: for the caller's one-line notes."""

    rebuilt: str = ""  # why the index was made anew ("missing", "unreadable: …"), else ""
    read: int = 0  # records (re)read
    unreadable: list = field(default_factory=list)  # (path, problem) of records that cannot be read
    where: str = ""  # "index <path>" or "records (…)": what answered


# --- where the index lives ------------------------------------------------------------------


def filesystem_type(path: Path) -> str:
    """The type of the file system holding *path* (``ext4``, ``nfs4``, …), from /proc/self/mountinfo; "" when unknown."""
    try:
        target = os.path.realpath(path)
        best, fstype = "", ""
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                if len(fields) < 5 or not rest:
                    continue
                mount = fields[4].replace("\\040", " ")
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, fstype = mount, rest[0]
        return fstype
    except OSError:
        return ""


def on_network_filesystem(path: Path) -> bool:
    return filesystem_type(path) in NETWORK_FILESYSTEMS


def index_path(store_root: Path) -> Path | None:
    """Where the index of the records in *store_root* lives, or None (read the records)."""
    existing = store_root
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not on_network_filesystem(existing):
        return store_root / INDEX_NAME
    local = _private_local_dir()
    if local is None:
        return None
    key = hashlib.sha256(os.path.realpath(store_root).encode()).hexdigest()[:16]
    return local / f"jobs-{key}.sqlite"


def _private_local_dir() -> Path | None:
    """``/var/tmp/starforge-<uid>``: made 0700 when missing; None unless it is this user's own
    real directory on a local file system (never another user's, never through a link)."""
    base = Path("/var/tmp")
    if not base.is_dir() or on_network_filesystem(base):
        return None
    own = base / f"starforge-{os.getuid()}"
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(own, 0o700)
    try:
        st = os.lstat(own)
    except OSError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return own


# --- what a record contributes --------------------------------------------------------------


def _facts(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _listing(store: JobStore) -> dict:
    """``{relative name: facts}`` of every record and tombstone file."""
    out = {}
    for folder, prefix in ((store.root, ""), (store.root / REMOVED_DIR, REMOVED_DIR + "/")):
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.name.endswith(".json") and not entry.name.startswith("."):
                    with contextlib.suppress(OSError):
                        out[prefix + entry.name] = _facts(entry.stat(follow_symlinks=False))
    return out


def pin_parts(pin: dict) -> tuple:
    """``(owner, name, version)`` of a pin's ref (``owner/name@version``; ``recipe:name@version`` has no owner)."""
    ref = str(pin.get("ref") or "")
    head, _, version = ref.rpartition("@")
    if head.startswith("recipe:"):
        return None, head[len("recipe:"):], version
    owner, _, name = head.partition("/")
    return (owner, name, version) if name else (None, owner, version)


# --- the index ------------------------------------------------------------------------------


class JobIndex:
    """The index of one job store (see the module's docstring)."""

    def __init__(self, store: JobStore | None = None, path: Path | None | str = "auto") -> None:
        self.store = store if store is not None else JobStore()
        self.path = index_path(self.store.root) if path == "auto" else (Path(path) if path is not None else None)

    @contextlib.contextmanager
    def _connect(self, sync: Sync) -> Iterator[sqlite3.Connection]:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.path.exists()
        conn: sqlite3.Connection | None = None
        try:
            conn = self._open()
            problem = self._check(conn)
        except sqlite3.DatabaseError as exc:
            problem = f"unreadable ({exc})"
        if problem:
            if conn is not None:
                conn.close()
            self._discard()
            sync.rebuilt = problem
            conn = self._open()
            self._check(conn)
        elif not existed:
            sync.rebuilt = "missing"
        assert conn is not None  # opened, or opened anew after the discard
        try:
            yield conn
        finally:
            conn.close()

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = %d" % int(BUSY_TIMEOUT_S * 1000))
        return conn

    def _check(self, conn: sqlite3.Connection) -> str:
        """Make the tables when missing; say what is wrong with an index of another schema or store."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in filter(str.strip, _DDL.split(";")):
                conn.execute(statement)
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            root = os.path.realpath(self.store.root)
            if not rows:
                conn.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", str(SCHEMA)), ("store", root)])
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        if rows and rows.get("schema") != str(SCHEMA):
            return f"of another schema ({rows.get('schema')})"
        if rows and rows.get("store") != root:
            return "made for another job store"
        # A truncated file (a full disk, a copy cut short) holds fewer pages than its header
        # counts; other damage raises DatabaseError where it is read (_answer then rebuilds).
        pages = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
        size = os.stat(str(self.path)).st_size
        return "" if size >= pages else f"damaged (truncated: {size} of {pages} bytes)"

    def _discard(self) -> None:
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)

    def sync(self) -> tuple:
        """Bring the index in step with the records; return ``(Sync, jobs)``: every indexed job."""
        return self._answer(lambda conn: conn.execute("SELECT record, removed FROM jobs").fetchall(), None)

    def query(self, *, plugin: str | None = None, params: Iterable[tuple] = ()) -> tuple:
        """``(Sync, matches, unknown)``: the jobs that ran *plugin* (``owner/name``,
        ``owner/name@version`` or ``sf1:…``) and whose parameters match every ``(key, raw
        value)`` of *params*; *unknown*: jobs whose pins are not known (recorded before records
        kept them, their job files gone), which could have run it."""
        params = list(params)

        def select(conn: sqlite3.Connection) -> list:
            ids: set | None = None
            if plugin:
                ids = set(_pin_ids(conn, plugin))
            for key, raw in params:
                found = {job_id for job_id, value in conn.execute("SELECT job_id, value FROM params WHERE key = ?", (key,))
                         if param_matches({key: json.loads(value)}, key, raw)}
                ids = found if ids is None else ids & found
            if ids is None:  # no filter here (--yanked alone): every job
                return conn.execute("SELECT record, removed FROM jobs").fetchall()
            wanted = sorted(ids)
            rows = []
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                rows += conn.execute(f"SELECT record, removed FROM jobs WHERE id IN ({','.join('?' * len(chunk))})",
                                     chunk).fetchall()
            return rows + conn.execute("SELECT record, removed FROM jobs WHERE pins_known = 0").fetchall()

        sync, jobs = self._answer(select, (plugin, params))
        matches = [j for j in jobs if j.pins_known]
        unknown = [j for j in jobs if not j.pins_known] if (plugin or params) else []
        return sync, matches, unknown

    def _answer(self, select, query) -> tuple:
        sync = Sync()
        if self.path is None:
            sync.where = f"records ({self.store.root} is on a network file system and no local folder could hold the index)"
            jobs = self._read_records(sync)
            if query is not None:
                plugin, params = query
                jobs = [j for j in jobs if not j.pins_known or (
                    (not plugin or any(pin_matches(p, plugin) for p in j.record.plugins))
                    and all(param_matches(j.record.params, k, raw) for k, raw in params))]
            return sync, jobs
        sync.where = f"index {self.path}"
        try:
            rows = self._read(select, sync)
        except sqlite3.DatabaseError as exc:  # damaged where it was read: made anew, once
            self._discard()
            sync = Sync(where=sync.where)
            rows = self._read(select, sync)
            sync.rebuilt = f"unreadable ({exc})"
        return sync, _ordered([IndexedJob(JobRecord.from_dict(json.loads(text)), bool(removed)) for text, removed in rows])

    def _read(self, select, sync: Sync) -> list:
        with self._connect(sync) as conn:
            self._catch_up(conn, sync)
            sync.unreadable = [(str(self.store.root / name), problem)
                               for name, problem in conn.execute("SELECT name, problem FROM files WHERE problem IS NOT NULL")]
            return select(conn)

    def _catch_up(self, conn: sqlite3.Connection, sync: Sync) -> None:
        # Every write of the store renames a file into its folder, which changes the folder's
        # modification time: folders as they were at the last full check mean nothing changed.
        folders, newest = _folder_facts(self.store)
        stored = conn.execute("SELECT value FROM meta WHERE key = 'folders'").fetchone()
        if stored is not None and stored[0] == folders:
            return
        listing = _listing(self.store)
        known = dict(conn.execute("SELECT name, facts FROM files"))
        conn.execute("BEGIN IMMEDIATE")  # another process may have caught up meanwhile: diff again inside
        try:
            if known != listing:
                known = dict(conn.execute("SELECT name, facts FROM files"))
                for name in known.keys() - listing.keys():
                    self._forget(conn, name)
                fresh = not known
                rows = Rows()
                for name, facts in sorted(listing.items()):  # records before tombstones ("removed/…" sorts last)
                    if known.get(name) != facts:
                        if not fresh:
                            self._forget(conn, name)
                        self._add(conn, name, facts, sync, rows, fresh=fresh and not name.startswith(REMOVED_DIR + "/"))
                rows.write(conn)
            # Remembered only once settled: a write in the same tick of the folder's clock as the
            # listing would leave its modification time as it is now, and be missed next time.
            settled = newest is not None and time.time_ns() - newest > SETTLED_NS
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('folders', ?)", (folders if settled else "",))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _forget(self, conn: sqlite3.Connection, name: str) -> None:
        row = conn.execute("SELECT job_id FROM files WHERE name = ?", (name,)).fetchone()
        conn.execute("DELETE FROM files WHERE name = ?", (name,))
        if row and row[0]:
            job_id = row[0]
            still = conn.execute("SELECT file FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if still and still[0] == name:
                for table, key in (("jobs", "id"), ("pins", "job_id"), ("params", "job_id")):
                    conn.execute(f"DELETE FROM {table} WHERE {key} = ?", (job_id,))

    def _add(self, conn: sqlite3.Connection, name: str, facts: str, sync: Sync, rows: "Rows", fresh: bool = False) -> None:
        """Index the record file *name* into *rows* (*fresh*: the index holds nothing of its id yet)."""
        sync.read += 1
        try:
            record, removed, text = self._load(name)
        except ValueError as exc:
            rows.files.append((name, facts, None, str(exc)))
            return
        if not fresh:
            rows.write(conn)  # what came before is in the tables, for the checks below
            live = conn.execute("SELECT removed FROM jobs WHERE id = ?", (record.id,)).fetchone()
            if live is not None and removed and not live[0]:
                # a tombstone beside a live record of the same id (a job re-submitted under its id): the record wins
                rows.files.append((name, facts, None, None))
                return
            for table, key in (("jobs", "id"), ("pins", "job_id"), ("params", "job_id")):
                conn.execute(f"DELETE FROM {table} WHERE {key} = ?", (record.id,))
        rows.files.append((name, facts, record.id, None))
        rows.jobs.append((record.id, name, record.created, int(removed), int(record.plugins is not None), text))
        rows.pins += [(record.id, *pin_parts(pin), str(pin.get("digest") or ""), str(pin.get("ref") or ""))
                      for pin in record.plugins or ()]
        rows.params += [(record.id, key, _JSON(value)) for key, value in (record.params or {}).items()]

    def _load(self, name: str) -> tuple:
        """``(record, removed, JSON text)`` of the record file *name*; old records' pins are
        backfilled from their staged ``jobspec.json`` where it still exists. ValueError: unreadable."""
        removed = name.startswith(REMOVED_DIR + "/")
        path = self.store.root / name
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            record = JobRecord.from_dict(data)
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(f"unreadable job record: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        if record.plugins is None and not removed:
            filled = backfill(self.store, record)
            if filled is not record:
                record, text = filled, json.dumps(filled.to_dict(), sort_keys=True)
        return record, removed, text

    def _read_records(self, sync: Sync) -> list:
        """Every job, read from the records themselves (no index)."""
        jobs = []
        for name in _listing(self.store):
            sync.read += 1
            try:
                record, removed, _ = self._load(name)
            except ValueError as exc:
                sync.unreadable.append((str(self.store.root / name), str(exc)))
                continue
            jobs.append(IndexedJob(record, removed))
        live = {j.record.id for j in jobs if not j.removed}
        return _ordered([j for j in jobs if not (j.removed and j.record.id in live)])


def _pin_ids(conn: sqlite3.Connection, wanted: str) -> list:
    """The ids of the jobs with a pin that is *wanted* (as :func:`pin_matches` reads it)."""
    if wanted.startswith("sf1:"):
        return [r[0] for r in conn.execute("SELECT job_id FROM pins WHERE digest = ?", (wanted,))]
    head, at, version = wanted.partition("@")
    owner, _, name = head.partition("/")
    if at:
        rows = conn.execute("SELECT job_id FROM pins WHERE owner = ? AND name = ? AND version = ?", (owner, name, version))
    else:
        rows = conn.execute("SELECT job_id FROM pins WHERE owner = ? AND name = ?", (owner, name))
    return [r[0] for r in rows]


_JSON = json.JSONEncoder(sort_keys=True).encode
SETTLED_NS = 1_000_000_000  # far coarser than any file system's clock for modification times


def _folder_facts(store: JobStore) -> tuple:
    """``(facts, newest modification time in ns or None)`` of the store's two folders."""
    parts, newest = [], None
    for folder in (store.root, store.root / REMOVED_DIR):
        try:
            st = os.stat(folder)
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{st.st_ino}:{st.st_mtime_ns}")
        newest = st.st_mtime_ns if newest is None else max(newest, st.st_mtime_ns)
    return "|".join(parts), newest


@dataclass
class Rows:
    """Rows to insert, written in one ``executemany`` per table."""

    files: list = field(default_factory=list)
    jobs: list = field(default_factory=list)
    pins: list = field(default_factory=list)
    params: list = field(default_factory=list)

    def write(self, conn: sqlite3.Connection) -> None:
        conn.executemany("INSERT INTO files VALUES (?, ?, ?, ?)", self.files)
        conn.executemany("INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?)", self.jobs)
        conn.executemany("INSERT INTO pins VALUES (?, ?, ?, ?, ?, ?)", self.pins)
        conn.executemany("INSERT INTO params VALUES (?, ?, ?)", self.params)
        self.files, self.jobs, self.pins, self.params = [], [], [], []


def _ordered(jobs: list) -> list:
    return sorted(jobs, key=lambda j: (j.record.created, j.record.id))


def with_pins(record: JobRecord) -> JobRecord:
    """*record*, with the pins and parameters of its staged ``jobspec.json`` when it predates
    records keeping them; unchanged when it has them, or the file is gone or unreadable."""
    if record.plugins is not None:
        return record
    found = pins_from_job_dir(Path(record.dir))
    return record if found is None else record.with_changes(plugins=found[0], params=found[1])


def backfill(store: JobStore, record: JobRecord) -> JobRecord:
    """:func:`with_pins` of *record*, saved in the store (where it still has no pins)."""
    filled = with_pins(record)
    if filled is record:
        return record

    def fill(current: JobRecord) -> JobRecord:
        if current.plugins is not None:
            return current
        return current.with_changes(plugins=filled.plugins, params=filled.params)

    with contextlib.suppress(Exception):
        return store.update(record.id, fill)
    return filled


def pins_from_job_dir(job_dir: Path) -> tuple | None:
    """``(pins, params)`` read from *job_dir*'s ``jobspec.json``, or None."""
    try:
        data = json.loads((job_dir / SPEC_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return pins_of_spec_dict(data), dict(data.get("hyperparams") or {})


def pins_of_spec_dict(data: dict) -> list:
    """The pins of a JobSpec in its JSON form: locked plugins, then the recipe's built-ins."""
    recipe = data.get("recipe") or {}
    entries = list(data.get("plugins") or []) + list(recipe.get("plugins") or [] if isinstance(recipe, dict) else [])
    pins = []
    for e in entries:
        if isinstance(e, dict) and e.get("digest"):
            ref = e.get("ref") or (f"{e['owner']}/{e.get('name')}@{e.get('version')}" if e.get("owner")
                                   else f"recipe:{e.get('name')}@{e.get('version')}")
            pins.append({"ref": str(ref), "digest": str(e["digest"])})
    return pins


def pins_of_spec(spec) -> list:
    """The pins of a :class:`~starforge.cluster.jobspec.JobSpec`: ``[{ref, digest}]``."""
    return [{"ref": p.ref, "digest": p.tree_digest} for p in (*spec.plugins, *spec.recipe_plugins)]


def pin_matches(pin: dict, wanted: str) -> bool:
    """Whether *pin* is *wanted*: ``sf1:…`` (its digest), ``owner/name@version`` or ``owner/name``."""
    if wanted.startswith("sf1:"):
        return pin.get("digest") == wanted
    owner, name, version = pin_parts(pin)
    head, at, want_version = wanted.partition("@")
    want_owner, slash, want_name = head.partition("/")
    if not slash:
        return False
    if (owner, name) != (want_owner, want_name):
        return False
    return not at or version == want_version


def param_matches(params: dict | None, key: str, raw: str) -> bool:
    """Whether the job's parameter *key* equals *raw* (a ``--set`` value) compared as typed:
    a float parameter matches ``1`` and ``1.0``; a string one the text as written; a
    boolean only ``true``/``false``."""
    if not params or key not in params:
        return False
    from ..package_format.yamlio import parse_scalar

    stored = params[key]
    try:
        given: Any = parse_scalar(raw)
    except Exception:  # noqa: BLE001 - a value that does not parse is compared as text
        given = raw.strip()
    if isinstance(stored, bool) or isinstance(given, bool):
        return isinstance(stored, bool) and isinstance(given, bool) and stored is given
    if isinstance(stored, str):
        return stored == (given if isinstance(given, str) else raw.strip())
    if isinstance(stored, float) and isinstance(given, (int, float)):
        return float(given) == stored
    if isinstance(stored, int) and isinstance(given, (int, float)):
        return given == stored and float(given).is_integer()
    return json.dumps(stored, sort_keys=True) == json.dumps(given, sort_keys=True)
