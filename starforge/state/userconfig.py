"""The user config: ``config.yaml`` in the StarForge config directory (``FORGE_HOME`` or XDG).

Read as strictly as every other YAML file of StarForge (SPEC §2): an unknown key, a value
of the wrong type or a duplicate key is an error naming the file, the line and the key,
with the closest known key suggested, instead of a default silently taking its place::

    registry: oci://registry.example.com/forge   # default registry (FORGE_REGISTRY wins)
    owner: alice                                 # default publishing owner (FORGE_OWNER wins)
    registries:                                  # per registry host[:port]: TLS (docs/registry.md)
      harbor.internal:8443:
        ca_file: /etc/forge/harbor-ca.pem        # the CA that signed its certificate

>>> load_user_config("/tmp/none/config.yaml").registry is None   # a missing file is empty
True

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ManifestError

# key -> (what it holds, an example line); both shown in errors
KEYS = {
    "registry": ("the default registry: a directory path or oci://host[:port]/prefix", "registry: oci://localhost:5000/forge"),
    "owner": ("the default publishing owner", "owner: alice"),
    "registries": ("per registry host[:port]: ca_file, cert_file, key_file", "registries: {harbor.internal: {ca_file: ca.pem}}"),
}
# the settings of one registry (under registries: host[:port]) -> (what it holds, an example line)
REGISTRY_KEYS = {
    "ca_file": ("a PEM file of the CA certificates that sign the registry's certificate", "ca_file: /etc/forge/harbor-ca.pem"),
    "cert_file": ("a PEM client certificate, for a registry that asks for one", "cert_file: alice.crt"),
    "key_file": ("the PEM private key of cert_file, unless cert_file holds it", "key_file: alice.key"),
}


@dataclass(frozen=True)
class RegistrySettings:
    """``registries: {host: {...}}`` of the user config: how to trust one registry host.

    Paths are absolute: ``~`` expanded, relative ones taken from the config file's directory.
    """

    host: str  # host[:port] as in oci://host[:port]/prefix, lowercase
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None


@dataclass(frozen=True)
class UserConfig:
    registry: str | None = None
    owner: str | None = None
    path: Path | None = None  # where it was read from (whether or not the file exists)
    registries: tuple = ()  # RegistrySettings, one per host

    def registry_settings(self, host: str) -> RegistrySettings | None:
        """The settings for *host* (``host[:port]``, as in an ``oci://`` URL), or None."""
        return next((r for r in self.registries if r.host == host.lower()), None)


def load_user_config(path: str | os.PathLike | None = None) -> UserConfig:
    """The user config at *path* (default: ``config.yaml`` of :func:`starforge.state.home.home`).

    A missing or empty file is an empty config; anything else must be a mapping of the
    known keys (:data:`KEYS`) to non-empty strings. Raises :class:`ManifestError`.
    """
    from ..package_format.manifest import closest
    from ..package_format.yamlio import load_yaml_file

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
    values: dict = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in KEYS:
            guess = closest(str(key), KEYS)
            did_you_mean = f" (did you mean '{guess}'?)" if guess else ""
            raise ManifestError(
                f"{where(key)}: unknown key '{key}'{did_you_mean}",
                hint=f"known keys: {', '.join(KEYS)}; remove or rename it",
            )
        if key == "registries":
            values[key] = _registries(value, doc, path)
            continue
        if not isinstance(value, str) or not value.strip():
            shown = f"{type(value).__name__} {value!r}" if value is not None else "nothing"
            raise ManifestError(
                f"{where(key)}: {key}: expected a non-empty string ({KEYS[key][0]}), got {shown}",
                hint=f"write it as a string, e.g. '{KEYS[key][1]}', or remove the key",
            )
        values[key] = value.strip()
    return UserConfig(path=path, **values)


def _registries(value, doc, path: Path) -> tuple:
    """``registries:`` checked like the top level: a mapping of hosts to mappings of :data:`REGISTRY_KEYS`."""
    from ..package_format.manifest import closest

    def where(*keys) -> str:
        line = doc.line(("registries", *keys))
        return f"{path}:{line}" if line is not None else str(path)

    example = "registries: {harbor.internal:8443: {ca_file: /etc/forge/harbor-ca.pem}}"
    if not isinstance(value, dict):
        raise ManifestError(f"{where()}: registries: expected a mapping of registry hosts to settings, "
                            f"got {type(value).__name__ if value is not None else 'nothing'}",
                            hint=f"write it as {example}")
    out = []
    for host, settings in value.items():
        if not isinstance(host, str) or not host.strip() or "/" in host or "@" in host or " " in host.strip():
            raise ManifestError(f"{where(host)}: registries: '{host}' is not a registry host",
                                hint="write host[:port] as in oci://host[:port]/prefix, e.g. harbor.internal:8443")
        if not isinstance(settings, dict) or not settings:
            raise ManifestError(f"{where(host)}: registries: {host}: expected a mapping of "
                                f"{', '.join(REGISTRY_KEYS)}", hint=f"write it as {example}")
        files = {}
        for key, file in settings.items():
            if not isinstance(key, str) or key not in REGISTRY_KEYS:
                guess = closest(str(key), REGISTRY_KEYS)
                did_you_mean = f" (did you mean '{guess}'?)" if guess else ""
                raise ManifestError(f"{where(host, key)}: registries: {host}: unknown key '{key}'{did_you_mean}",
                                    hint=f"known keys: {', '.join(REGISTRY_KEYS)}; remove or rename it")
            if not isinstance(file, str) or not file.strip():
                raise ManifestError(f"{where(host, key)}: registries: {host}: {key}: expected a file path "
                                    f"({REGISTRY_KEYS[key][0]})", hint=f"write it as '{REGISTRY_KEYS[key][1]}'")
            files[key] = path.parent / Path(file.strip()).expanduser()
        if "key_file" in files and "cert_file" not in files:
            raise ManifestError(f"{where(host, 'key_file')}: registries: {host}: key_file without cert_file",
                                hint="name the client certificate too: cert_file: FILE")
        out.append(RegistrySettings(host=host.strip().lower(), **files))
    return tuple(out)
