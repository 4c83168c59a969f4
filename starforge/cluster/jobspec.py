"""JobSpec (``jobspec.json``, schema ``forge/jobspec/v1``): the one contract between
``forge submit`` and ``forge-launch``.

Everything the cluster side needs is in here as JSON (manifest fields, targets, top-level
module names, digests and per-file hashes), so the launcher needs no YAML parser. Names are
validated by :mod:`.names` (the rules ``plugin.yaml`` is checked by) before any path is built from them.

Shared: standard library only (``packaging`` is not needed to read a spec).

>>> spec = JobSpec.from_dict(example())
>>> spec.plugins[0].ref
'alice/opsd-patch@1.2.0'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from .digest import is_digest
from .errors import SpecError, VerificationError
from .names import is_entrypoint, is_job_id, is_module, is_plugin_name
from .record import Record

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any, Callable

SCHEMA = "forge/jobspec/v1"
KINDS = ("algorithm", "environment", "data-prep")
LOADS = ("eager", "deferred")


def _copy(value):
    """A deep copy of JSON-like data (dicts, lists, tuples), as ``dataclasses.asdict`` made."""
    if isinstance(value, dict):
        return type(value)((_copy(k), _copy(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value


class PluginEntry(Record):
    """One plugin the job carries: a locked package (``owner`` set) or a recipe built-in.

    Fields: name, version, tree_digest (the JSON key is ``digest``), kind, load, entrypoint, owner (None for a built-in),
    targets, requires, top_level, files (relpath -> sha256 hex: mismatch reports, and the hashes a worker
    checks each file against as it reads it), params,
    signature (the publisher's DSSE envelope as JSON text, None when the job carries none).
    """

    name: str
    version: str
    tree_digest: str
    kind: str
    load: str
    entrypoint: str
    owner: str | None
    targets: tuple[str, ...]
    requires: dict[str, Any]
    top_level: tuple[str, ...]
    files: dict[str, str]
    params: dict[str, Any]
    signature: str | None
    __slots__ = ("name", "version", "tree_digest", "kind", "load", "entrypoint", "owner", "targets",
                 "requires", "top_level", "files", "params", "signature")

    def __init__(self, name: str, version: str, tree_digest: str, kind: str, load: str, entrypoint: str,
                 owner: str | None = None, targets: tuple = (), requires: dict | None = None,
                 top_level: tuple = (), files: dict | None = None, params: dict | None = None,
                 signature: str | None = None) -> None:
        self._set(
            name, version, tree_digest, kind, load, entrypoint, owner, targets, {} if requires is None else requires,
            top_level, {} if files is None else files, {} if params is None else params, signature,
        )

    @property
    def ref(self) -> str:
        """``owner/name@version`` for a package, ``recipe:name@version`` for a built-in."""
        return f"{self.owner}/{self.name}@{self.version}" if self.owner else f"recipe:{self.name}@{self.version}"

    def to_dict(self) -> dict:
        d = {f: _copy(getattr(self, f)) for f in self._fields}
        d["digest"] = d.pop("tree_digest")  # the JSON key
        d["ref"] = self.ref
        d["targets"] = list(self.targets)
        d["top_level"] = list(self.top_level)
        if self.owner is None:
            del d["owner"]
        if self.signature is None:
            del d["signature"]
        return d

    @classmethod
    def from_dict(cls, data, where: str) -> "PluginEntry":
        if not _is_mapping(data):
            raise SpecError(f"{where}: expected an object")
        name = _name(data.get("name"), f"{where}.name")
        owner = data.get("owner")
        if owner is not None:
            _name(owner, f"{where}.owner")
        version = _str(data.get("version"), f"{where}.version")
        digest = data.get("digest")
        if not is_digest(digest):
            raise SpecError(f"{where}.digest: expected 'sf1:<64 hex>', got {digest!r}")
        kind = data.get("kind")
        if kind not in KINDS:
            raise SpecError(f"{where}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        load = data.get("load", "eager")
        if load not in LOADS:
            raise SpecError(f"{where}.load: expected eager or deferred, got {load!r}")
        entrypoint = _str(data.get("entrypoint"), f"{where}.entrypoint")
        if not is_entrypoint(entrypoint):
            raise SpecError(f"{where}.entrypoint: {entrypoint!r} is not 'module:function'")
        targets = _modules(data.get("targets", []), f"{where}.targets")
        top_level = _modules(data.get("top_level", []), f"{where}.top_level")
        files = data.get("files", {})
        if not _is_mapping(files) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise SpecError(f"{where}.files: expected an object of path -> sha256 hex")
        requires = data.get("requires", {})
        if not _is_mapping(requires):
            raise SpecError(f"{where}.requires: expected an object")
        params = data.get("params", {})
        if not _is_mapping(params):
            raise SpecError(f"{where}.params: expected an object")
        signature = data.get("signature")
        if signature is not None and (not isinstance(signature, str) or not signature.strip()):
            raise SpecError(f"{where}.signature: expected the DSSE envelope as JSON text")
        if signature is not None and owner is None:
            raise SpecError(f"{where}.signature: only a plugin package (with an owner) carries a signature")
        return cls(
            name=name,
            version=version,
            tree_digest=digest,
            kind=kind,
            load=load,
            entrypoint=entrypoint,
            owner=owner,
            targets=targets,
            requires=dict(requires),
            top_level=top_level,
            files=dict(files),
            params=dict(params),
            signature=signature,
        )


class JobSpec(Record):
    """The whole job: entrypoint (argv of the training entrypoint, e.g. ``["python", "-m",
    "toy_grpo.train"]``), hyperparams, plugins (PluginEntry, in load order), recipe_plugins
    (built-ins, loaded after the packages), core_version, strict_deferred, backend, extra
    (backend settings, ``ray.*``/``slurm.*``, opaque here) and python (the job's Python as
    ``forge.yaml`` names it, resolved on the node: SPEC §14; None for the entrypoint's or the
    backend's default), recipe_digest (the tree digest of the staged ``recipe/``, recorded
    at staging so ``forge jobs replay`` can prove the recipe it runs again is the same) and
    replay (``{"of": ID, "environment": {...} | None, "strict": bool}`` for a job that
    replays job ID: the launcher compares the environment fingerprint ID recorded) and
    ledger_only (JSON key ``plan``; ``forge plan --backend``: the launcher runs the load
    phase only and prints the ledger, as ``forge-launch --plan -``) and lineage (None, or
    ``{"outputs": [declared directories], "sample_above": bytes, "yanks": {ref: facts at
    submit}}``: what the end of an attempt records, :mod:`.lineage`)."""

    id: str
    name: str
    created: str
    entrypoint: list[str]
    hyperparams: dict[str, Any]
    plugins: tuple[PluginEntry, ...]
    recipe_plugins: tuple[PluginEntry, ...]
    core_version: str
    strict_deferred: bool
    backend: str
    extra: dict[str, Any]
    python: str | None
    recipe_digest: str | None
    replay: dict[str, Any] | None
    ledger_only: bool
    lineage: dict[str, Any] | None
    __slots__ = ("id", "name", "created", "entrypoint", "hyperparams", "plugins", "recipe_plugins",
                 "core_version", "strict_deferred", "backend", "extra", "python", "recipe_digest", "replay",
                 "ledger_only", "lineage")

    def __init__(self, id: str, name: str, created: str, entrypoint: list, hyperparams: dict | None = None,
                 plugins: tuple = (), recipe_plugins: tuple = (), core_version: str = "",
                 strict_deferred: bool = False, backend: str = "local", extra: dict | None = None,
                 python: str | None = None, recipe_digest: str | None = None, replay: dict | None = None,
                 ledger_only: bool = False, lineage: dict | None = None) -> None:
        self._set(
            id, name, created, entrypoint, {} if hyperparams is None else hyperparams, plugins, recipe_plugins,
            core_version, strict_deferred, backend, {} if extra is None else extra, python, recipe_digest, replay,
            ledger_only, lineage,
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "id": self.id,
            "name": self.name,
            "created": self.created,
            "entrypoint": list(self.entrypoint),
            "hyperparams": dict(self.hyperparams),
            "plugins": [p.to_dict() for p in self.plugins],
            "recipe": {"plugins": [p.to_dict() for p in self.recipe_plugins]},
            "core_version": self.core_version,
            "strict_deferred": self.strict_deferred,
            "backend": self.backend,
            "extra": dict(self.extra),
        }
        if self.python is not None:
            out["python"] = self.python
        if self.recipe_digest is not None:
            out["recipe"] = {**out["recipe"], "digest": self.recipe_digest}
        if self.replay is not None:
            out["replay"] = _copy(self.replay)
        if self.ledger_only:
            out["plan"] = True
        if self.lineage is not None:
            out["lineage"] = _copy(self.lineage)
        return out

    def to_json(self) -> str:
        return format_json(self.to_dict()) + "\n"

    @classmethod
    def from_dict(cls, data) -> "JobSpec":
        if not _is_mapping(data):
            raise SpecError("jobspec: expected a JSON object")
        if data.get("schema") != SCHEMA:
            raise SpecError(f"jobspec.schema: expected '{SCHEMA}', got {data.get('schema')!r}")
        job_id = _str(data.get("id"), "jobspec.id")
        if not is_job_id(job_id):
            raise SpecError(f"jobspec.id: {job_id!r} is not a valid job id")
        entrypoint = data.get("entrypoint")
        if isinstance(entrypoint, str):
            import shlex

            entrypoint = shlex.split(entrypoint)
        if not isinstance(entrypoint, list) or not entrypoint or not all(isinstance(a, str) for a in entrypoint):
            raise SpecError("jobspec.entrypoint: expected a non-empty list of strings")
        hyperparams = data.get("hyperparams", {})
        if not _is_mapping(hyperparams):
            raise SpecError("jobspec.hyperparams: expected an object")
        plugins = data.get("plugins", [])
        recipe = data.get("recipe", {})
        if not isinstance(plugins, list):
            raise SpecError("jobspec.plugins: expected a list")
        if not _is_mapping(recipe) or not isinstance(recipe.get("plugins", []), list):
            raise SpecError("jobspec.recipe.plugins: expected a list")
        entries = tuple(PluginEntry.from_dict(p, f"jobspec.plugins[{i}]") for i, p in enumerate(plugins))
        builtins = tuple(
            PluginEntry.from_dict(p, f"jobspec.recipe.plugins[{i}]") for i, p in enumerate(recipe.get("plugins", []))
        )
        for what, group in (("plugins", entries), ("recipe.plugins", builtins)):
            names = [p.name for p in group]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise SpecError(f"jobspec.{what}: plugin name listed twice: {', '.join(dupes)}")
        strict = data.get("strict_deferred", False)
        if not isinstance(strict, bool):
            raise SpecError("jobspec.strict_deferred: expected true or false")
        extra = data.get("extra", {})
        if not _is_mapping(extra):
            raise SpecError("jobspec.extra: expected an object")
        python = data.get("python")
        if python is not None and (not isinstance(python, str) or not python.strip() or "\0" in python):
            raise SpecError("jobspec.python: expected an interpreter path or command name")
        recipe_digest = recipe.get("digest")
        if recipe_digest is not None and not (isinstance(recipe_digest, str) and is_digest(recipe_digest)):
            raise SpecError(f"jobspec.recipe.digest: expected 'sf1:<64 hex>', got {recipe_digest!r}")
        replay = data.get("replay")
        if replay is not None:
            if not _is_mapping(replay) or not isinstance(replay.get("of"), str) or not is_job_id(replay["of"]):
                raise SpecError("jobspec.replay: expected an object whose 'of' is a job id")
            if not isinstance(replay.get("strict", False), bool) or not (
                replay.get("environment") is None or _is_mapping(replay.get("environment"))
            ):
                raise SpecError("jobspec.replay: 'strict' is true or false, 'environment' an object or null")
            replay = dict(replay)
        ledger_only = data.get("plan", False)
        if not isinstance(ledger_only, bool):
            raise SpecError("jobspec.plan: expected true or false")
        lineage = data.get("lineage")
        if lineage is not None:
            lineage = _lineage(lineage)
        return cls(
            id=job_id,
            name=_str(data.get("name"), "jobspec.name"),
            created=_str(data.get("created", ""), "jobspec.created"),
            entrypoint=list(entrypoint),
            hyperparams=dict(hyperparams),
            plugins=entries,
            recipe_plugins=builtins,
            core_version=_str(data.get("core_version", ""), "jobspec.core_version"),
            strict_deferred=strict,
            backend=_str(data.get("backend", "local"), "jobspec.backend"),
            extra=dict(extra),
            python=python,
            recipe_digest=recipe_digest,
            replay=replay,
            ledger_only=ledger_only,
            lineage=lineage,
        )


# The JobSpec's sha256 bound at staging (SPEC §9 "Binding"), as every process of a job gets it.
SPEC_SHA256_ENV = "FORGE_SPEC_SHA256"


def read_spec(path: str | os.PathLike, sha256: str | None = None) -> JobSpec:
    """Read and validate ``jobspec.json``; any problem is a :class:`SpecError` (exit 2).

    With *sha256* (the job's binding, SPEC §9), the bytes parsed must hash to it, else
    :class:`VerificationError` (exit 10).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if sha256:
            import hashlib

            got = hashlib.sha256(raw).hexdigest()
            if got != sha256:
                raise VerificationError(
                    f"the JobSpec {os.fspath(path)} changed after staging: its sha256 is {got}, the job was submitted with {sha256}"
                )
        data = parse_json(raw.decode("utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{os.fspath(path)}: no such JobSpec") from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"{os.fspath(path)}: not a readable JSON JobSpec: {exc}") from None
    return JobSpec.from_dict(data)


def write_spec(spec: JobSpec, path: str | os.PathLike) -> None:
    """Write *spec* atomically (temp file in the same directory, then rename)."""
    from .atomic import write_file  # here, not at the top: every process of a job reads specs, few write them

    write_file(path, spec.to_json())


def _lineage(value) -> dict:
    """``jobspec.lineage`` checked for shape (the directories themselves are checked at
    submit and when an attempt ends, by :mod:`.lineage`, which a worker never imports)."""
    if not _is_mapping(value):
        raise SpecError("jobspec.lineage: expected an object")
    dirs = value.get("outputs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise SpecError("jobspec.lineage.outputs: expected a list of directories")
    above = value.get("sample_above")
    if above is not None and (isinstance(above, bool) or not isinstance(above, int) or above < 1):
        raise SpecError("jobspec.lineage.sample_above: expected a positive number of bytes")
    if not _is_mapping(value.get("yanks", {})):
        raise SpecError("jobspec.lineage.yanks: expected an object")
    return _copy(dict(value))


def _is_mapping(value: object) -> bool:
    return isinstance(value, Mapping)


def _str(value, where: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{where}: expected a string, got {value!r}")
    return value


def _name(value, where: str) -> str:
    if not is_plugin_name(value):
        raise SpecError(f"{where}: {value!r} is not a valid plugin name")
    return value


def _modules(value, where: str) -> tuple:
    if not isinstance(value, list) or not all(is_module(m) for m in value):
        raise SpecError(f"{where}: expected a list of dotted module names")
    return tuple(value)


def example() -> dict:
    """A complete, valid JobSpec as a dict (used in docs and tests)."""
    return {
        "schema": SCHEMA,
        "id": "qwen3b-grpo-opsd-20261129-0001",
        "name": "qwen3b-grpo-opsd",
        "created": "2026-11-29T12:00:00Z",
        "entrypoint": ["python", "-m", "toy_grpo.train"],
        "hyperparams": {"opsd.scale": 0.5, "grpo.group_size": 8, "grpo.lr": 1e-6},
        "plugins": [
            {
                "owner": "alice",
                "name": "opsd-patch",
                "version": "1.2.0",
                "digest": "sf1:" + "0" * 64,
                "kind": "algorithm",
                "load": "eager",
                "entrypoint": "opsd_patch:install",
                "targets": ["toy_grpo.algorithms"],
                "requires": {"core": ">=0.1,<1"},
                "top_level": ["opsd_patch"],
                "files": {"opsd_patch.py": "0" * 64, "plugin.yaml": "0" * 64},
                "params": {"opsd.scale": {"type": "float", "default": 1.0}},
            }
        ],
        "recipe": {"plugins": []},
        "core_version": "0.1.0",
        "strict_deferred": False,
        "backend": "local",
        "extra": {},
    }


def parse_json(text: str) -> Any:
    """``json.loads(text)``: the JSON reader of every cluster-side file (specs, records)."""
    return json.loads(text)


def format_json(obj: Any, default: Callable[[Any], Any] | None = None) -> str:
    """``json.dumps(obj, indent=2, sort_keys=True, default=default)``: how StarForge writes JSON."""
    return json.dumps(obj, indent=2, sort_keys=True, default=default)
