"""Values files: ``forge submit -f FILE`` / ``forge plan -f FILE`` (helm's ``--values``).

A YAML mapping laid over forge.yaml's ``config:`` (before any ``--set``), read by the rule
``config:`` is read by (:func:`.config.config_keys`: a key written twice is an error), each
key then typed as ``--set`` keys are (:mod:`.overrides`): a key neither ``config:`` nor a
plugin declares is refused with the closest known keys, unless written ``+key`` (Hydra's
spelling, as in ``--set +key=value``). Errors name the file, the line and the key. A file
over :data:`MAX_BYTES` is refused before it is parsed.

Laptop side.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ManifestError, UsageError
from ..package_format.yamlio import load_yaml_file
from .config import config_keys
from .overrides import Override, yaml_text

# A file of config keys holds kilobytes; the YAML reader takes one to five seconds a MB, so a
# cap keeps a mistaken -f (a data set, a log) from stalling submit and plan.
MAX_BYTES = 1 << 20


def values_overrides(path: str) -> list:
    """The settings of a values file (``forge submit -f FILE``, helm's ``--values``): a YAML
    mapping laid over ``config:`` (nested or dotted keys, flattened as ``config:`` is), each
    a :class:`~.overrides.Override` typed as ``--set`` types it; ``+key`` marks a new key."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"-f/--values {path}: no such file", hint="give a YAML file of config keys, e.g. values.yaml")
    doc = load_yaml_file(file, max_bytes=MAX_BYTES, kind="a values file",
                         hint="a values file holds config keys; put large data in a file the trainer reads, "
                              "and set its path")
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
    for key, item in config_keys(doc, data, plus=True).items():
        origin = f"{path}:{item.line}: {key}" if item.line else f"{path}: {key}"
        raw = item.value if isinstance(item.value, str) else yaml_text(item.value)
        out.append(Override(key=key, value=item.value, new=item.new, text=f"{key}={raw}", raw=str(raw), origin=origin))
    return out
