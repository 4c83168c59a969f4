"""A staged job: the one owner of the job directory a backend runs (SPEC §8, §9).

:func:`stage` builds a job directory and returns a :class:`StagedJob`: the directory, the
JobSpec as written there, and its binding (the sha256 of the runtime zip and of
``jobspec.json``, computed from the tree just built). The backend receives that value
(``Backend.submit(staged, detach=…)``) and hands the binding to the job over its own
channel, so nothing written into the directory after staging is trusted.

``forge submit``, ``forge plan`` and ``forge jobs replay`` all stage through here; they
differ only in where the parts come from, which the caller passes in:

- *plugins*: a function filling ``forge_plugins/`` (from the lock and a registry, or by
  tree digest from the cache and the configured registries);
- *recipe*: a function filling ``recipe/`` (the experiment's tree, or an old job's staged
  copy); its tree digest becomes the JobSpec's ``recipe.digest``, or must equal it when the
  JobSpec already carries one (a replay);
- *runtime*: a fresh runtime zip built from this installation, or an old job's zip, which
  must still have the sha256 its record holds.

The layout (:class:`JobLayout`, with the names :mod:`starforge.cluster.jobdir_layout` owns)::

    jobspec.json                  read-only
    forge_plugins/<name>/...      read-only
    recipe/...                    read-only: what replay proves (never written by the job)
    work/...                      the job's working directory: copies of the recipe's files,
                                  writable; relative writes (checkpoints, outputs/) land here
    .forge-runtime/               bootstrap, runtime zip, hyperparams.json (mode 0644, dirs 0755)

The directory is built under an unpredictable temporary name beside its final place and
renamed into place, so a half-staged job never appears; on any failure the temporary tree
is removed without following a symbolic link. The name says which process stages it
(:func:`staging_prefix`): what a killed one leaves is swept by a later command
(:mod:`starforge.jobs.leftovers`).

Laptop side.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection

from ..cluster import removal
from ..cluster.atomic import writer_tag
from ..cluster.digest import tree_digest
from ..cluster.environment import install_runtime_zip, prepare_runtime, runtime_paths
from ..cluster.errors import VerificationError
from ..cluster.jobdir_layout import PLUGINS_DIR, PROVENANCE_DIR, RECIPE_DIR, SPEC_FILE, WORK_DIR
from ..cluster.jobspec import write_spec
from ..cluster.readonly import make_read_only
from ..errors import BackendError
from ..state.directories import PRIVATE, dir_mode, make_dirs
from .binding import Binding, compute

if TYPE_CHECKING:
    from ..cluster.jobspec import JobSpec


@dataclass(frozen=True)
class JobLayout:
    """The paths of one job directory, asked of it rather than rebuilt by hand."""

    root: Path

    @property
    def spec(self) -> Path:
        return self.root / SPEC_FILE

    @property
    def plugins(self) -> Path:
        return self.root / PLUGINS_DIR

    @property
    def recipe(self) -> Path:
        return self.root / RECIPE_DIR

    @property
    def work(self) -> Path:
        """The job's working directory: the recipe's files copied, and whatever the job writes."""
        return self.root / WORK_DIR

    @property
    def runtime_zip(self) -> Path:
        return Path(runtime_paths(str(self.root))["zip"])

    @property
    def provenance(self) -> Path:
        return self.root / PROVENANCE_DIR

    @property
    def experiment(self) -> Path | None:
        """The experiment a job staged under ``<experiment>/.forge/jobs/<id>`` belongs to, else None."""
        jobs = self.root.parent
        if jobs.name == "jobs" and jobs.parent.name == ".forge":
            return jobs.parent.parent
        return None


@dataclass(frozen=True)
class StagedJob:
    """A job directory as :func:`stage` left it: what a backend submits."""

    dir: Path
    spec: JobSpec
    binding: Binding
    ran_yanked: tuple = ()  # the yanked versions it runs knowingly (starforge.experiment.yanked), for its record

    @property
    def layout(self) -> JobLayout:
        return JobLayout(self.dir)


@dataclass(frozen=True)
class OldRuntime:
    """An old job's runtime zip, to run again only while it has the sha256 recorded for it."""

    zip_path: Path
    sha256: str


def stage(
    spec: JobSpec,
    job_dir: str | os.PathLike,
    *,
    plugins: Callable[[Path], None],
    recipe: Callable[[Path], None],
    runtime: OldRuntime | None = None,
) -> StagedJob:
    """Build *spec*'s job directory at *job_dir* (which must not exist) and return it staged.

    *plugins* fills ``forge_plugins/``, *recipe* fills ``recipe/``; *runtime* is an old job's
    zip to run again, else a fresh one is built from this installation.
    """
    job_dir = Path(job_dir)
    if os.path.lexists(job_dir):
        raise BackendError(f"{job_dir} already exists; a job directory is staged once")
    make_dirs(job_dir.parent)
    # an unpredictable name (mkdtemp: mode 0700, never an existing path someone else made)
    # that says which process stages it, so a later command can sweep it should that process be killed
    tmp = Path(tempfile.mkdtemp(prefix=staging_prefix(job_dir.name), dir=job_dir.parent))
    try:
        layout = JobLayout(tmp)
        os.chmod(tmp, dir_mode(PRIVATE))
        os.mkdir(layout.plugins, 0o755)
        plugins(layout.plugins)
        recipe(layout.recipe)
        digest = tree_digest(layout.recipe)
        if spec.recipe_digest is None:
            spec = spec.replace(recipe_digest=digest)
        elif digest != spec.recipe_digest:
            raise VerificationError(
                f"the recipe changed while it was staged: tree digest {digest}, the JobSpec records {spec.recipe_digest}"
            )
        write_spec(spec, layout.spec)
        if runtime is None:
            prepare_runtime(str(tmp), spec.hyperparams)
        else:
            try:
                install_runtime_zip(str(tmp), str(runtime.zip_path), runtime.sha256, spec.hyperparams)
            except OSError as exc:
                raise VerificationError(f"cannot stage the job's runtime: {exc}") from None
        copy_work(layout.recipe, layout.work)
        for path in (layout.spec, layout.plugins, layout.recipe):
            make_read_only(path)
        binding = compute(tmp)
        os.rename(tmp, job_dir)
    except BaseException:
        remove_tree(tmp)
        raise
    return StagedJob(dir=job_dir, spec=spec, binding=binding)


