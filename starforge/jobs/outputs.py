"""What a job wrote into its working directory (``work/``, SPEC §9): its outputs; and the
outputs manifests the end of each attempt recorded (SPEC §18), read back.

Staging fills ``work/`` with copies of the recipe's files; anything there that is not an
unchanged copy — a checkpoint, ``outputs/``, a rewritten config — is the job's output.
``forge jobs show`` says where they are; ``forge jobs rm`` and ``prune`` refuse to delete
them without ``--with-outputs``. Symbolic links are never followed; the walk keeps a list
of folders to read rather than recursing, so a job that nests thousands of folders is
counted like any other, and an entry that cannot be read (a folder beyond ``PATH_MAX``, one
without permission) is counted as such: it may hold outputs, so ``rm`` asks for
``--with-outputs`` then too.

Laptop side, standard library only.

>>> human_size(1536)
'1.5 KiB'
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..cluster.jobdir_layout import RECIPE_DIR, WORK_DIR

SUMMARY = ".from-log.json"  # in lineage/: what a job's log held (dot-named: not a manifest); written by log_outputs


@dataclass(frozen=True)
class JobOutputs:
    """The files of a job's working directory that are not unchanged copies of its recipe."""

    dir: Path
    files: int
    bytes: int
    unreadable: int = 0  # entries that could not be read (a folder's content, a file's size: not counted)

    def describe(self) -> str:
        text = f"{self.files} file{'' if self.files == 1 else 's'}, {human_size(self.bytes)} in {self.dir}"
        if self.unreadable:
            text += f", and {self.unreadable} entr{'y' if self.unreadable == 1 else 'ies'} that could not be read"
        return text

    @property
    def any(self) -> bool:
        """Whether there may be outputs: files, or folders whose content is unknown."""
        return bool(self.files or self.unreadable)


def job_outputs(job_dir: str | os.PathLike) -> JobOutputs | None:
    """The outputs in *job_dir*'s working directory, or None when it has no working directory."""
    job_dir = Path(job_dir)
    work, recipe = job_dir / WORK_DIR, job_dir / RECIPE_DIR
    try:
        if not stat.S_ISDIR(os.lstat(work).st_mode):
            return None
    except OSError:
        return None
    files = size = unreadable = 0
    todo = [""]  # folders of work/ still to read, relative; a list, not recursion: a job may nest thousands
    while todo:
        rel = todo.pop()
        try:
            with os.scandir(work / rel if rel else work) as it:
                entries = list(it)
        except OSError:
            unreadable += 1
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(name)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                unreadable += 1
                continue
            if stat.S_ISREG(st.st_mode) and not _same_file_content(Path(entry.path), recipe / name, st.st_size):
                files += 1
                size += st.st_size
    return JobOutputs(dir=work, files=files, bytes=size, unreadable=unreadable)


def _same_file_content(path: Path, original: Path, size: int) -> bool:
    try:
        st = os.lstat(original)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        with open(path, "rb") as a, open(original, "rb") as b:
            while True:
                x, y = a.read(1 << 20), b.read(1 << 20)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def human_size(n: int) -> str:
    """*n* bytes as people read it: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


MANIFEST_CAP = 64 << 20  # bytes of one manifest read (10,000 files take about 0.6 MB)


def read_manifests(job_dir: str | os.PathLike) -> tuple[list, list]:
    """``(manifests, problems)``: the outputs manifests the end of each attempt left in
    ``<job_dir>/lineage/`` (:mod:`starforge.cluster.lineage`), oldest attempt first.

    The job wrote them, so they are checked for shape before use: a file that is too large,
    not JSON or not a manifest is a problem (one line), and its rows are not used.
    """
    import json

    from ..cluster.lineage import LINEAGE_DIR, MANIFEST_SCHEMA

    folder = Path(job_dir) / LINEAGE_DIR
    try:
        names = sorted(p for p in os.listdir(folder) if p.startswith("outputs-") and p.endswith(".json"))
    except OSError:
        return [], []
    manifests, problems = [], []
    for name in names:
        try:
            fd = os.open(folder / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                raw = f.read(MANIFEST_CAP + 1)
            if len(raw) > MANIFEST_CAP:
                raise ValueError(f"larger than {human_size(MANIFEST_CAP)}")
            doc = json.loads(raw)
            if not (isinstance(doc, dict) and doc.get("schema") == MANIFEST_SCHEMA and valid_manifest(doc)):
                raise ValueError("not an outputs manifest")
        except (OSError, ValueError) as exc:
            problems.append(f"{folder / name}: {exc}")
            continue
        manifests.append(doc)
    manifests.sort(key=lambda m: (m["attempt"], m["host"]))
    refused = _refused_in_log(folder)
    if refused:
        problems.append(refused)
    return manifests, problems


def _refused_in_log(folder: Path) -> str | None:
    """What ``lineage/.from-log.json`` (:mod:`.log_outputs`) says the job's log held that was
    not kept, as one line, or None."""
    import json

    try:
        with open(folder / SUMMARY, "rb") as f:
            doc = json.loads(f.read(1 << 16))
        refused = {str(k): int(v) for k, v in doc["refused"].items()}
        sources = [str(s) for s in doc.get("refused_from", [])]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not refused:
        return None
    reasons = ", ".join(f"{reason} ({count})" for reason, count in sorted(refused.items()))
    frames = "frame" if sum(refused.values()) == 1 else "frames"
    return (f"{folder}: {sum(refused.values())} {frames} of outputs manifests in the job's log not kept: {reasons}"
            + (f"; from {'; '.join(sources)}" if sources else ""))


def valid_manifest(doc: dict) -> bool:
    """Whether *doc* has an outputs manifest's shape (types of every field used)."""
    if not (isinstance(doc.get("job_id"), str) and isinstance(doc.get("attempt"), int)
            and isinstance(doc.get("host"), str) and isinstance(doc.get("dirs"), list)
            and isinstance(doc.get("sample_above", 0), int)):
        return False
    for d in doc["dirs"]:
        if not isinstance(d, dict) or not (d.get("path") is None or isinstance(d.get("path"), str)):
            return False
        files = d.get("files", [])
        if not isinstance(files, list) or not all(
            isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) and isinstance(f[1], int)
            and isinstance(f[2], int) for f in files
        ):
            return False
    return True
