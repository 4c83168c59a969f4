"""PluginManifest: a validated ``plugin.yaml`` (schema ``forge/plugin/v1``) as a frozen record.

Pure: takes the mapping a YAML loader produced (plus, optionally, the line of every key)
and returns a :class:`PluginManifest` or raises :class:`ManifestError` naming the file,
the line, the key, what was expected and the closest valid key.

Shared by both sides: standard library plus ``packaging``.

>>> m = PluginManifest.from_mapping({"schema": "forge/plugin/v1", "name": "opsd-patch",
...     "version": "1.2", "kind": "algorithm", "entrypoint": "opsd_patch:install"})
>>> m.version, m.load
('1.2', 'eager')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..cluster.names import (
    ENTRYPOINT_PATTERN,
    MODULE_PATTERN,
    NAME_MAX,
    PLUGIN_NAME_PATTERN,
    is_entrypoint,
    is_module,
    is_plugin_name,
)
from ..cluster.plain_specifiers import plain_clauses
from ..errors import ManifestError

if TYPE_CHECKING:
    from ..cluster.jobspec import PluginEntry

SCHEMA = "forge/plugin/v1"
# The name rules are cluster/names.py's (the JobSpec checks them too): checks call its
# is_plugin_name / is_entrypoint / is_module; these compiled patterns are its patterns, for
# the JSON schema and editors.
NAME_RE = re.compile(PLUGIN_NAME_PATTERN)
ENTRYPOINT_RE = re.compile(ENTRYPOINT_PATTERN)
MODULE_RE = re.compile(MODULE_PATTERN)
PARAM_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")
DIST_RE = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")
KINDS = ("algorithm", "environment", "data-prep")
LOADS = ("eager", "deferred")
PARAM_TYPES = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,), "list": (list,), "dict": (dict,)}

TOP_KEYS = ("schema", "name", "version", "kind", "entrypoint", "load", "targets", "requires", "params", "description")
REQUIRED_KEYS = ("schema", "name", "version", "kind", "entrypoint")
REQUIRES_KEYS = ("core", "python", "packages")
PARAM_DECL_KEYS = ("type", "default", "description", "choices")
#: Param types that may list ``choices`` (values compared by equality).
CHOICE_TYPES = ("float", "int", "bool", "str")

Lines = Callable[[tuple], "int | None"]


def closest(word: str, choices) -> str | None:
    """The closest of *choices* to *word*, or None when nothing is close."""
    import difflib  # only for a mistake's hint

    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def type_matches(type_name: str, value: Any) -> bool:
    """Whether *value* fits a declared param type (an int fits ``float``; a bool fits only ``bool``)."""
    if isinstance(value, bool) and type_name != "bool":
        return False
    return isinstance(value, PARAM_TYPES[type_name])


def canonical_version(text: str) -> str:
    """The canonical PEP 440 form of a public version without epoch; raise ValueError otherwise."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(str(text))
    except InvalidVersion:
        raise ValueError(f"'{text}' is not a PEP 440 version") from None
    if v.epoch:
        raise ValueError(f"'{text}' has an epoch; plugin versions have none")
    if v.local:
        raise ValueError(f"'{text}' has a local part '+{v.local}'; plugin versions are public")
    return str(v)


def check_name(name: object, what: str = "name") -> str:
    """Validate a plugin or owner name; used before any path is built from it."""
    if not isinstance(name, str) or not is_plugin_name(name):
        raise ManifestError(
            f"invalid {what} {name!r}: lowercase letters, digits and single dashes, starting with a letter, at most {NAME_MAX} characters"
        )
    return name


@dataclass(frozen=True)
class ParamDecl:
    """One declared hyperparameter a plugin reads."""

    type: str
    default: Any = None
    has_default: bool = False
    description: str = ""
    choices: tuple | None = None  # the allowed values, when the plugin enumerates them

    def to_dict(self) -> dict:
        d: dict = {"type": self.type}
        if self.has_default:
            d["default"] = self.default
        if self.description:
            d["description"] = self.description
        if self.choices is not None:
            d["choices"] = list(self.choices)
        return d


