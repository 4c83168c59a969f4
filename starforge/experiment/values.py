"""Values files: ``forge submit -f FILE`` / ``forge plan -f FILE`` (helm's ``--values``).

A YAML mapping laid over forge.yaml's ``config:`` (before any ``--set``); each key is typed
as ``config:`` and ``--set`` keys are (:mod:`.overrides`), and errors name the file, the line
and the key.

Laptop side.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ManifestError, UsageError
from ..manifest import PARAM_KEY_RE
from ..yamlio import load_yaml_file
from .config import flatten
from .overrides import NON_FINITE_HINT, Override, first_non_finite, yaml_float, yaml_text


def values_overrides(path: str) -> list:
    """The settings of a values file (``forge submit -f FILE``, helm's ``--values``): a YAML
    mapping laid over ``config:`` (nested or dotted keys, flattened as ``config:`` is), each
    key typed as ``config:`` and ``--set`` type it. A key neither ``config:`` nor a plugin
    declares is taken as a new key, as it would be in ``config:``."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"-f/--values {path}: no such file", hint="give a YAML file of config keys, e.g. values.yaml")
    doc = load_yaml_file(file)
    data = doc.data
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a mapping of config keys, got {type(data).__name__}",
                            hint="write it as config: is written in forge.yaml, e.g. 'grpo:\n  lr: 0.5'")
    if set(data) & {"schema", "plugins", "entrypoint"} and isinstance(data.get("config"), dict):
        raise ManifestError(f"{path}: this looks like a forge.yaml, not a values file",
                            hint="a values file holds what goes under config: (its keys at the top level)")
    out = []
    for key, value in flatten(data).items():
        line = doc.line(tuple(key.split(".")))
        origin = f"{path}:{line}: {key}" if line else f"{path}: {key}"
        if not isinstance(key, str) or not PARAM_KEY_RE.match(key):
            raise ManifestError(f"{origin}: '{key}' is not a dotted key (letters, digits, '_', '-')")
        bad = first_non_finite(value)
        if bad is not None:
            raise ManifestError(f"{origin}: {yaml_float(bad)} is not a finite number", hint=NON_FINITE_HINT)
        raw = value if isinstance(value, str) else yaml_text(value)
        out.append(Override(key=key, value=value, new=True, text=f"{key}={raw}", raw=str(raw), origin=origin))
    return out

