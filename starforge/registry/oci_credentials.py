"""Which credentials a registry host gets: the environment, else the Docker ``config.json``.

Laptop side. ``FORGE_REGISTRY_USER`` / ``FORGE_REGISTRY_PASSWORD`` first; then the Docker
``config.json`` (``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``): a
``credHelpers`` entry for the host, an ``auths`` entry (identity token, ``auth``, or user
name and password), or the default ``credsStore`` helper when it is installed. A helper
is ``docker-credential-<name> get`` with the host on stdin.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..cluster.jsonload import loads as load_json
from ..errors import RegistryError, UsageError


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str  # or an identity (refresh) token when identity_token is True
    source: str  # where they came from, for error messages
    identity_token: bool = False
    shown: str | None = None  # how messages name them; None: the user name

    @property
    def label(self) -> str:
        """``of 'alice'``, or what stands for credentials whose user name must not be printed."""
        return self.shown if self.shown is not None else f"of '{self.username}'"


def _docker_config_path(env) -> Path:
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"]) / "config.json"
    return Path.home() / ".docker" / "config.json"


def _auth_key_matches(key: str, host: str) -> bool:
    """Whether a config.json ``auths`` key (``host``, ``https://host/v1/``...) names *host*."""
    k = key.strip()
    if "://" in k:
        k = k.split("://", 1)[1]
    k = k.split("/", 1)[0].lower()
    if k == "index.docker.io" and host in ("docker.io", "registry-1.docker.io"):
        return True
    return k == host or (host.endswith(":443") and k == host[:-4])


def _credential_helper(helper: str, host: str, source: str) -> Credentials | None:
    exe = shutil.which(f"docker-credential-{helper}")
    if exe is None:
        raise RegistryError(f"{source} names credential helper '{helper}' but docker-credential-{helper} is not on PATH",
                            hint="install the helper or remove it from config.json")
    try:
        out = subprocess.run([exe, "get"], input=host, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegistryError(f"credential helper docker-credential-{helper} failed: {exc}") from None
    if out.returncode != 0:
        return None  # helpers exit non-zero for "no credentials for this server"
    try:
        data = load_json(out.stdout)
        user, secret = data["Username"], data["Secret"]
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"credential helper docker-credential-{helper} printed no Username/Secret") from None
    return Credentials(user, secret, f"docker-credential-{helper}", identity_token=(user == "<token>"))


def find_credentials(host: str, env=None) -> Credentials | None:
    """Credentials for *host*: environment first, then the Docker config.json."""
    env = os.environ if env is None else env
    user, password = env.get("FORGE_REGISTRY_USER"), env.get("FORGE_REGISTRY_PASSWORD")
    if user or password:
        if not (user and password):
            raise UsageError("set both FORGE_REGISTRY_USER and FORGE_REGISTRY_PASSWORD, or neither")
        return Credentials(user, password, "FORGE_REGISTRY_USER/FORGE_REGISTRY_PASSWORD")
    path = _docker_config_path(env)
    try:
        config = load_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RegistryError(f"{path}: cannot read Docker config: {exc}", hint="fix or move the file") from None
    if not isinstance(config, dict):
        return None
    source = str(path)
    helpers = config.get("credHelpers") or {}
    for key, helper in helpers.items() if isinstance(helpers, dict) else ():
        if _auth_key_matches(key, host):
            return _credential_helper(helper, host, source)
    for key, entry in (config.get("auths") or {}).items():
        if not _auth_key_matches(key, host) or not isinstance(entry, dict):
            continue
        if entry.get("identitytoken"):
            return Credentials("<token>", entry["identitytoken"], source, identity_token=True)
        if entry.get("auth"):
            # The 'auth' value is the secret itself (base64 of user:password): no message
            # prints it or any part of it, the user name included (without a colon it is
            # all password).
            bad = RegistryError(f"{source}: the 'auth' entry for {key} is not base64 of user:password",
                                hint=f"log in again (docker login {host}), or fix that entry")
            try:
                decoded = base64.b64decode(entry["auth"]).decode("utf-8")
            except (ValueError, TypeError, UnicodeDecodeError):
                raise bad from None
            user, colon, password = decoded.partition(":")
            if not colon or not user:
                raise bad from None
            return Credentials(user, password, source, shown=f"of the 'auth' entry for {key}")
        if entry.get("username") and entry.get("password"):
            return Credentials(entry["username"], entry["password"], source)
    store = config.get("credsStore")
    if isinstance(store, str) and store and shutil.which(f"docker-credential-{store}"):
        # A default store whose helper is not installed (Docker Desktop's "desktop" on a
        # machine without it) means no stored credentials, not an error.
        return _credential_helper(store, host, source)
    return None
