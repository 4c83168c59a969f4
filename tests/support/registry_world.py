"""One user of the registry tests: a FORGE_HOME (cache, keys, trust) running ``forge`` in-process,
and the plugin and experiment that user publishes and locks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.cli import forge as run_forge

OWNER = "alice"


class User:
    """One user: a FORGE_HOME (cache, keys, trust) and the forge CLI (in-process)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        root.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(self.home), FORGE_OWNER=OWNER, DOCKER_CONFIG=str(root / "docker"))

    def forge(self, *args, ok=True, cwd=None, env=None) -> subprocess.CompletedProcess:
        """``forge ARGS`` as this user (*env*: variables set for this call only)."""
        proc = run_forge(*args, env={**self.env, **(env or {})}, cwd=cwd or self.root, timeout=300)
        if ok:
            assert proc.returncode == 0, f"forge {' '.join(map(str, args))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        else:
            assert "Traceback" not in proc.stderr, proc.stderr
        return proc


def write_plugin(root: Path, name: str = "opsd-patch", version: str = "1.0.0") -> Path:
    module = name.replace("-", "_")
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: {name}\nversion: '{version}'\nkind: algorithm\n"
        f"entrypoint: {module}:install\nload: eager\ntargets: [trainer]\n"
        "requires: {python: '>=3.10'}\n"
        "params:\n  opsd.scale: {type: float, default: 1.0}\n"
    )
    (root / f"{module}.py").write_text(
        "def install(params):\n    print('opsd.scale is %s' % params['opsd.scale'], flush=True)\n"
    )
    return root


def write_experiment(root: Path, registry: str, plugins=("alice/opsd-patch@1.0.0",)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "trainer.py").write_text(
        "from starforge import plugins\nprint('trainer sees opsd.scale=%s' % plugins.hyperparams().get('opsd.scale'))\n"
    )
    (root / "forge.yaml").write_text(
        "schema: forge/job/v1\nname: meta\nentrypoint: python trainer.py\n"
        f"plugins: [{', '.join(plugins)}]\nconfig: {{}}\nregistry: {registry}\n"
    )
    return root
