"""The cluster side's import contract (SPEC §9, §14).

Every module of ``starforge/cluster`` imports only the standard library, ``packaging``
(vendored in the runtime zip) and its own modules; ``cryptography`` only inside
``dsse``'s functions and ``ray`` only inside the functions of the Ray modules. Checked twice:
statically over every import of the source (lazy ones too), and by importing every module
from the runtime zip in an interpreter with nothing installed — and by launching a signed
job under ``FORGE_TRUST`` from the zip, which loads no laptop module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from import_graph import imports_of, module_name

import starforge
from starforge.cluster import runtime_zip

CLUSTER = Path(starforge.__file__).parent / "cluster"
# Third-party packages a cluster module may import, only inside a function, and where.
LAZY_THIRD_PARTY = {"cryptography": {"starforge.cluster.dsse"}, "ray": {"starforge.cluster.ray_hook", "starforge.cluster.ray_init",
                                                                  "starforge.cluster.ray_outputs"}}


def violations(root: Path, package: str = "starforge.cluster") -> list[str]:
    """Every import below *root* that breaks the contract, as ``module:line: what``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or "_vendor" in rel.parts or "bootstrap" in rel.parts:
            continue
        out += module_violations(path, module_name(root, path, package), package)
    return out


def module_violations(path: Path, name: str, package: str = "starforge.cluster") -> list[str]:
    """Every import of the module *name* (at *path*) that breaks the contract: only the
    standard library, ``packaging``, *package* and ``starforge.cluster`` (its own)."""
    out = []
    for imported, line, top in imports_of(path, name):
        first = imported.split(".")[0]
        if first in sys.stdlib_module_names or first == "__future__":
            continue
        if imported in ("starforge", "starforge.__version__") or any(
                imported == own or imported.startswith(own + ".") for own in (package, "starforge.cluster")):
            continue
        if first == "packaging":
            continue
        if first in LAZY_THIRD_PARTY and name in LAZY_THIRD_PARTY[first] and not top:
            continue
        where = "at module level" if top else "inside a function"
        out.append(f"{name}:{line}: imports {imported} ({where})")
    return out


def test_every_cluster_import_is_stdlib_packaging_or_its_own():
    assert violations(CLUSTER) == []


# The modules outside cluster/ that follow its contract (docs/architecture.md): the public
# names of SPEC §1, the launch entry, and `forge prep`'s child, run from a zip under any interpreter.
PACKAGE = CLUSTER.parent
OUTSIDE = {"starforge.plugins": "plugins.py", "starforge.patching": "patching.py", "starforge.launch": "launch",
           "starforge.prep": "prep/__init__.py", "starforge.prep.child": "prep/child.py"}


def test_the_modules_outside_cluster_that_keep_its_contract_import_only_what_it_allows():
    found = []
    for name, rel in OUTSIDE.items():
        path = PACKAGE / rel
        found += violations(path, name) if path.is_dir() else module_violations(path, name, name)
    assert found == []


def test_the_check_fails_on_a_module_outside_cluster_importing_the_laptop(tmp_path):
    child = tmp_path / "child.py"
    child.write_text((PACKAGE / "prep/child.py").read_text(encoding="utf-8") + "\ndef late():\n    from starforge.state.home import forge_home\n")
    found = module_violations(child, "starforge.prep.child", "starforge.prep.child")
    assert found and all("imports starforge.state.home" in f and f.endswith("(inside a function)") for f in found), found


def test_the_check_fails_on_yaml_a_laptop_module_or_a_misplaced_cryptography(tmp_path):
    copy = tmp_path / "cluster"
    shutil.copytree(CLUSTER, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "reads_yaml.py").write_text("import yaml\n")
    (copy / "lazy_laptop.py").write_text("def trust():\n    from ..signatures.signing import load_trust\n    return load_trust()\n")
    (copy / "eager_crypto.py").write_text("from cryptography.exceptions import InvalidSignature\n")
    (copy / "typing_only.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from starforge.registry.base import Registry\n"
    )
    found = violations(copy)
    assert "starforge.cluster.reads_yaml:1: imports yaml (at module level)" in found
    assert "starforge.cluster.lazy_laptop:2: imports starforge.signatures.signing (inside a function)" in found
    assert "starforge.cluster.eager_crypto:1: imports cryptography.exceptions (at module level)" in found
    assert "starforge.cluster.typing_only:3: imports starforge.registry.base (at module level)" in found


PROBE_IMPORTS = r"""
import importlib, json, sys
names = json.loads(sys.argv[1])
for name in names:
    importlib.import_module(name)
public = {"starforge", "starforge.plugins", "starforge.patching", "starforge.launch", "starforge.launch.__main__"}
bad = sorted(m for m in sys.modules
             if m != "__main__" and m.split(".")[0] not in sys.stdlib_module_names
             and not (m in public or m.startswith("starforge.cluster")))
print(json.dumps({"bad": bad, "file": sys.modules["starforge"].__file__}))
"""


def test_every_cluster_module_imports_from_the_zip_with_nothing_installed(tmp_path, bare_python):
    zip_path = tmp_path / "starforge-runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    names = sorted({module_name(CLUSTER, p, "starforge.cluster") for p in CLUSTER.rglob("*.py")
                    if "__pycache__" not in p.parts and "bootstrap" not in p.parts})
    names += ["starforge.plugins", "starforge.patching", "starforge.launch", "starforge.launch.__main__",
              "starforge.cluster._vendor.packaging.specifiers"]
    for trust in ({}, {"FORGE_TRUST": str(tmp_path / "trust.json"), "FORGE_REQUIRE_SIGNATURES": "1"}):
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(zip_path), **trust}
        result = subprocess.run([bare_python, "-c", PROBE_IMPORTS, json.dumps(names)],
                                capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["bad"] == [], trust
        assert report["file"].startswith(str(zip_path) + os.sep)


def test_the_runtime_zip_names_what_the_contract_allows():
    names = runtime_zip.zip_sources()
    # the zip's own entry (``python3 ZIP --spec …``) is the cluster's stub running its interpreter module
    assert names.pop("__main__.py") == os.path.join(os.path.dirname(runtime_zip.__file__), "node_entry.py")
    for name in names:
        assert name.startswith("starforge/cluster/") or name[len("starforge/"):] in runtime_zip.PUBLIC_MODULES, name
