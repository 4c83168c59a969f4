"""``forge.yaml`` (schema ``forge/job/v1``): an experiment's declaration, validated.

Read through :mod:`starforge.package_format.yamlio` (YAML 1.2 core scalars, no duplicate keys, no
aliases). Every problem is a :class:`ManifestError` naming the file, the line and the key,
with the closest valid key for a typo::

    forge.yaml:4: unknown key 'plugin' (did you mean 'plugins'?)

Keys (decisions where the spec is silent are marked *decided*):

- ``schema`` (required): exactly ``forge/job/v1``.
- ``name`` (required): the job name; letters, digits, ``.``, ``_``, ``-``, at most 64
  characters, starting with a letter or digit (*decided*: it becomes part of job ids and
  directory names).
- ``entrypoint`` (required): the training command, a string split like a shell would
  (``python -m toy_grpo.train --steps 3``) or a list of strings.
- ``plugins``: plugin package requests (``owner/name``, ``owner/name@1.2.0``,
  ``owner/name@~=1.2``) in load order; default none. One plugin name at most once. A
  request may be written ``{request: owner/name@1.2.0, allow_yanked: true}``: the
  experiment runs that version knowingly although it is yanked (recorded in the lock).
- ``recipe``: ``{plugins: [name, ...]}``, built-ins under ``common/algorithms/<name>/``.
- ``config``: a mapping, flattened into dotted hyperparameter keys (``{grpo: {lr: 1e-6}}``
  becomes ``grpo.lr``); dotted keys may also be written directly. Two spellings of the
  same dotted key are an error.
- ``backend``: ``local`` (default), ``ray`` or ``slurm`` (any name in
  :data:`starforge.backends.BACKENDS`).
- ``strict_deferred``: ``true`` fails the job when a deferred plugin was never installed.
- ``ray``, ``slurm``: mappings handed to that backend as its settings; the backend
  validates their keys (*decided*: they belong to the backend, not to this schema). Every
  backend whose :data:`~starforge.backends.BACKENDS` entry has a section gets such a key,
  after ``strict_deferred``; here it is only checked to be a mapping.
- ``python`` (optional): the job's Python (SPEC §14), an interpreter path (absolute, or
  relative to the experiment directory as it is staged: the job's ``recipe/``), or a
  command name looked up on the node's PATH; ``$VAR`` is expanded on the node. Worked out
  on the node, where the path exists. ``ray.python`` / ``slurm.python`` override it for
  that backend. Without it: the interpreter the entrypoint names, else the backend's
  default.
- ``plan`` (optional): ``{acknowledge: [{plugin, replaces, reason}]}``, the replaces the
  experiment means, which ``forge plan`` lists without failing (docs/before-after.md).
- ``outputs`` (optional): the directories the job writes its outputs to besides
  ``work/`` (SPEC §18), absolute or starting with ``$VAR``, expanded on the node (the job's
  id is ``FORGE_JOB_ID``): a list, or ``{dirs: [...], sample_above: BYTES}`` (files above
  that size are matched by a sampled digest; docs/lineage.md).
- ``registry`` (optional, *decided*): registry URL for this experiment, used by
  ``forge lock`` and ``forge submit`` when neither ``--registry`` nor ``FORGE_REGISTRY``
  is given (before the user config and the embedded default).

Laptop side.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import backend_names, settings_sections
from ..cluster.jobdir_layout import PLUGINS_DIR
from ..cluster.names import is_plugin_name
from ..errors import ManifestError, UsageError
from ..package_format.manifest import closest
from ..package_format.yamlio import YamlDoc, load_yaml_file
from .overrides import NON_FINITE_HINT, first_non_finite, yaml_float

SCHEMA = "forge/job/v1"
FILENAME = "forge.yaml"
# forge.yaml's top-level keys: these, with each backend's section (settings_sections())
# between strict_deferred and registry (top_keys()).
KEYS_BEFORE_SECTIONS = (
    "schema",
    "name",
    "entrypoint",
    "plugins",
    "recipe",
    "config",
    "backend",
    "strict_deferred",
)
KEYS_AFTER_SECTIONS = ("registry", "python", "plan", "outputs")
PLAN_KEYS = ("acknowledge",)
ACK_KEYS = ("plugin", "replaces", "reason")
REQUEST_KEYS = ("request", "allow_yanked")  # a plugin request written as a mapping
REQUIRED = ("schema", "name", "entrypoint")
RECIPE_KEYS = ("plugins",)
JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CONFIG_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")


@dataclass(frozen=True)
class PluginRequest:
    """One entry of ``plugins:`` as written, and parsed."""

    text: str  # as written in forge.yaml
    owner: str
    name: str
    specifier: str | None  # None: newest non-prerelease
    line: int | None = None
    allow_yanked: bool = False  # the experiment runs this version although it is yanked (``{request: …, allow_yanked: true}``)

    @property
    def request(self) -> str:
        """The normalized request (``alice/opsd-patch@~=1.2``; ``@1.2.0`` becomes ``@==1.2.0``)."""
        return f"{self.owner}/{self.name}" + (f"@{self.specifier}" if self.specifier else "")

    def admits(self, version: str) -> bool:
        """Whether *version* satisfies this request (a bare request admits any final release).

        The launcher's check of a specifier (pre-releases included): a plain one, such as
        the ``==1.2.0`` of an exact request, without importing packaging's SpecifierSet.
        """
        if self.specifier is None:
            from packaging.version import Version

            return not Version(version).is_prerelease
        from ..cluster.requires import satisfies

        return satisfies(self.specifier, version)


@dataclass(frozen=True)
class Experiment:
    """A validated ``forge.yaml`` and the directory it lives in."""

    root: Path
    name: str
    entrypoint: tuple
    plugins: tuple = ()  # PluginRequest, in load order
    recipe_plugins: tuple = ()  # built-in names, in load order
    config: dict = field(default_factory=dict)
    backend: str = "local"
    strict_deferred: bool = False
    sections: dict = field(default_factory=dict)  # backend name -> its forge.yaml section ({} when absent)
    registry: str | None = None
    python: str | None = None
    plan_acknowledge: tuple = ()  # forge plan: the replaces this experiment means ({plugin, replaces, reason})
    outputs: tuple = ()  # declared output directories, as written ($VAR expanded on the node)
    sample_above: int | None = None  # outputs above this size are matched by a sampled digest
    source: str = FILENAME
    lines: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def path(self) -> Path:
        return self.root / FILENAME

    @property
    def lock_path(self) -> Path:
        return self.root / "plugins.lock.json"

    def builtin_dir(self, name: str) -> Path:
        return self.root / "common" / "algorithms" / name

    def job_python(self, backend: str) -> str | None:
        """The job's Python as declared for *backend*: ``<backend>.python``, else ``python``."""
        return self.backend_settings(backend).get("python") or self.python

    def backend_settings(self, backend: str) -> dict:
        """forge.yaml's ``<backend>:`` mapping (``ray:``, ``slurm:``; ``{}`` for local)."""
        return dict(self.sections.get(backend, {}))

    if not TYPE_CHECKING:  # for mypy, an Experiment has no attributes but its fields

        def __getattr__(self, name: str) -> dict:
            # exp.ray, exp.slurm: a backend's section by the backend's name
            if name in settings_sections():
                return self.sections.get(name, {})
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def flat_config(self) -> dict:
        """``config`` flattened to dotted keys (lists and scalars are leaves)."""
        return flatten(self.config)

    def line(self, path: tuple) -> int | None:
        for n in range(len(path), -1, -1):
            found = self.lines.get(tuple(path[:n]))
            if found is not None:
                return found
        return None


