"""Hyperparameters of a job: declared defaults, then ``config:``, then ``--set`` overrides.

``--set key=value`` values are YAML 1.2 core scalars (``0.5``, ``8``, ``true``, ``null``,
strings, ``[1,2]`` flow lists) read by :func:`starforge.package_format.yamlio.parse_scalar`, then typed:

- a key some plugin declares in ``params`` must fit the declared type;
- otherwise a key of ``config:`` must fit the type of the value written there;
- an int is accepted where a float is expected and stored as a float; for a string key a
  number or boolean is taken as the text written; ``null`` only where the default or the
  existing value is ``null``;
- a declared key with ``choices`` takes only one of them (``--set`` and ``config:`` alike);
- any other key is an error naming the closest known keys, unless written ``+key=value``
  (a new key, taken as parsed); values files (:mod:`.values`) follow the same rule, a new
  key written ``+key:`` there.

The known keys are the flattened ``config`` keys plus the ``params`` every locked and
built-in plugin declares.

>>> build_hyperparams({"opsd.scale": {"type": "float", "default": 1.0}}, {"grpo.lr": 1e-6}, ["opsd.scale=1"])
{'opsd.scale': 1.0, 'grpo.lr': 1e-06}

Laptop side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import ManifestError, UsageError
from ..package_format.manifest import PARAM_KEY_RE, type_matches

_TYPE_WORDS = {
    "float": "a float",
    "int": "an integer",
    "bool": "a boolean",
    "str": "a string",
    "list": "a list",
    "dict": "a mapping",
}


@dataclass(frozen=True)
class Override:
    """One parsed ``--set``."""

    key: str
    value: Any
    new: bool  # written +key=value
    text: str  # as given
    raw: str = ""  # the value as written
    origin: str = ""  # where errors say it came from (default: "--set TEXT")

    @property
    def shown(self) -> str:
        """How messages name this override: ``--set KEY=VALUE``, or ``values.yaml:3: KEY``."""
        return self.origin or f"--set {_shown(self.text)}"

    @classmethod
    def parse(cls, text: str) -> "Override":
        from ..package_format.yamlio import FloatRangeError, parse_scalar

        key, eq, raw = text.partition("=")
        new = key.startswith("+")
        key = key[1:] if new else key
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"--set '{_shown(text)}': expected KEY=VALUE", hint="example: --set opsd.scale=0.5")
        if not PARAM_KEY_RE.match(key):
            raise UsageError(f"--set '{_shown(text)}': '{key}' is not a dotted key (letters, digits, '_', '-')")
        try:
            value = parse_scalar(raw)
        except FloatRangeError as exc:
            raise UsageError(f"--set {_shown(text)}: {exc.written} is beyond the float range (it would read as infinity)",
                             hint=exc.hint) from None
        except ManifestError as exc:
            quoted = raw.lstrip()[:1] in ("'", '"')  # perhaps cut at a comma: quotes do not hide one
            raise UsageError(f"--set '{_shown(text)}': value is not a YAML scalar or flow list: {exc.message}",
                             hint=r"a comma followed by KEY= starts the next --set even inside quotes, as in helm; "
                                  r"write \, for a comma in a value" if quoted else None) from None
        bad = first_non_finite(value)
        if bad is not None:
            raise UsageError(f"--set {_shown(text)}: {yaml_float(bad)} is not a finite number", hint=NON_FINITE_HINT)
        if not _string_keys(value):
            raise UsageError(f"--set {_shown(text)}: a mapping key that is not a string has no JSON form",
                             hint="hyperparameters travel as JSON (the JobSpec): quote the key, or use a dotted --set key")
        return cls(key=key, value=value, new=new, text=text, raw=raw.strip())


def _string_keys(value: Any) -> bool:
    """Whether every mapping in *value* (lists and mappings searched) has string keys only."""
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value) and all(_string_keys(v) for v in value.values())
    if isinstance(value, list):
        return all(_string_keys(v) for v in value)
    return True


NON_FINITE_HINT = (
    "hyperparameters travel as JSON (the JobSpec), which has no NaN or infinity; "
    "write a finite number, or a string the trainer converts"
)


def first_non_finite(value: Any) -> float | None:
    """The first NaN or infinite float in *value* (lists and mappings searched), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            bad = first_non_finite(item)
            if bad is not None:
                return bad
    return None