@dataclass(frozen=True)
class Requires:
    core: str | None = None
    python: str | None = None
    packages: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d: dict = {}
        if self.core is not None:
            d["core"] = self.core
        if self.python is not None:
            d["python"] = self.python
        if self.packages:
            d["packages"] = dict(self.packages)
        return d


def manifest_dict(name: str, version: str, kind: str, entrypoint: str, load: str, targets=(),
                  requires: dict | None = None, params: dict | None = None, description: str = "") -> dict:
    """The shape of ``plugin.yaml`` from plain values: *requires* and *params* already as
    JSON-able data (``Requires.to_dict()``, key -> ``ParamDecl.to_dict()``). Keys in the
    schema's order; empty optional keys left out."""
    d: dict = {"schema": SCHEMA, "name": name, "version": version, "kind": kind, "entrypoint": entrypoint, "load": load}
    if targets:
        d["targets"] = list(targets)
    if requires:
        d["requires"] = requires
    if params:
        d["params"] = params
    if description:
        d["description"] = description
    return d


@dataclass(frozen=True)
class PluginManifest:
    name: str
    version: str
    kind: str
    entrypoint: str
    load: str = "eager"
    targets: tuple = ()
    requires: Requires = field(default_factory=Requires)
    params: dict = field(default_factory=dict)  # key -> ParamDecl
    description: str = ""

    @property
    def module(self) -> str:
        return self.entrypoint.split(":", 1)[0]

    @property
    def function(self) -> str:
        return self.entrypoint.split(":", 1)[1]

    def param_defaults(self) -> dict:
        return {k: p.default for k, p in self.params.items() if p.has_default}

    def to_dict(self) -> dict:
        """The manifest as plain JSON-able data (the shape of ``plugin.yaml``)."""
        return manifest_dict(
            self.name, self.version, self.kind, self.entrypoint, self.load, self.targets,
            self.requires.to_dict(), {k: p.to_dict() for k, p in self.params.items()}, self.description,
        )

    def plugin_entry(self, tree_digest: str, top_level, files: Mapping[str, str], *, owner: str | None = None,
                     version: str | None = None) -> "PluginEntry":
        """The JobSpec's plugin entry for the tree with this manifest: the one place a
        manifest's fields become an entry (a lock entry holds it; a built-in's is built
        here too). *version* is the registry's canonical version (default: as written)."""
        from ..cluster.jobspec import PluginEntry

        return PluginEntry(
            name=self.name,
            version=self.version if version is None else version,
            tree_digest=tree_digest,
            kind=self.kind,
            load=self.load,
            entrypoint=self.entrypoint,
            owner=owner,
            targets=tuple(self.targets),
            requires=self.requires.to_dict(),
            top_level=tuple(top_level),
            files=dict(files),
            params={k: p.to_dict() for k, p in self.params.items()},
        )

    @classmethod
    def from_mapping(cls, data: Any, source: str = "plugin.yaml", lines: Lines | None = None) -> "PluginManifest":
        """Validate *data*; *lines* maps a key path such as ``("requires", "core")`` to its line."""
        return _Validator(source, lines or (lambda path: None)).manifest(data)


