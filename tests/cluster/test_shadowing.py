"""``shadowing``: the top-level names a plugin may not put on the job's ``sys.path``."""

from __future__ import annotations

import os
import sys

import pytest

from starforge.cluster.shadowing import (
    STDLIB_NAMES,
    forbidden,
    recipe_top_level,
    shadowing,
    top_level_names,
    top_level_origins,
)


def test_top_level_names_of_a_plugin_tree():
    files = [
        "plugin.yaml", "README.md", "opsd_patch.py", "helpers/__init__.py", "helpers/util.py",
        "nspkg/data.txt", "fastops.cpython-311-x86_64-linux-gnu.so", "winops.pyd", "docs-src/a.md",
        "2bad.py", "not-ident.py", "tests/test_x.py",
    ]
    assert top_level_names(files) == ("fastops", "helpers", "nspkg", "opsd_patch", "tests", "winops")
    origins = top_level_origins(files)
    assert origins["fastops"] == "fastops.cpython-311-x86_64-linux-gnu.so"
    assert origins["helpers"] == "helpers/"
    assert origins["opsd_patch"] == "opsd_patch.py"


def test_the_first_file_providing_a_name_is_named():
    assert top_level_origins(["x.py", "x/__init__.py"]) == {"x": "x.py"}
    assert top_level_origins(["x/__init__.py", "x.py"]) == {"x": "x/"}


@pytest.mark.parametrize("name, why", [
    ("starforge", "a name StarForge reserves (the StarForge runtime itself)"),
    ("sitecustomize", "a name StarForge reserves (the start-up hook that carries plugins into every process of the job)"),
    ("packaging", "a name StarForge reserves (the one dependency of StarForge's cluster-side runtime)"),
    ("json", "the standard-library module 'json' (Python 3.10-3.14)"),
    ("tomllib", "the standard-library module 'tomllib' (Python 3.10-3.14)"),  # only from 3.11
    ("distutils", "the standard-library module 'distutils' (Python 3.10-3.14)"),  # gone in 3.12
    ("test", "the standard-library module 'test' (Python 3.10-3.14)"),
    ("torch", "the training-stack package 'torch'"),
    ("trl", "the training-stack package 'trl'"),
])
def test_forbidden_names_say_what_they_would_hide(name, why):
    assert forbidden(name) == why


@pytest.mark.parametrize("name", ["opsd_patch", "Json", "torch_ext", "my_verl", "tests"])
def test_other_names_are_allowed(name):
    assert forbidden(name) is None


def test_the_running_interpreters_stdlib_is_covered():
    missing = set(getattr(sys, "stdlib_module_names", ())) - STDLIB_NAMES
    assert not missing


def test_recipe_top_level_lists_what_the_recipe_makes_importable(tmp_path):
    recipe = tmp_path / "recipe"
    (recipe / "trainer").mkdir(parents=True)
    (recipe / "trainer" / "__init__.py").write_text("")
    (recipe / "ns").mkdir()
    (recipe / "ns" / "mod.py").write_text("")
    (recipe / "data").mkdir()
    (recipe / "data" / "train.jsonl").write_text("{}\n")
    (recipe / "bad-name").mkdir()
    (recipe / "bad-name" / "x.py").write_text("")
    (recipe / "train_grpo.py").write_text("")
    (recipe / "kernels.abi3.so").write_bytes(b"")
    (recipe / "config.yaml").write_text("")
    os.symlink(recipe / "trainer", recipe / "linked")  # a symlinked directory is not walked into
    assert recipe_top_level(str(recipe)) == {
        "trainer": "recipe/trainer/",
        "ns": "recipe/ns/",
        "train_grpo": "recipe/train_grpo.py",
        "kernels": "recipe/kernels.abi3.so",
    }
    assert recipe_top_level(str(tmp_path / "absent")) == {}


def test_shadowing_names_the_plugin_the_module_and_what_it_hides():
    recipe = {"trainer": "recipe/trainer/"}
    assert shadowing("alice/p@1.0.0", ["opsd_patch", "helpers"], recipe) is None
    assert shadowing("alice/p@1.0.0", ["opsd_patch", "types"], recipe) == (
        "alice/p@1.0.0 provides the top-level module 'types', which would shadow the standard-library module "
        "'types' (Python 3.10-3.14) for the whole job (the plugin root is on sys.path)"
    )
    assert shadowing("alice/p@1.0.0", ["trainer"], recipe) == (
        "alice/p@1.0.0 provides the top-level module 'trainer', which is the recipe's own recipe/trainer/; "
        "the plugin would replace it for the whole job"
    )


def test_shadowing_reports_the_first_name_in_sorted_order():
    message = shadowing("alice/p@1.0.0", ["torch", "json", "zz"], {})
    assert "top-level module 'json'" in message