def yaml_float(value: float) -> str:
    """A non-finite float as YAML 1.2 spells it (``.nan``, ``.inf``, ``-.inf``)."""
    if math.isnan(value):
        return ".nan"
    return ".inf" if value > 0 else "-.inf"


def type_of(value: Any) -> str | None:
    """The param type name a config value has (None for null)."""
    if value is None:
        return None
    for name, kinds in (("bool", bool), ("int", int), ("float", float), ("str", str), ("list", list), ("dict", dict)):
        if isinstance(value, kinds):
            return name
    return None


def declared_params(plugins: Iterable) -> dict:
    """Merge ``params`` declarations (``key -> {type, default?}``) of *plugins*, in load order.

    Each item is ``(label, params)``. Two plugins declaring one key with different types
    are an error; the first default wins.
    """
    out: dict = {}
    owner: dict = {}
    for label, params in plugins:
        for key, decl in params.items():
            if key in out and out[key].get("type") != decl.get("type"):
                raise ManifestError(
                    f"param '{key}' is declared as {out[key].get('type')} by {owner[key]} and as {decl.get('type')} by {label}",
                    hint="the plugins cannot share this hyperparameter; rename it in one of them",
                )
            if key not in out:
                out[key] = dict(decl)
                owner[key] = label
    return out


def build_hyperparams(
    declared: Mapping[str, Mapping],
    config: Mapping[str, Any],
    sets: Iterable[str] = (),
    config_lines: Mapping[str, Any] | None = None,
) -> dict:
    """Flat hyperparams: declared defaults, then *config* (flat dotted keys), then *sets*.

    *config_lines* maps a dotted config key to ``"forge.yaml:12"`` for error messages.
    """
    config_lines = config_lines or {}
    out: dict = {k: d["default"] for k, d in declared.items() if "default" in d}
    for key, value in config.items():
        decl = declared.get(key)
        if decl is not None:
            ok, value = _fit(decl["type"], value, decl.get("default"))
            if not ok:
                where = config_lines.get(key, "forge.yaml")
                group, _, leaf = key.rpartition(".")
                example = f"'{leaf}: {_example(decl['type'])}'" + (f" under {group}" if group else "")
                raise ManifestError(
                    f"{where}: config key '{key}' is {_describe(value)}, but the plugin declares it as {decl['type']}",
                    hint=f"write {_TYPE_WORDS[decl['type']]} there (e.g. {example}), or remove it to use the plugin's default",
                )
            if not _allowed(decl, value):
                where = config_lines.get(key, "forge.yaml")
                raise ManifestError(
                    f"{where}: config key '{key}' is {value!r}, not one of the plugin's choices: {_choices(decl)}",
                    hint="write one of the choices there, or remove it to use the plugin's default",
                )
        out[key] = value
    known = set(declared) | set(out)
    for text in sets:
        ov = text if isinstance(text, Override) else Override.parse(text)
        out[ov.key] = _typed(ov, declared, config)
        if ov.key not in known:
            _value_or_group(ov, known)
            known.add(ov.key)
    return out


def _value_or_group(ov: Override, known: set) -> None:
    """A new key is a value or a group of keys, never both, as in ``config:``
    (:func:`.config.config_keys`): ``+grpo=1`` beside ``grpo.lr`` would make two meanings of ``grpo``."""
    parts = ov.key.split(".")
    for n in range(1, len(parts)):
        prefix = ".".join(parts[:n])
        if prefix in known:
            raise UsageError(f"{ov.shown}: '{ov.key}' is inside '{prefix}', which is already a value",
                             hint=f"a key is a value or a group of keys, not both: choose a name outside '{prefix}'")
    inner = sorted(k for k in known if k.startswith(ov.key + "."))
    if inner:
        raise UsageError(f"{ov.shown}: '{ov.key}' is both a value and a group ('{inner[0]}')",
                         hint=f"a key is a value or a group of keys, not both: set the keys inside it (--set {inner[0]}=...)")


