"""The load order: which plugins of a JobSpec this process loads, in which order.

Packages first, then recipe built-ins; a built-in named like a package is shadowed. Each
plugin is an :class:`Item` whose ``status`` the job moves along (planned → verified /
loaded / registered / pending / failed ...). Standard library only.
"""

from __future__ import annotations

import os

from .errors import LaunchFailure, SpecError
from .jobdir_layout import BUILTINS_DIR, PLUGINS_DIR, RECIPE_DIR
from .jobspec import JobSpec, PluginEntry

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from collections.abc import Mapping


class Item:
    """One plugin of the job as this process sees it (a plain class: cheap to define)."""

    __slots__ = ("entry", "builtin", "root", "status", "shadowed_by", "verified", "trigger", "seconds", "contents",
                 "check", "hashed")

    def __init__(self, entry: PluginEntry, builtin: bool, root: str) -> None:
        self.entry = entry
        self.builtin = builtin
        self.root = root
        # planned|pending|loaded|registered|skipped|shadowed|disabled|left-alone|failed|verified;
        # an environment plugin is "skipped" until load_environment makes it "loaded"
        self.status = "planned"
        self.shadowed_by: str | None = None
        self.verified = False
        self.trigger: str | None = None  # launcher | start-up | target:<module> | install_deferred | ray-setup-hook
        self.seconds: float | None = None
        self.contents: Mapping[str, bytes] | None = None  # the verified snapshot, until it is imported
        self.check: str | None = None  # "tree": every file read and digested; "files": listing + per-file hashes
        self.hashed: list[str] | None = None  # with check "files": the files read and hashed so far

    @property
    def ref(self) -> str:
        return self.entry.ref

    def to_record(self) -> dict:
        e = self.entry
        rec: dict[str, object] = {
            "ref": e.ref,
            "name": e.name,
            "version": e.version,
            "digest": e.tree_digest,
            "source": "builtin" if self.builtin else "package",
            "kind": e.kind,
            "load": e.load,
            "targets": list(e.targets),
            "status": self.status,
            "verified": self.verified,
            "trigger": self.trigger,
        }
        if self.shadowed_by:
            rec["shadowed_by"] = self.shadowed_by
        if self.seconds is not None:
            rec["seconds"] = round(self.seconds, 6)
        if self.check is not None:
            rec["check"] = self.check
        if self.hashed is not None:
            rec["hashed_files"] = list(self.hashed)
        return rec


def ordered_items(spec: JobSpec, job_dir: str) -> list[Item]:
    """Load order: packages, then built-ins; a built-in named like a package is shadowed.

    Refuses (:class:`SpecError`) data-prep plugins and two loaded plugins sharing a top-level name.
    """
    items: list[Item] = []
    packages = {p.name: p for p in spec.plugins}
    for e in spec.plugins:
        items.append(Item(e, False, os.path.join(job_dir, PLUGINS_DIR, e.name)))
    for e in spec.recipe_plugins:
        item = Item(e, True, os.path.join(job_dir, RECIPE_DIR, *BUILTINS_DIR, e.name))
        if e.name in packages:
            item.status = "shadowed"
            item.shadowed_by = packages[e.name].ref
        items.append(item)
    owners: dict[str, str] = {}
    for item in items:
        if item.entry.kind == "data-prep":
            raise LaunchFailure(
                SpecError, item.ref,
                f"{item.ref} is a data-prep plugin; data-prep plugins never enter a job (they run on the laptop, with forge prep)",
            )
        if item.entry.kind == "environment" and item.status == "planned":
            item.status = "skipped"  # left to load_environment, which imports it beside the others
        if item.status not in ("planned", "skipped"):
            continue
        for top in item.entry.top_level:
            if top in owners:
                raise LaunchFailure(
                    SpecError, item.ref, f"{item.ref} and {owners[top]} both provide the top-level module '{top}'"
                )
            owners[top] = item.ref
    return items
