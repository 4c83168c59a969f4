"""Open a registry by URL: the one place that knows every registry kind.

``open_registry(url)`` picks the registry kind by URL: a directory path (the embedded default) or
``oci://host[:port]/prefix``. It sits above :mod:`.base`, :mod:`.directory` and :mod:`.oci`,
so those never import each other through it.

Laptop side.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError
from .base import Registry


def default_registry_url() -> str:
    """``FORGE_REGISTRY``, then ``registry:`` in the user config, then the embedded directory."""
    from ..state.home import home
    from ..state.userconfig import load_user_config

    env = os.environ.get("FORGE_REGISTRY")
    if env:
        return env
    h = home()
    configured = load_user_config(h.config_file).registry
    return configured if configured is not None else str(h.registry_dir)


def open_registry(url: str | None = None, *, insecure: bool = False, ca_file: str | None = None) -> Registry:
    """The registry at *url* (default: :func:`default_registry_url`); *ca_file*: ``--ca-file``."""
    from ..urls import check_userinfo

    url = url or default_registry_url()
    check_userinfo(url, "registry URL")
    if url.startswith("oci://"):
        from .oci import OciRegistry

        return OciRegistry(url, insecure=insecure, ca_file=ca_file)
    if "://" in url and not url.startswith("file://"):
        raise UsageError(f"unsupported registry URL '{url}'", hint="use a directory path or oci://host[:port]/prefix")
    from .directory import DirectoryRegistry

    return DirectoryRegistry(Path(url.removeprefix("file://")))
