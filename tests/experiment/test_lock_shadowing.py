"""Shadowing names are refused at lock, not only at publish (a hand-made registry skips publish),
and a plugin claiming a top-level name of the recipe's own packages is refused, naming both."""

from __future__ import annotations

import json

import pytest


def _hand_made(project, module: str, name: str = "sneaky") -> None:
    """A version put into the directory registry without `forge plugin publish` (and its checks)."""
    from starforge.package_format.archive import pack_tree
    from starforge.registry.base import PublishedVersion
    from starforge.registry.directory import DirectoryRegistry

    root = project.tmp / "hand" / name
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: {name}\nversion: '1.0.0'\nkind: algorithm\nentrypoint: {name}_main:install\n"
    )
    (root / f"{name}_main.py").write_text("def install(params):\n    pass\n")
    (root / f"{module}.py").write_text("raise SystemExit('the real module was replaced')\n")
    files = ["plugin.yaml", f"{name}_main.py", f"{module}.py"]
    archive = project.tmp / "hand" / f"{name}.tar.gz"
    packed = pack_tree(root, files, archive)
    info = PublishedVersion(
        owner="alice", name=name, version="1.0.0", tree_digest=packed.tree_digest, artifact_digest=packed.artifact_digest,
        manifest={"schema": "forge/plugin/v1", "name": name, "version": "1.0.0", "kind": "algorithm",
                  "entrypoint": f"{name}_main:install", "load": "eager"},
        files=packed.files, top_level=tuple(sorted([f"{name}_main", module])), size=archive.stat().st_size,
    )
    DirectoryRegistry(project.home / "registry").publish(archive, info)


@pytest.mark.parametrize("module,why", [
    ("json", "which would shadow the standard-library module 'json' (Python 3.10-3.14)"),
    ("torch", "which would shadow the training-stack package 'torch'"),
    ("sitecustomize", "which would shadow a name StarForge reserves (the start-up hook"),
])
def test_a_hand_made_version_shadowing_a_module_is_refused_at_lock_and_submit(project, module, why):
    _hand_made(project, module)
    project.experiment(plugins=["alice/sneaky@1.0.0"])
    lock = project.forge("lock", ok=False)
    assert lock.returncode == 15, lock.stderr
    assert f"error: alice/sneaky@1.0.0 provides the top-level module '{module}', {why}" in lock.stderr
    assert "hint: forge plugin publish refuses a plugin shadowing" in lock.stderr and "Traceback" not in lock.stderr
    assert not project.lock.exists()

    # a lock made elsewhere (or by hand) that names it: submit refuses it before staging
    project.experiment(plugins=[])
    project.forge("lock")
    (project.tmp / "hand" / "sneaky").rename(project.tmp / "hand" / "sneaky-src")
    from starforge.experiment.lock import entry_from_tree
    from starforge.experiment.lockfile import LockFile
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.store import PluginStore

    reg = DirectoryRegistry(project.home / "registry")
    info = reg.get("alice", "sneaky", "1.0.0")
    entry = entry_from_tree(info, PluginStore(reg).tree_of(info), "alice/sneaky@==1.0.0", None)
    project.experiment(plugins=["alice/sneaky@1.0.0"])
    project.lock.write_text(LockFile(plugins=(entry,)).to_json())
    submit = project.forge("submit", ok=False)
    assert submit.returncode == 15 and f"provides the top-level module '{module}'" in submit.stderr
    assert "the real module was replaced" not in submit.stdout + submit.stderr


def test_a_plugin_claiming_the_recipes_own_package_is_refused_naming_both(project):
    project.publish(project.plugin("grpo-tweak", "1.0.0", module="toy_grpo"))
    exp = project.experiment(plugins=["alice/grpo-tweak@1.0.0"], entrypoint="python -m toy_grpo.train")
    (exp / "toy_grpo").mkdir()
    (exp / "toy_grpo" / "train.py").write_text("print('the recipe trainer')\n")
    lock = project.forge("lock", ok=False)
    assert lock.returncode == 15, lock.stderr
    assert ("error: alice/grpo-tweak@1.0.0 provides the top-level module 'toy_grpo', which is the recipe's own "
            "recipe/toy_grpo/; the plugin would replace it for the whole job") in lock.stderr
    assert not project.lock.exists()

    # a module file of the recipe counts too; a data directory without Python files does not
    (exp / "toy_grpo" / "train.py").unlink()
    (exp / "toy_grpo" / "data.txt").write_text("not python\n")
    project.forge("lock")
    (exp / "toy_grpo.py").write_text("print('recipe module')\n")
    check = project.forge("lock", "--check", ok=False)
    assert check.returncode == 15 and "which is the recipe's own recipe/toy_grpo.py" in check.stderr
    assert json.loads(project.lock.read_text())["plugins"][0]["top_level"] == ["toy_grpo"]
