"""The user config: ``config.yaml`` in the StarForge config directory (``FORGE_HOME`` or XDG).

Read as strictly as every other YAML file of StarForge (SPEC §2): an unknown key, a value
of the wrong type or a duplicate key is an error naming the file, the line and the key,
with the closest known key suggested, instead of a default silently taking its place::

    registry: oci://registry.example.com/forge   # default registry (FORGE_REGISTRY wins)
    owner: alice                                 # default publishing owner (FORGE_OWNER wins)

>>> load_user_config("/tmp/none/config.yaml").registry is None   # a missing file is empty
True

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ManifestError

# key -> (what it holds, an example line); both shown in errors
KEYS = {
    "registry": ("the default registry: a directory path or oci://host[:port]/prefix", "registry: oci://localhost:5000/forge"),
    "owner": ("the default publishing owner", "owner: alice"),
}


@dataclass(frozen=True)
class UserConfig:
    registry: str | None = None
    owner: str | None = None
    path: Path | None = None  # where it was read from (whether or not the file exists)


def load_user_config(path: str | os.PathLike | None = None) -> UserConfig:
    """The user config at *path* (default: ``config.yaml`` of :func:`starforge.home.home`).

    A missing or empty file is an empty config; anything else must be a mapping of the
    known keys (:data:`KEYS`) to non-empty strings. Raises :class:`ManifestError`.
    """
    from .manifest import closest
    from .yamlio import load_yaml_file

    if path is None:
        from .home import home

        path = home().config_file
    path = Path(path)
    if not path.exists():
        return UserConfig(path=path)
    doc = load_yaml_file(path)
    data = doc.data
    if data is None:
        return UserConfig(path=path)

    def where(key=None) -> str:
        line = doc.line((key,)) if key is not None else None
        return f"{path}:{line}" if line is not None else str(path)

    if not isinstance(data, dict):
        raise ManifestError(
            f"{where()}: expected a mapping of settings, got {type(data).__name__}",
            hint=f"known keys: {', '.join(KEYS)}",
        )
    values = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in KEYS:
            guess = closest(str(key), KEYS)
            did_you_mean = f" (did you mean '{guess}'?)" if guess else ""
            raise ManifestError(
                f"{where(key)}: unknown key '{key}'{did_you_mean}",
                hint=f"known keys: {', '.join(KEYS)}; remove or rename it",
            )
        if not isinstance(value, str) or not value.strip():
            shown = f"{type(value).__name__} {value!r}" if value is not None else "nothing"
            raise ManifestError(
                f"{where(key)}: {key}: expected a non-empty string ({KEYS[key][0]}), got {shown}",
                hint=f"write it as a string, e.g. '{KEYS[key][1]}', or remove the key",
            )
        values[key] = value.strip()
    return UserConfig(path=path, **values)
