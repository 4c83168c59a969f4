"""Job directories built by hand for the launcher tests.

A job is ``jobspec.json`` + ``forge_plugins/<name>/`` + ``recipe/`` (with built-ins under
``recipe/common/algorithms/<name>/``); digests and per-file hashes come from
:mod:`starforge.cluster.digest`, the spec is written with :mod:`starforge.cluster.jobspec`. The launcher
always runs as a real subprocess of the interpreter running the tests.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from starforge.cluster.digest import digest_of_map, file_map
from starforge.cluster.jobspec import SCHEMA, JobSpec, write_spec

REPO = Path(__file__).resolve().parents[2]

# A recipe module the plugins patch, and a trainer that reports what it sees.
APP_ALGO = "def compute(x):\n    return x + 1\n"

# Patch app.algo:compute so that compute(x) == (x + 1) * demo.scale
DEMO_PATCH = """
from starforge import patching

def install(params):
    scale = params["demo.scale"]
    patching.wrap("app.algo:compute", lambda original, x: original(x) * scale)
"""

DEMO_DEFERRED = """
from starforge import patching

def install(params, **ctx):
    offset = ctx["offset"]
    patching.wrap("app.algo:compute", lambda original, x: original(x) + offset)
"""


def write_files(root: Path, files: dict) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if isinstance(text, str) else text.decode())


def make_writable(root: Path) -> None:
    """The launcher leaves plugin trees read-only; tests that tamper with them undo that."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o644)


@dataclass
class Job:
    dir: Path
    spec: dict = field(default_factory=dict)

    @property
    def spec_path(self) -> Path:
        return self.dir / "jobspec.json"

    def plugin_dir(self, name: str) -> Path:
        return self.dir / "forge_plugins" / name

    def status(self) -> dict:
        return json.loads((self.dir / "status.json").read_text())

    def records(self) -> list:
        folder = self.dir / "provenance"
        # Skip temp files: a worker killed mid-write (a terminated pool worker) leaves one.
        paths = sorted(p for p in folder.glob("*.json") if not p.name.startswith(".")) if folder.exists() else []
        return [json.loads(p.read_text()) for p in paths]

    def launch(self, *cmd: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "starforge.launch", "--spec", str(self.spec_path)]
        if cmd:
            argv += ["--", *cmd]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
        full_env["FORGE_HOME"] = str(self.dir.parent / "forge-home")
        full_env.update(env or {})
        return subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=str(self.dir.parent))

    def plugin_lines(self, result: subprocess.CompletedProcess) -> list:
        return [line for line in result.stderr.splitlines() if line.startswith("plugin  : ")]

    def tamper(self, rel_path: str, text: str | None) -> None:
        """Change (text), or remove (None), a file of a staged plugin tree."""
        path = self.dir / rel_path
        make_writable(self.dir / "forge_plugins")
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def plugin_entry(root: Path, name: str, *, owner: str | None = "alice", version: str = "1.0.0", kind: str = "algorithm",
                 load: str = "eager", entrypoint: str | None = None, targets=(), requires=None, top_level=None) -> dict:
    files = file_map(root)
    module = entrypoint.split(":")[0] if entrypoint else name.replace("-", "_")
    entry = {
        "name": name,
        "version": version,
        "digest": digest_of_map(files),
        "kind": kind,
        "load": load,
        "entrypoint": entrypoint or f"{module}:install",
        "targets": list(targets),
        "requires": dict(requires or {}),
        "top_level": list(top_level if top_level is not None else [module.split(".")[0]]),
        "files": files,
        "params": {},
    }
    if owner:
        entry["owner"] = owner
    return entry


class JobBuilder:
    """Build ``job = builder.job(plugins=[...], builtins=[...], trainer=...)``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.count = 0

    def job(self, *, plugins=(), builtins=(), trainer: str = "", recipe: dict | None = None,
            entrypoint=("python", "-m", "app.train"), hyperparams=None, strict_deferred: bool = False,
            raw_spec_edit=None) -> Job:
        """*plugins*/*builtins*: dicts with ``name``, ``files`` and :func:`plugin_entry` keywords."""
        self.count += 1
        job_dir = self.base / f"job{self.count}"
        (job_dir / "forge_plugins").mkdir(parents=True)
        recipe_files = {"app/__init__.py": "", "app/algo.py": APP_ALGO, "app/train.py": trainer or DEFAULT_TRAINER}
        recipe_files.update(recipe or {})
        write_files(job_dir / "recipe", recipe_files)
        entries = []
        for p in plugins:
            p = dict(p)
            root = job_dir / "forge_plugins" / p["name"]
            write_files(root, p.pop("files"))
            entries.append(plugin_entry(root, **p))
        builtin_entries = []
        for p in builtins:
            p = dict(p)
            root = job_dir / "recipe" / "common" / "algorithms" / p["name"]
            write_files(root, p.pop("files"))
            p.setdefault("owner", None)
            builtin_entries.append(plugin_entry(root, **p))
        data = {
            "schema": SCHEMA,
            "id": f"test-job-{self.count}",
            "name": "test-job",
            "created": "2026-11-29T12:00:00Z",
            "entrypoint": list(entrypoint),
            "hyperparams": {"demo.scale": 10} if hyperparams is None else hyperparams,
            "plugins": entries,
            "recipe": {"plugins": builtin_entries},
            "core_version": "0.1.0",
            "strict_deferred": strict_deferred,
            "backend": "local",
            "extra": {},
        }
        if raw_spec_edit:
            raw_spec_edit(data)
            (job_dir / "jobspec.json").write_text(json.dumps(data))
        else:
            write_spec(JobSpec.from_dict(data), job_dir / "jobspec.json")
        return Job(job_dir, data)


DEFAULT_TRAINER = """
import sys
from app import algo
from starforge.plugins import hyperparams
print("compute(1) =", algo.compute(1))
print("scale =", hyperparams().get("demo.scale"))
"""


def demo_plugin(name: str = "demo-patch", **kw) -> dict:
    module = name.replace("-", "_")
    files = {f"{module}.py": DEMO_PATCH, "plugin.yaml": f"schema: forge/plugin/v1\nname: {name}\n"}
    return {"name": name, "files": files, **kw}


def deferred_plugin(name: str = "late-offset", **kw) -> dict:
    module = name.replace("-", "_")
    files = {f"{module}.py": DEMO_DEFERRED, "plugin.yaml": f"schema: forge/plugin/v1\nname: {name}\n"}
    return {"name": name, "files": files, "load": "deferred", **kw}


def bytecode_in(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc")


def is_read_only(root: Path) -> bool:
    for p in [root, *root.rglob("*")]:
        if os.lstat(p).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True