# .<job id>.staging-<pid>@<host tag>-<mkdtemp's random part>; earlier releases: .<job id>.staging-<random>
_STAGING_NAME = re.compile(r"^\.(?P<id>.+)\.staging-(?:(?P<pid>\d+)@(?P<tag>.+)-)?[a-z0-9_]+$")


def staging_prefix(job_id: str) -> str:
    """The start of the temporary name this process stages *job_id* under (``mkdtemp`` adds the
    rest): the pid and :func:`~starforge.cluster.atomic.writer_tag` of the process staging it.

    >>> staging_prefix("demo-1").startswith(f".demo-1.staging-{os.getpid()}@")
    True
    """
    return f".{job_id}.staging-{os.getpid()}@{writer_tag()}-"


def staging_name_parts(name: str) -> tuple[str, int | None, str | None] | None:
    """``(job id, pid, host tag)`` of a staging folder's *name* (pid and tag None in an
    earlier release's name), or None for any other name.

    >>> staging_name_parts(".demo-1.staging-4242@laptop+4026531836-k3j2h1g0")
    ('demo-1', 4242, 'laptop+4026531836')
    """
    match = _STAGING_NAME.match(name)
    if match is None:
        return None
    return match["id"], int(match["pid"]) if match["pid"] else None, match["tag"]


def copy_work(recipe: Path, work: Path) -> None:
    """Fill the job's working directory with copies of the staged recipe's files.

    Copies, never hard links (a write through a link would change the staged recipe);
    a symbolic link of the recipe is copied as the same link, so a relative one points
    into ``work/`` as it pointed into ``recipe/``. Everything is writable by its owner.
    """
    copy_tree(recipe, work, writable=True)


def copy_tree(src: Path, dest: Path, *, only: Collection[str] | None = None, writable: bool = False) -> None:
    """Copy *src* into the new directory *dest*, never through a link and never as a hard link.

    Folders are made 0755 (as the umask allows, never writable by others); a regular file
    gets its bytes and permission bits (with *writable*: writable by its owner, by no one
    else); a symbolic link is copied as the same link. With *only* (relative POSIX paths of
    regular files), exactly those files and the folders leading to them: anything else
    there is left out, and a listed path that is no longer a regular file is not copied.
    """
    folders = None if only is None else {rel.rsplit("/", 1)[0] for rel in only if "/" in rel}
    if folders is not None:
        folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}

    def walk(here: str, there: Path, prefix: str) -> None:
        os.mkdir(there, dir_mode(PRIVATE))
        for entry in sorted(os.scandir(here), key=lambda e: e.name):
            rel, target = prefix + entry.name, there / entry.name
            if only is not None and folders is not None:
                if entry.is_dir(follow_symlinks=False) and rel in folders:
                    walk(entry.path, target, rel + "/")
                elif entry.is_file(follow_symlinks=False) and rel in only:
                    _copy_file(entry.path, target, writable)
            elif entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                walk(entry.path, target, rel + "/")
            elif entry.is_file(follow_symlinks=False):
                _copy_file(entry.path, target, writable)

    walk(os.fspath(src), dest, "")


def _copy_file(src: str, dest: Path, writable: bool) -> None:
    shutil.copyfile(src, dest, follow_symlinks=False)
    mode = stat.S_IMODE(os.lstat(src).st_mode)
    os.chmod(dest, (mode | 0o600) & 0o755 if writable else mode)


def copy_checked(src: Path, dest: Path, files: Collection[str], expected: str, what: str, hint: str | None = None) -> None:
    """Copy exactly *files* of *src* into the new directory *dest* (:func:`copy_tree`) and
    check that the copy has the tree digest *expected* that was checked before, so a file
    edited, removed or linked meanwhile is refused (:class:`VerificationError` naming *what*)."""
    copy_tree(src, dest, only=frozenset(files))
    got = tree_digest(dest)
    if got != expected:
        raise VerificationError(f"{what} changed while it was staged: digest {got}, checked {expected}", hint=hint)


def remove_tree(path: str | os.PathLike) -> None:
    """Remove a (possibly read-only) tree, e.g. a staged job directory no backend took.

    :func:`starforge.cluster.removal.remove_tree` does it: a symbolic link at *path* is
    removed itself, never followed, nor any link below it; each folder of this user is made
    writable by its owner first, so an ordinary user's read-only staged trees go too, and
    the walk holds no recursion. What could not be removed is a :class:`BackendError`.
    """
    failures = removal.remove_tree(path)
    if failures:
        raise BackendError(
            f"{os.fspath(path)}: {len(failures)} entr{'y' if len(failures) == 1 else 'ies'} could not be deleted: "
            f"{removal.describe_failures(failures)}",
            hint="make them deletable (or ask their owner), then delete the folder",
        )
