"""Where per-user state lives: ``FORGE_HOME`` if set, else the XDG directories.

Laptop side, standard library only.

>>> Home.from_env({"FORGE_HOME": "/tmp/f"}).registry_dir
PosixPath('/tmp/f/registry')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class Home:
    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Home":
        env = os.environ if env is None else env
        if env.get("FORGE_HOME"):
            root = Path(env["FORGE_HOME"]).expanduser()
            if root.exists() and not root.is_dir():
                from ..errors import UsageError

                raise UsageError(f"FORGE_HOME={root} is not a directory",
                                 hint="point FORGE_HOME at a directory (it is created when missing), or unset it")
            return cls(config_dir=root, data_dir=root, cache_dir=root / "cache")
        user = Path.home()
        return cls(
            config_dir=Path(env.get("XDG_CONFIG_HOME") or user / ".config") / "starforge",
            data_dir=Path(env.get("XDG_DATA_HOME") or user / ".local" / "share") / "starforge",
            cache_dir=Path(env.get("XDG_CACHE_HOME") or user / ".cache") / "starforge",
        )

    @property
    def config_file(self) -> Path:
        """``config.yaml``: registry, owner and other defaults."""
        return self.config_dir / "config.yaml"

    @property
    def registry_dir(self) -> Path:
        """The embedded default directory registry."""
        return self.data_dir / "registry"

    @property
    def keys_dir(self) -> Path:
        return self.config_dir / "keys"

    @property
    def trust_file(self) -> Path:
        return self.config_dir / "trust.json"

    @property
    def yank_memory(self) -> Path:
        """The yanks this machine has seen enforced (``forge plugin yank``): kept apart from the
        cache, because forgetting one would let a registry take it back silently."""
        return self.data_dir / "yanks"

    @property
    def blob_cache(self) -> Path:
        """Content-addressed cache of pulled archives and unpacked trees."""
        return self.cache_dir / "blobs"


def home() -> Home:
    return Home.from_env()
