"""The record of one submitted job, and the statuses it can have.

Statuses: ``pending``, ``running`` (live); ``succeeded``, ``failed``, ``cancelled``,
``lost`` (final; ``lost`` = the backend no longer knows the job and no exit was recorded).

Laptop side, standard library only; imported by the jobs store and by every backend.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

LIVE = ("pending", "running")
FINAL = ("succeeded", "failed", "cancelled", "lost")
STATUSES = LIVE + FINAL


@dataclass(frozen=True)
class JobRecord:
    """What ``forge jobs`` knows of one submitted job (one JSON file in the jobs store)."""

    id: str
    name: str
    backend: str
    status: str
    dir: str  # the job directory as the submitting machine sees it
    created: str
    exit_code: int | None = None
    backend_ref: dict = field(default_factory=dict)
    experiment: str = ""  # the experiment directory the job was submitted from
    finished: str | None = None
    message: str = ""  # one line for the user, e.g. why a job failed or was lost
    runtime_sha256: str = ""  # sha256 of the staged runtime zip (forge jobs replay runs the same one)
    spec_sha256: str = ""  # sha256 of the staged jobspec.json (forge jobs replay checks it before reading it)
    replay_of: str = ""  # the job this one replays (forge jobs replay), else ""
    ran_yanked: list = field(default_factory=list)  # yanked versions the job ran knowingly: {ref, tree_digest, reason, sequence, as_of, allowed_by}
    # What the job ran, from submit on (SPEC §18): [{ref, digest}] of its locked plugins and
    # built-ins, and its hyperparameters (values files and --set merged, typed). None: a
    # record made before records kept them (backfilled from jobspec.json while it exists).
    plugins: list | None = None
    params: dict | None = None

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def with_changes(self, **changes: Any) -> "JobRecord":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field, as stored in the jobs store."""
        return asdict(self)

    def shown(self) -> dict:
        """:meth:`to_dict` for printing (``--json``): credentials in a URL masked.

        A Ray address may carry ``user:password@`` (httpx sends it as Basic auth); the
        store keeps it, so that later ``forge jobs`` calls reach the cluster, but no
        output shows it (SPEC §12).
        """
        from ..urls import mask_url

        out = self.to_dict()
        out["backend_ref"] = {k: mask_url(v) if isinstance(v, str) else v for k, v in self.backend_ref.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobRecord":
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["backend_ref"] = dict(values.get("backend_ref") or {})
        if values.get("plugins") is not None:
            values["plugins"] = [dict(p) for p in values["plugins"] if isinstance(p, dict)]
        if values.get("params") is not None and not isinstance(values["params"], dict):
            values["params"] = None
        return cls(**values)