class _Validator:
    def __init__(self, source: str, lines: Lines) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: tuple, message: str, hint: str | None = None) -> ManifestError:
        line = None
        for n in range(len(path), -1, -1):
            line = self.lines(path[:n])
            if line is not None:
                break
        where = f"{self.source}:{line}" if line is not None else self.source
        key = ".".join(str(p) for p in path)
        return ManifestError(f"{where}: {key + ': ' if key else ''}{message}", hint=hint)

    def keys(self, path: tuple, data: Mapping, allowed: tuple, required: tuple = ()) -> None:
        unknown: list[ManifestError] = []
        for key in data:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {key!r}")
            if key not in allowed:
                guess = closest(key, allowed)
                # the guess is in the message; the hint lists the valid keys (not the guess twice)
                guessed = f" (did you mean '{guess}'?)" if guess else ""
                unknown.append(self.fail(path + (key,), f"unknown key '{key}'{guessed}", hint=f"valid keys: {', '.join(allowed)}"))
        if unknown:
            unknown[0].also = tuple(unknown[1:])
            raise unknown[0]
        for key in required:
            if key not in data:
                raise self.fail(path, f"missing required key '{key}'")

    def string(self, path: tuple, value: Any) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_type_name(value)} {value!r}")
        return value

    def specifier(self, path: tuple, value: Any) -> str:
        text = self.string(path, value)
        if plain_clauses(text) is not None:
            return text  # valid as it stands (>=, <=, == or != and a release): no SpecifierSet needed
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(text)
        except InvalidSpecifier:
            raise self.fail(path, f"'{text}' is not a PEP 440 specifier set (example: '>=0.1,<1')") from None
        return text

    def manifest(self, data: Any) -> PluginManifest:
        """Check every key, collecting the errors: the first is raised, carrying the others
        in ``also`` so ``forge plugin check`` reports them all in one run."""
        if not isinstance(data, Mapping):
            raise self.fail((), f"expected a mapping at the top level, got {_type_name(data)}")
        errors: list[ManifestError] = []

        def checked(check, *args, default=None):
            try:
                return check(*args)
            except ManifestError as exc:
                errors.extend((exc, *exc.also))
                return default

        checked(self.keys, (), data, TOP_KEYS)
        misspelt = {closest(str(k), TOP_KEYS) for k in data if k not in TOP_KEYS}
        for key in REQUIRED_KEYS:
            if key not in data and key not in misspelt:  # 'entry_point' already said 'did you mean'
                errors.append(self.fail((), f"missing required key '{key}'"))
        if "schema" in data and data["schema"] != SCHEMA:
            errors.append(self.fail(("schema",), f"expected '{SCHEMA}', got {data['schema']!r}"))
        name = checked(self.name, data["name"]) if "name" in data else None
        version = checked(self.version, data["version"]) if "version" in data else None
        kind = checked(self.choice, ("kind",), data["kind"], KINDS) if "kind" in data else None
        entrypoint = checked(self.entrypoint, data["entrypoint"]) if "entrypoint" in data else None
        load = checked(self.choice, ("load",), data.get("load", "eager"), LOADS)
        targets = checked(self.targets, data.get("targets", []), default=())
        requires = checked(self.requires, data.get("requires", {}), default=Requires())
        params = checked(self.params, data.get("params", {}), default={})
        description = data.get("description", "")
        if description is None:
            description = ""
        checked(self.string, ("description",), description)
        if errors:
            first = errors[0]
            first.also = tuple(errors[1:])
            raise first
        assert name is not None and version is not None and kind is not None and entrypoint is not None  # no errors
        return PluginManifest(
            name=name,
            version=version,
            kind=kind,
            entrypoint=entrypoint,
            load=load,
            targets=targets,
            requires=requires,
            params=params,
            description=description,
        )

    def name(self, value: Any) -> str:
        name = self.string(("name",), value)
        if not is_plugin_name(name):
            raise self.fail(
                ("name",),
                f"'{name}' is not a valid name: lowercase letters, digits and single dashes, starting with a letter, at most {NAME_MAX} characters",
            )
        return name

    def version(self, raw_version: Any) -> str:
        if isinstance(raw_version, bool) or not isinstance(raw_version, (str, int, float)):
            raise self.fail(("version",), f"expected a version string, got {_type_name(raw_version)}")
        if isinstance(raw_version, float):
            # The written digits are gone (1.10 reads as 1.1), so nothing is guessed.
            raise self.fail(
                ("version",),
                f"was read as the number {raw_version!r}; quote it exactly as intended (YAML reads 1.10 as 1.1)",
                hint='write the version as a string, e.g. version: "1.10"',
            )
        try:
            return canonical_version(str(raw_version))
        except ValueError as exc:
            raise self.fail(("version",), str(exc)) from None

    def entrypoint(self, value: Any) -> str:
        entrypoint = self.string(("entrypoint",), value)
        if not is_entrypoint(entrypoint):
            raise self.fail(("entrypoint",), f"'{entrypoint}' is not 'dotted.module:function'")
        return entrypoint

    def choice(self, path: tuple, value: Any, choices: tuple) -> str:
        if value not in choices:
            guess = closest(str(value), choices)
            hint = f" (did you mean '{guess}'?)" if guess else ""
            raise self.fail(path, f"expected one of {', '.join(choices)}, got {value!r}{hint}")
        return value

    def targets(self, value: Any) -> tuple:
        if not isinstance(value, list):
            raise self.fail(("targets",), f"expected a list of module names, got {_type_name(value)}")
        for i, item in enumerate(value):
            if not is_module(item):
                raise self.fail(("targets", i), f"{item!r} is not a dotted module name")
        return tuple(value)

    def requires(self, value: Any) -> Requires:
        if not isinstance(value, Mapping):
            raise self.fail(("requires",), f"expected a mapping, got {_type_name(value)}")
        self.keys(("requires",), value, REQUIRES_KEYS)
        core = self.specifier(("requires", "core"), value["core"]) if "core" in value else None
        python = self.specifier(("requires", "python"), value["python"]) if "python" in value else None
        packages = value.get("packages", {})
        if not isinstance(packages, Mapping):
            raise self.fail(("requires", "packages"), f"expected a mapping of distribution name to specifier, got {_type_name(packages)}")
        out = {}
        for dist, spec in packages.items():
            if not isinstance(dist, str) or not DIST_RE.match(dist):
                raise self.fail(("requires", "packages", dist), f"{dist!r} is not a distribution name")
            out[dist] = self.specifier(("requires", "packages", dist), "" if spec is None else spec)
        return Requires(core=core, python=python, packages=out)

    def params(self, value: Any) -> dict:
        if not isinstance(value, Mapping):
            raise self.fail(("params",), f"expected a mapping of parameter name to declaration, got {_type_name(value)}")
        out = {}
        for key, decl in value.items():
            path = ("params", key)
            if not isinstance(key, str) or not PARAM_KEY_RE.match(key):
                raise self.fail(path, f"{key!r} is not a dotted parameter name")
            if not isinstance(decl, Mapping):
                raise self.fail(path, f"expected a mapping with 'type' (and optional 'default', 'description'), got {_type_name(decl)}")
            self.keys(path, decl, PARAM_DECL_KEYS, ("type",))
            type_name = self.choice(path + ("type",), decl["type"], tuple(PARAM_TYPES))
            has_default = "default" in decl
            default = decl.get("default")
            if has_default and default is not None and not type_matches(type_name, default):
                raise self.fail(path + ("default",), f"default {default!r} is not of type {type_name}")
            if _has_non_finite(default):
                raise self.fail(
                    path + ("default",),
                    f"default {default!r} holds NaN or an infinity",
                    hint="hyperparameters travel as JSON, which has no NaN or infinity; declare a finite default",
                )
            if type_name == "float" and isinstance(default, int) and not isinstance(default, bool):
                try:
                    default = float(default)
                except OverflowError:
                    raise self.fail(path + ("default",), f"default integer of {len(str(abs(default)))} digits is beyond the float range") from None
            description = decl.get("description", "") or ""
            self.string(path + ("description",), description)
            choices = self.param_choices(path, type_name, decl["choices"]) if "choices" in decl else None
            if choices is not None and default is not None and default not in choices:
                raise self.fail(
                    path + ("default",),
                    f"default {default!r} is not one of the choices ({', '.join(map(repr, choices))})",
                )
            out[key] = ParamDecl(type=type_name, default=default, has_default=has_default, description=description,
                                 choices=choices)
        return out

    def param_choices(self, path: tuple, type_name: str, value: Any) -> tuple:
        """A non-empty list of distinct values of *type_name* (ints become floats for ``float``)."""
        where = path + ("choices",)
        if type_name not in CHOICE_TYPES:
            raise self.fail(where, f"choices need a scalar type ({', '.join(CHOICE_TYPES)}), not {type_name}")
        if not isinstance(value, list) or not value:
            raise self.fail(where, f"expected a non-empty list of {type_name} values, got {_type_name(value)}")
        out: list = []
        for item in value:
            if item is None or not type_matches(type_name, item) or _has_non_finite(item):
                raise self.fail(where, f"choice {item!r} is not a finite {type_name}")
            if type_name == "float":
                item = float(item)
            if item in out:
                raise self.fail(where, f"choice {item!r} is listed twice")
            out.append(item)
        return tuple(out)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__
    )