def _typed(ov: Override, declared: Mapping[str, Mapping], config: Mapping[str, Any]) -> Any:
    want = declared[ov.key]["type"] if ov.key in declared else type_of(config.get(ov.key))
    decl = declared.get(ov.key)
    if want == "str" and isinstance(ov.value, (bool, int, float)):
        # a string key given 2024 or true means the text, as a shell user wrote it
        ok, value = True, ov.raw
    elif decl is not None:
        ok, value = _fit(decl["type"], ov.value, decl.get("default"))
    if decl is not None:
        if not ok:
            raise UsageError(
                f"{ov.shown}: '{ov.key}' is declared as {decl['type']}, got {_describe(ov.value)}",
                hint=f"example: --set {ov.key}={_example(decl['type'])}",
            )
        if not _allowed(decl, value):
            raise UsageError(
                f"{ov.shown}: '{ov.key}' must be one of {_choices(decl)}, got {value!r}",
                hint=f"example: --set {ov.key}={yaml_text(decl['choices'][0])}",
            )
        return value
    if want == "str" and isinstance(ov.value, (bool, int, float)):
        return ov.raw
    if ov.key in config:
        current = config[ov.key]
        want = type_of(current)
        if want is None:
            return ov.value
        ok, value = _fit(want, ov.value, current)
        if not ok:
            raise UsageError(
                f"{ov.shown}: '{ov.key}' is {_TYPE_WORDS[want]} in config ({current!r}), got {_describe(ov.value)}",
                hint=f"example: --set {ov.key}={_example(want)}",
            )
        return value
    if ov.new:
        return ov.value
    known = sorted(set(declared) | set(config))
    import difflib  # only for an unknown key's hint

    close = difflib.get_close_matches(ov.key, known, n=3, cutoff=0.6)
    if close:
        message = f"{ov.shown}: unknown key '{ov.key}' (closest: {', '.join(close)})"
    else:
        message = f"{ov.shown}: unknown key '{ov.key}'"
    spelling = f"'+{ov.key}:' in the values file" if ov.origin else f"--set +{ov.key}=..."
    raise UsageError(message, hint=f"to add a key that neither config nor any plugin declares, write {spelling}")


def _shown(text: str) -> str:
    """A ``--set`` argument as messages quote it: long ones cut, so the error stays one readable line."""
    return text if len(text) <= 100 else f"{text[:60]}... ({len(text)} characters)"


def _allowed(decl: Mapping, value: Any) -> bool:
    """Whether *value* is one of the declared ``choices`` (always, when none are declared)."""
    choices = decl.get("choices")
    if choices is None or value is None:
        return True
    return any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in choices)


def _choices(decl: Mapping) -> str:
    return ", ".join(yaml_text(c) for c in decl["choices"])


def yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fit(type_name: str, value: Any, default: Any) -> tuple:
    """(fits, value converted): int -> float for a float; null only where the default is null."""
    if value is None:
        return default is None, value
    if not type_matches(type_name, value):
        return False, value
    if type_name == "float" and isinstance(value, int):
        try:
            return True, float(value)
        except OverflowError:  # an integer beyond the float range is not a float value
            return False, value
    return True, value


def _describe(value: Any) -> str:
    kind = type_of(value)
    if kind is None:
        return "null"
    if kind == "float" and (math.isinf(value) or math.isnan(value)):
        return f"a float {value!r}"
    if kind == "int" and value.bit_length() > 64:
        return f"{_TYPE_WORDS[kind]} of {len(str(abs(value)))} digits"
    text = repr(value)
    return f"{_TYPE_WORDS[kind]} {text if len(text) <= 80 else text[:60] + '...'}"


def _example(type_name: str) -> str:
    return {"float": "0.5", "int": "8", "bool": "true", "str": "text", "list": "[1,2]", "dict": "{a: 1}"}[type_name]
