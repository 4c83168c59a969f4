"""A registry for the catalogue's tests: honest plugins published through the CLI, signed and
unsigned, and a hostile one whose every string is an attack on the pages (published through
the registry's API, which takes what a hostile publisher or registry would hand it)."""

from __future__ import annotations

from pathlib import Path

import yaml

from starforge.package_format.archive import pack_tree
from starforge.package_format.manifest import PluginManifest
from starforge.registry.base import PublishedVersion
from starforge.registry.directory import DirectoryRegistry
from support.registry_world import User

# One of each context a registry string can land in, and the characters the terminal rule spells out.
BREAK_OUT = "</script><script>window.pwned='script'</script><img src=x onerror=\"window.pwned='img'\">"
ATTR_OUT = "\" autofocus onfocus=\"window.pwned='attr'\" x=\""
CONTROL = "tab\there ESC\x1b[2J BEL\x07 RLO\u202eevil LS\u2028end"
HOSTILE_FILE = "<img src=x onerror=window.pwned=1>\u202etxt.py"


def plugin_yaml(name: str, version: str, *, kind: str = "algorithm", description: str = "", params: dict | None = None,
                targets=("toy_grpo.algorithms",)) -> str:
    module = name.replace("-", "_")
    doc = {"schema": "forge/plugin/v1", "name": name, "version": version, "kind": kind,
           "entrypoint": f"{module}:install", "load": "eager", "targets": list(targets),
           "requires": {"python": ">=3.10"}, "params": params or {}, "description": description}
    if kind != "algorithm":
        doc.pop("targets")
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def write_tree(root: Path, name: str, version: str, **kw) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(plugin_yaml(name, version, **kw), encoding="utf-8")
    (root / f"{name.replace('-', '_')}.py").write_text("def install(params, **ctx):\n    return None\n")
    return root


def publish_raw(registry: Path, owner: str, tree: Path, work: Path) -> PublishedVersion:
    """Publish the plugin tree *tree* as *owner* through the registry's API: no ``plugin check``."""
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    manifest = PluginManifest.from_mapping(yaml.safe_load((tree / "plugin.yaml").read_text(encoding="utf-8")), "test")
    archive = work / f"{owner}-{manifest.name}-{manifest.version}.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    packed = pack_tree(tree, files, archive)
    from starforge.cluster.shadowing import top_level_names

    info = PublishedVersion(owner=owner, name=manifest.name, version=manifest.version, tree_digest=packed.tree_digest,
                            artifact_digest=packed.artifact_digest, manifest=manifest.to_dict(), files=packed.files,
                            top_level=tuple(top_level_names(files)), size=archive.stat().st_size)
    return DirectoryRegistry(registry).publish(archive, info).version


YANK_REASON = "advantage divided by the group size twice"
ANYONES_REASON = "yanked by someone alice never trusted"
NORM = {"type": "str", "default": "token", "choices": ["token", "sequence"],
        "description": "how the loss is normalised: per token or per sequence"}


def build_world(root: Path) -> tuple:
    """``(user, registry path)``: a directory registry with alice's signed dr-grpo (two versions,
    the second adding a param with choices; 0.1.0 yanked with her key, 0.2.0 yanked by an
    unsigned statement, which changes nothing), carol's unsigned adv-scale and bob's
    environment; alice's key is trusted by *user*."""
    user = User(root / "user")
    registry = root / "registry"
    src = root / "src"
    user.forge("key", "generate")
    user.forge("trust", "add", "alice", next(user.home.rglob("default.pub")))
    scale = {"type": "float", "default": 1.0, "description": "multiplier of the advantage"}
    write_tree(src / "dr-grpo-1", "dr-grpo", "0.1.0", description="Dr. GRPO advantages", params={"dr_grpo.scale": scale})
    write_tree(src / "dr-grpo-2", "dr-grpo", "0.2.0", description="Dr. GRPO advantages, normalised",
               params={"dr_grpo.scale": scale, "dr_grpo.norm": NORM})
    (src / "dr-grpo-2" / "norm.py").write_text("NORM = 'token'\n")
    for d in ("dr-grpo-1", "dr-grpo-2"):
        user.forge("plugin", "publish", src / d, "--registry", registry, "--sign")
    write_tree(src / "adv-scale", "adv-scale", "1.0.0", description="Scale advantages by a constant",
               targets=("toy_grpo.advantages",))
    user.forge("plugin", "publish", src / "adv-scale", "--registry", registry, "--owner", "carol")
    write_tree(src / "env-math", "env-math", "0.1.0", kind="environment", description="Grade-school maths tasks")
    user.forge("plugin", "publish", src / "env-math", "--registry", registry, "--owner", "bob")
    user.forge("plugin", "yank", "alice/dr-grpo@0.1.0", "--reason", YANK_REASON, "--sign", "--registry", registry)
    # an unsigned yank of a version whose owner has trusted keys: shown as unverified, changes nothing
    user.forge("plugin", "yank", "alice/dr-grpo@0.2.0", "--reason", ANYONES_REASON, "--registry", registry)
    return user, registry


def publish_hostile(registry: Path, root: Path) -> PublishedVersion:
    """mallory/hostile@0.1.0 and 0.2.0: every string of them an attack on the page that shows it
    (0.2.0 adds a file whose name is one, shown in its change from 0.1.0, and is yanked with a
    reason that is one)."""
    for version in ("0.1.0", "0.2.0"):
        tree = write_tree(root / f"hostile-{version}", "hostile", version, description=BREAK_OUT + "\n" + CONTROL,
                          params={"hostile.p": {"type": "str", "default": ATTR_OUT, "choices": [ATTR_OUT, BREAK_OUT],
                                                "description": CONTROL}})
        if version == "0.2.0":
            (tree / HOSTILE_FILE).write_text("x = 1\n")
        info = publish_raw(registry, "mallory", tree, root / "hostile-archives")
    # an unsigned yank (mallory has no trusted key: it is enforced) whose reason is an attack too,
    # written as a registry writer would, past the checks of 'forge plugin yank'
    from starforge.registry.yank import canonical_payload, make_envelope

    payload = canonical_payload("yank", "mallory", "hostile", "0.2.0", info.tree_digest, BREAK_OUT + " " + CONTROL,
                                "2026-12-05T10:00:00Z", 1)
    DirectoryRegistry(registry).attach_yank_statement("mallory", "hostile", "0.2.0", info.tree_digest,
                                                      make_envelope(payload))
    return info
