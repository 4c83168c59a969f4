"""The registry package points one way: the registry kinds never reach the factory that opens them."""

from __future__ import annotations

import ast
from pathlib import Path

import starforge.registry

PACKAGE = Path(starforge.registry.__file__).parent


def imported(module: str) -> set:
    """Every starforge.registry module *module* imports, at the top or inside a function."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out.add(node.module or "")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("starforge.registry."):
            out.add(node.module.rsplit(".", 1)[1])
    return out


def test_base_imports_no_registry_kind_and_no_registry_module_imports_the_factory():
    assert imported("base").isdisjoint({"directory", "oci", "factory", "oci_client", "oci_auth", "oci_credentials",
                                        "oci_location"})
    for module in ("directory", "oci", "oci_client", "oci_auth", "oci_credentials", "oci_location", "artifact", "cache",
                   "progress", "resolve", "publish"):
        assert "factory" not in imported(module), module
    assert {"directory", "oci"} <= imported("factory")