def find_experiment_root(directory: str | os.PathLike = ".") -> Path:
    """The experiment directory for *directory*: itself when it holds ``forge.yaml``; for the
    current directory (the default of every command), the nearest parent holding one, as
    git and uv find theirs; else *directory* itself (whose missing forge.yaml is the error)."""
    root = Path(directory).resolve()
    if (root / FILENAME).is_file() or root != Path.cwd().resolve():
        return root
    for parent in root.parents:
        if (parent / FILENAME).is_file():
            return parent
    return root


def load_experiment(directory: str | Path = ".") -> Experiment:
    """Read and validate ``<directory>/forge.yaml`` (for the current directory, the nearest
    one up the tree: :func:`find_experiment_root`)."""
    root = find_experiment_root(directory)
    path = root / FILENAME
    if not path.is_file():
        if not root.is_dir():
            raise UsageError(f"{directory}: no such directory")
        raise ManifestError(f"{path}: no forge.yaml here or in a parent directory",
                            hint="an experiment directory holds forge.yaml; see docs/experiments.md")
    doc = load_yaml_file(path)
    return parse_experiment(doc, root)


def parse_experiment(doc: YamlDoc, root: Path) -> Experiment:
    """Validate a loaded ``forge.yaml`` document."""
    v = _Validator(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise v.fail((), f"expected a mapping at the top level, got {_kind(data)}")
    v.keys((), data, top_keys(), REQUIRED)
    if data["schema"] != SCHEMA:
        raise v.fail(("schema",), f"schema: expected '{SCHEMA}', got {data['schema']!r}", hint=f"the first line of forge.yaml is: schema: {SCHEMA}")
    name = v.string(("name",), data["name"])
    if not JOB_NAME_RE.match(name):
        raise v.fail(("name",), f"'{name}' is not a valid job name: letters, digits, '.', '_', '-', at most 64 characters")
    entrypoint = _entrypoint(v, data["entrypoint"])
    plugins = _plugins(v, data.get("plugins", []))
    recipe = data.get("recipe", {}) or {}
    if not isinstance(recipe, dict):
        raise v.fail(("recipe",), f"recipe: expected a mapping with 'plugins', got {_kind(recipe)}", hint="write: recipe: {plugins: [name, ...]}")
    v.keys(("recipe",), recipe, RECIPE_KEYS)
    builtins = _builtins(v, recipe.get("plugins", []))
    config = data.get("config", {})
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise v.fail(("config",), f"config: expected a mapping, got {_kind(config)}")
    config_keys(doc, config, ("config",))
    backend = data.get("backend", "local")
    names = backend_names()
    if backend not in names:
        guess = closest(str(backend), names)
        raise v.fail(
            ("backend",),
            f"backend: expected one of {', '.join(names)}, got {backend!r}" + (f" (did you mean '{guess}'?)" if guess else ""),
            hint=f"backends: {', '.join(names)} (default local)",
        )
    strict = data.get("strict_deferred", False)
    if not isinstance(strict, bool):
        raise v.fail(("strict_deferred",), f"strict_deferred: expected true or false, got {_kind(strict)} {strict!r}")
    settings = {}
    for key in settings_sections():
        value = data.get(key, {})
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise v.fail((key,), f"{key}: expected a mapping of {key} backend settings, got {_kind(value)}")
        settings[key] = value
    registry = data.get("registry")
    if registry is not None:
        registry = v.string(("registry",), registry)
    python = data.get("python")
    if python is not None:
        python = v.string(("python",), python)
        if not python.strip() or "\0" in python:
            raise v.fail(("python",), "python: expected an interpreter path or command name",
                         hint="for example: python: /opt/venv/bin/python")
    plan_ack = _plan(v, data.get("plan"))
    outputs, sample_above = _outputs(v, data.get("outputs"))
    return Experiment(
        root=root,
        name=name,
        entrypoint=entrypoint,
        plugins=plugins,
        recipe_plugins=builtins,
        config=config,
        backend=backend,
        strict_deferred=strict,
        sections=settings,
        registry=registry,
        python=python,
        plan_acknowledge=plan_ack,
        outputs=outputs,
        sample_above=sample_above,
        source=doc.source,
        lines=dict(doc.lines),
    )


def top_keys() -> tuple:
    """forge.yaml's top-level keys, every backend's section included."""
    return KEYS_BEFORE_SECTIONS + settings_sections() + KEYS_AFTER_SECTIONS


def flatten(mapping: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}, "c.d": 2}`` -> ``{"a.b": 1, "c.d": 2}``; an empty mapping is a leaf."""
    out: dict = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def parse_request(text: str, line: int | None = None) -> PluginRequest:
    """Parse one plugin request; raise :class:`UsageError` when malformed."""
    from ..registry.base import parse_ref

    ref = parse_ref(text)
    return PluginRequest(text=text, owner=ref.owner, name=ref.name, specifier=ref.specifier, line=line)


class _Validator:
    def __init__(self, doc: YamlDoc) -> None:
        self.doc = doc

    def fail(self, path: tuple, message: str, hint: str | None = None) -> ManifestError:
        line = None
        for n in range(len(path), -1, -1):
            line = self.doc.line(path[:n])
            if line is not None:
                break
        where = f"{self.doc.source}:{line}" if line is not None else self.doc.source
        return ManifestError(f"{where}: {message}", hint=hint)

    def keys(self, path: tuple, data: dict, allowed: tuple, required: tuple = ()) -> None:
        for key in data:
            if key not in allowed:
                guess = closest(str(key), allowed)
                label = ".".join(str(p) for p in path + (key,))
                # the guess is in the message; the hint lists the valid keys (not the guess twice)
                guessed = f" (did you mean '{guess}'?)" if guess else ""
                raise self.fail(path + (key,), f"unknown key '{label}'{guessed}", hint=f"valid keys: {', '.join(allowed)}")
        for key in required:
            if key not in data:
                where = ".".join(path)
                raise self.fail(path, f"missing required key '{key}'" + (f" in '{where}'" if where else ""))

    def string(self, path: tuple, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"{'.'.join(map(str, path))}: expected a non-empty string, got {_kind(value)} {value!r}")
        return value


def _plan(v: _Validator, value: Any) -> tuple:
    """``plan: {acknowledge: [{plugin: NAME, replaces: TARGET, reason: TEXT}]}``: the replaces
    ``forge plan`` is not to count as conflicts (TARGET may use ``*`` and ``?``)."""
    if value is None:
        return ()
    example = 'plan: {acknowledge: [{plugin: dr-grpo, replaces: "toy_grpo.algorithms:compute_advantages"}]}'
    if not isinstance(value, dict):
        raise v.fail(("plan",), f"plan: expected a mapping with 'acknowledge', got {_kind(value)}", hint=example)
    v.keys(("plan",), value, PLAN_KEYS)
    entries = value.get("acknowledge") or []
    if not isinstance(entries, list):
        raise v.fail(("plan", "acknowledge"), f"plan.acknowledge: expected a list, got {_kind(entries)}", hint=example)
    out = []
    for i, entry in enumerate(entries):
        path = ("plan", "acknowledge", i)
        if not isinstance(entry, dict):
            raise v.fail(path, f"plan.acknowledge[{i}]: expected a mapping with plugin and replaces, got {_kind(entry)}", hint=example)
        v.keys(path, entry, ACK_KEYS, ("plugin", "replaces"))
        plugin = v.string(path + ("plugin",), entry["plugin"])
        if not is_plugin_name(plugin):
            raise v.fail(path + ("plugin",), f"plan.acknowledge[{i}].plugin: '{plugin}' is not a plugin name (the manifest name, no owner)",
                         hint=example)
        replaces = v.string(path + ("replaces",), entry["replaces"])
        reason = entry.get("reason")
        if reason is not None:
            reason = v.string(path + ("reason",), reason)
        out.append({"plugin": plugin, "replaces": replaces, "reason": reason})
    return tuple(out)


OUTPUTS_KEYS = ("dirs", "sample_above")


def _outputs(v: _Validator, value: Any) -> tuple:
    """``outputs: [DIR, ...]`` or ``outputs: {dirs: [DIR, ...], sample_above: BYTES}``."""
    from ..cluster.lineage import declared_dir_problem

    example = "outputs: [/lustre/ckpt/$FORGE_JOB_ID]"
    if value is None:
        return (), None
    path: tuple = ("outputs",)
    sample_above = None
    if isinstance(value, dict):
        v.keys(path, value, OUTPUTS_KEYS, ("dirs",))
        sample_above = value.get("sample_above")
        if sample_above is not None and (isinstance(sample_above, bool) or not isinstance(sample_above, int) or sample_above < 1):
            raise v.fail(path + ("sample_above",), f"outputs.sample_above: expected a positive number of bytes, got {sample_above!r}")
        value, path = value["dirs"], path + ("dirs",)
    if not isinstance(value, list):
        raise v.fail(path, f"{'.'.join(path)}: expected a list of directories, got {_kind(value)}", hint=example)
    for i, item in enumerate(value):
        problem = declared_dir_problem(item)
        if problem:
            raise v.fail(path + (i,), f"{'.'.join(path)}[{i}]: {problem}", hint=example)
    return tuple(value), sample_above


def _entrypoint(v: _Validator, value: Any) -> tuple:
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise v.fail(("entrypoint",), f"entrypoint: cannot split {value!r}: {exc}") from None
    elif isinstance(value, list) and all(isinstance(a, str) for a in value):
        argv = list(value)
    else:
        raise v.fail(("entrypoint",), f"entrypoint: expected a command string or a list of strings, got {_kind(value)}")
    if not argv:
        raise v.fail(("entrypoint",), "entrypoint: empty command")
    return tuple(argv)


def _plugins(v: _Validator, value: Any) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise v.fail(("plugins",), f"plugins: expected a list of requests like owner/name@~=1.2, got {_kind(value)}")
    out = []
    seen: dict = {}
    for i, item in enumerate(value):
        path = ("plugins", i)
        allow_yanked = False
        if isinstance(item, dict):
            # {request: owner/name@1.2.0, allow_yanked: true}: a yanked version the experiment runs knowingly
            v.keys(path, item, REQUEST_KEYS, ("request",))
            allow_yanked = item.get("allow_yanked", False)
            if not isinstance(allow_yanked, bool):
                raise v.fail(path + ("allow_yanked",), f"plugins[{i}].allow_yanked: expected true or false, got "
                             f"{_kind(allow_yanked)} {allow_yanked!r}")
            item = item["request"]
        if not isinstance(item, str):
            raise v.fail(path, f"plugins[{i}]: expected a request like owner/name@~=1.2, got {_kind(item)} {item!r}")
        try:
            req = replace(parse_request(item, v.doc.line(path)), allow_yanked=allow_yanked)
        except UsageError as exc:
            raise v.fail(path, f"plugins[{i}]: {exc.message}", hint=exc.hint) from None
        if req.name in seen:
            raise v.fail(
                path,
                f"plugins[{i}]: plugin '{req.name}' is already requested as '{seen[req.name]}'",
                hint=f"a plugin name is loaded once (one {PLUGINS_DIR}/{req.name}/ per job): delete one of the two requests from plugins:",
            )
        seen[req.name] = item
        out.append(req)
    return tuple(out)


def _builtins(v: _Validator, value: Any) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise v.fail(("recipe", "plugins"), f"recipe.plugins: expected a list of built-in names, got {_kind(value)}")
    out: list = []
    for i, item in enumerate(value):
        path = ("recipe", "plugins", i)
        if not isinstance(item, str) or not is_plugin_name(item):
            raise v.fail(path, f"recipe.plugins[{i}]: {item!r} is not a plugin name (lowercase letters, digits, single dashes)")
        if item in out:
            raise v.fail(path, f"recipe.plugins[{i}]: '{item}' is listed twice")
        out.append(item)
    return tuple(out)


@dataclass(frozen=True)
class ConfigKey:
    """One dotted key of a config mapping, as written."""

    value: Any
    line: int | None
    new: bool = False  # written +key (values files): a key neither config: nor a plugin declares


def config_keys(doc: YamlDoc, mapping: dict, base: tuple = (), plus: bool = False) -> dict:
    """The dotted keys of *mapping* -> :class:`ConfigKey`, in the order written: forge.yaml's
    ``config:`` (*base* ``("config",)``) or a values file (the whole document).

    One rule for both: each key is a name (letters, digits, ``_``, ``-``, dotted); NaN and
    infinities are refused; one key written twice (``grpo: {lr: 1}`` and ``grpo.lr: 9``), or
    both a value and a group (``grpo: 1`` and ``grpo.lr: 2``), is an error naming the first
    line. With *plus* (values files), a key written ``+key`` is new, and so is every key under it.
    """
    out: dict = {}
    _walk_config(_Validator(doc), mapping, base, (), False, plus, out, {})
    return out


def _walk_config(v: _Validator, mapping: dict, path: tuple, parts: tuple, new: bool, plus: bool,
                 out: dict, groups: dict) -> None:
    """*groups* maps every proper prefix of a key seen so far to the first key under it."""
    for written, value in mapping.items():
        here = path + (written,)
        key, is_new = written, new
        if plus and isinstance(key, str) and key.startswith("+"):
            key, is_new = key[1:], True
        if not isinstance(key, str) or not CONFIG_KEY_RE.match(key):
            raise v.fail(here, f"config key {written!r} is not a name (letters, digits, '_', '-', dotted)",
                         hint="a key that neither config: nor a plugin declares is written +key" if plus else None)
        dotted_parts = parts + tuple(key.split("."))
        if isinstance(value, dict) and value:
            _walk_config(v, value, here, dotted_parts, is_new, plus, out, groups)
            continue
        bad = first_non_finite(value)
        if bad is not None:
            label = ".".join(str(p) for p in here)
            raise v.fail(here, f"{label}: {yaml_float(bad)} is not a finite number", hint=NON_FINITE_HINT)
        dotted = ".".join(dotted_parts)
        if dotted in out:
            raise v.fail(here, f"config key '{dotted}' is written twice (first at line {out[dotted].line})")
        if dotted in groups:
            raise v.fail(here, f"config key '{dotted}' is both a value and a group ('{groups[dotted]}')")
        for n in range(1, len(dotted_parts)):
            prefix = ".".join(dotted_parts[:n])
            if prefix in out:
                raise v.fail(here, f"config key '{dotted}' is inside '{prefix}', which is already a value (line {out[prefix].line})")
            groups.setdefault(prefix, dotted)
        out[dotted] = ConfigKey(value=value, line=v.doc.line(here), new=is_new)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__
    )
