"""No import cycles (every import counts, lazy ones included), read from the source with ast."""

from __future__ import annotations

from pathlib import Path

from import_graph import cycles, package_graph

import starforge

PACKAGE = Path(starforge.__file__).parent
PUBLIC = ("starforge.plugins", "starforge.patching", "starforge.launch", "starforge.launch.__main__")


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from .a import b\n")
    assert cycles(package_graph(pkg, "pkg")) == [["pkg.a", "pkg.b"]]


def test_the_cluster_side_and_its_public_names_have_no_cycles():
    graph = package_graph(PACKAGE, "starforge", skip=("_vendor",))
    ours = {m: e for m, e in graph.items() if m.startswith("starforge.cluster") or m in PUBLIC}
    assert cycles(ours) == []


def test_the_whole_package_has_no_cycles():
    assert cycles(package_graph(PACKAGE, "starforge", skip=("_vendor",))) == []
