"""The reference plugins (forge_plugins/ and the quickstart recipe's built-in), loaded from
their directories as the launcher would: shared by the plugin tests and the trainer tests."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

from starforge import patching
from starforge.package_format.manifest import PluginManifest
from starforge.package_format.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "examples" / "quickstart"
PLUGIN_DIRS = {
    "opsd-patch": REPO / "forge_plugins" / "opsd-patch",
    "dr-grpo": REPO / "forge_plugins" / "dr-grpo",
    "gspo": REPO / "forge_plugins" / "gspo",
    "reward-clip": RECIPE / "common" / "algorithms" / "reward-clip",
}


def manifest(name: str) -> PluginManifest:
    doc = load_yaml_file(PLUGIN_DIRS[name] / "plugin.yaml")
    return PluginManifest.from_mapping(doc.data, str(PLUGIN_DIRS[name] / "plugin.yaml"), doc.line)


def install(name: str, params: dict | None = None, *, owner: str = "forge"):
    """Import the plugin's entrypoint module from its directory and run ``install`` with its
    param defaults overridden by *params*, acting for ``<owner>/<name>@<version>``."""
    m = manifest(name)
    spec = importlib.util.spec_from_file_location(m.module, PLUGIN_DIRS[name] / f"{m.module}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with patching.acting_for(f"{owner}/{m.name}@{m.version}"):
        getattr(module, m.function)({**m.param_defaults(), **(params or {})})
    return module


@contextlib.contextmanager
def patches_undone():
    """Undo, newest first, every patch made inside the block."""
    before = len(patching.patches())
    yield
    for p in reversed(patching.patches()[before:]):
        p.undo()


@contextlib.contextmanager
def recipe_module(monkeypatch, name: str):
    """The quickstart recipe's module *name*, imported from the recipe's folder; every patch
    made inside the block is undone after it."""
    monkeypatch.syspath_prepend(str(RECIPE))
    module = importlib.import_module(name)
    with patches_undone():
        yield module
