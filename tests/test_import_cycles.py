"""No import cycles (every import counts, lazy ones included), read from the source with ast."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from import_graph import cycles, package_graph

import starforge

PACKAGE = Path(starforge.__file__).parent
PUBLIC = ("starforge.plugins", "starforge.patching", "starforge.launch", "starforge.launch.__main__")


@pytest.fixture(scope="module")
def graph() -> dict:
    """The package's import graph, read once for the module's checks (none of them changes it)."""
    return package_graph(PACKAGE, "starforge", skip=("_vendor",))


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from .a import b\n")
    assert cycles(package_graph(pkg, "pkg")) == [["pkg.a", "pkg.b"]]


def test_the_cluster_side_and_its_public_names_have_no_cycles(graph):
    ours = {m: e for m, e in graph.items() if m.startswith("starforge.cluster") or m in PUBLIC}
    assert cycles(ours) == []


def test_the_whole_package_has_no_cycles(graph):
    assert cycles(graph) == []


# Arrows that would run back up the layers (low module -> package above it). The laptop's
# layers, bottom up: cluster/, then package_format/manifest and signatures/signing, then registry/,
# then experiment/ and bundle/, then cli/. Verification returns a verdict; whoever holds the cache remembers it.
UPWARD = (
    ("starforge.signatures.signing", ("starforge.registry", "starforge.experiment", "starforge.bundle", "starforge.cli")),
    ("starforge.package_format.manifest", ("starforge.registry", "starforge.signatures.signing", "starforge.experiment", "starforge.bundle",
                            "starforge.cli")),
    ("starforge.registry", ("starforge.experiment", "starforge.bundle", "starforge.cli")),
)


def upward_arrows(graph: dict) -> list:
    return sorted(
        f"{module} -> {target} (line {lines[0]})"
        for low, above in UPWARD
        for module, edges in graph.items() if module == low or module.startswith(low + ".")
        for target, lines in edges.items() if any(target == a or target.startswith(a + ".") for a in above)
    )


def test_the_upward_arrow_finder_finds_a_lazy_one(tmp_path):
    root = tmp_path / "starforge"
    (root / "registry").mkdir(parents=True)
    (root / "signatures").mkdir()
    for f in ("__init__.py", "registry/__init__.py", "registry/cache.py", "signatures/__init__.py"):
        (root / f).write_text("")
    (root / "signatures/signing.py").write_text("def verify():\n    from ..registry.cache import remember\n")
    assert upward_arrows(package_graph(root, "starforge")) == ["starforge.signatures.signing -> starforge.registry.cache (line 2)"]


def test_no_import_runs_back_up_the_layers(graph):
    assert upward_arrows(graph) == []


# Every top-level module and package of starforge/, by layer, bottom up. A module imports
# only from its own layer or below (every import counts, lazy ones included); a new module
# or package must be placed here, so the layering covers the whole tree.
LAYERS = (
    # the cluster side and its public names; `forge prep`'s child (and its package's empty __init__),
    # run from a zip under any interpreter; the templates `forge plugin init` writes (installed as data)
    ("cluster", "plugins", "patching", "launch", "prep", "prep.child", "schemas", "plugin_templates"),
    # the small shared modules, and the lower modules of the packages by concept
    ("errors", "urls", "terminal_text",
     "state", "state.home", "state.directories", "state.filelock", "state.credentials", "state.process_group",
     "package_format", "package_format.yamlio", "package_format.archive",
     "signatures", "signatures.sigstore_bundle", "signatures.model_signature"),
    ("package_format.manifest", "state.userconfig"),
    ("signatures.signing", "authoring"),
    ("registry",),
    ("jobs",),
    ("backends",),
    ("experiment", "bundle", "prep.run", "catalog"),
    ("cli", "__main__"),
)


def placed(module: str, level: dict) -> str:
    """The entry of *level* that places *module*: its longest dotted prefix below ``starforge.``
    (``starforge.state.home`` → ``state.home``; ``starforge.jobs.store`` → ``jobs``), else its top-level name."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in level:
            return ".".join(parts[:n])
    return parts[0] if parts else ""  # "": the package's __init__ (its version), below everything


def layer_violations(graph: dict, layers=LAYERS) -> list:
    """``module -> target`` for each import of a higher layer, and ``unplaced: name`` for each
    top-level name of the package in no layer. A package is placed whole (``jobs``) or module by
    module (``state.home``): a module takes the layer of its longest placed prefix."""
    level = {name: i for i, names in enumerate(layers) for name in names}

    out = sorted({f"unplaced: {placed(m, level)}" for m in graph if placed(m, level) and placed(m, level) not in level})
    for module, edges in graph.items():
        for target, lines in edges.items():
            a, b = placed(module, level), placed(target, level)
            if a in level and b in level and level[b] > level[a]:
                out.append(f"{module} -> {target} (line {lines[0]})")
    return sorted(out)


def test_the_layer_check_finds_an_upward_import_and_an_unplaced_package(tmp_path):
    root = tmp_path / "starforge"
    (root / "cluster").mkdir(parents=True)
    (root / "newthing").mkdir()
    for f in ("__init__.py", "cluster/__init__.py", "cluster/job.py", "newthing/__init__.py", "cli.py"):
        (root / f).write_text("")
    (root / "cluster" / "job.py").write_text("def f():\n    from ..cli import main\n")
    assert layer_violations(package_graph(root, "starforge")) == [
        "starforge.cluster.job -> starforge.cli (line 2)", "unplaced: newthing"]


def test_every_package_keeps_to_its_layer(graph):
    assert layer_violations(graph) == []


def documented_layers(text: str) -> list:
    """The layers docs/architecture.md names, bottom up: each ``;``-separated group of the
    "**The layers**" paragraph as its top-level names (``cluster/`` → ``cluster``, ``state/home.py`` → ``state.home``)."""
    paragraph = text.split("**The layers**, bottom up:", 1)[1].split(". No import", 1)[0]
    paragraph = " ".join(paragraph.split())
    return [sorted(re.sub(r"(/|\.py)$", "", name).replace("/", ".") for name in re.findall(r"`([^`]+)`", group))
            for group in paragraph.split(";")]


def test_docs_name_the_layers_the_check_keeps():
    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert documented_layers(text) == [sorted(names) for names in LAYERS]
    assert documented_layers("**The layers**, bottom up: `cluster/` (with `launch`); `cli/` and `__main__.py`. No import") \
        == [["cluster", "launch"], ["__main__", "cli"]]


def test_a_module_placed_on_its_own_keeps_to_its_layer_inside_its_package(tmp_path):
    root = tmp_path / "starforge"
    (root / "state").mkdir(parents=True)
    (root / "registry").mkdir()
    for f in ("__init__.py", "state/__init__.py", "registry/__init__.py"):
        (root / f).write_text("")
    (root / "state" / "userconfig.py").write_text("from ..registry import x\n")
    (root / "state" / "home.py").write_text("def f():\n    from .userconfig import load\n")
    assert layer_violations(package_graph(root, "starforge")) == [
        "starforge.state.home -> starforge.state.userconfig (line 2)",
        "starforge.state.userconfig -> starforge.registry (line 1)"]
