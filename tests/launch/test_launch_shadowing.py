"""The launcher refuses plugins whose top-level names shadow the standard library, the
training stack, StarForge's own names or the recipe's own packages (SPEC §3, issue: only
`publish` refused them, and a hand-made registry record or bundle skips publish).

Each job here is what such a registry or bundle would stage: a JobSpec whose digests and
per-file hashes are right, so verification passes, with a plugin that `forge plugin check`
would have refused."""

from __future__ import annotations

import json

import pytest
from launch_jobs import demo_plugin

TRAINER = 'print("TRAINER RAN")\n'
SHADOW = "raise SystemExit('the shadowing module ran')\n"


def _refused(job, result, ref: str, module: str, what: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "TRAINER RAN" not in result.stdout and "shadowing module ran" not in result.stderr
    assert f"{ref} provides the top-level module '{module}'" in result.stderr and what in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    status = job.status()
    assert (status["phase"], status["code"], status["plugin"]) == ("spec", 2, ref)
    return result.stderr


@pytest.mark.parametrize("rel, module, what", [
    ("json.py", "json", "the standard-library module 'json'"),
    ("tomllib/__init__.py", "tomllib", "the standard-library module 'tomllib'"),  # 3.11+ only: the union counts
    ("torch/__init__.py", "torch", "the training-stack package 'torch'"),
    ("sitecustomize.py", "sitecustomize", "a name StarForge reserves"),
])
def test_a_plugin_file_shadowing_a_real_module_is_refused_at_launch(builder, rel, module, what):
    # top_level declares only the plugin's own module: the file list is what counts
    plugin = demo_plugin(files={"demo_patch.py": "def install(params):\n    pass\n", rel: SHADOW, "plugin.yaml": "x: 1\n"})
    job = builder.job(plugins=[plugin], trainer=TRAINER)
    result = job.launch()
    _refused(job, result, "alice/demo-patch@1.0.0", module, what)
    assert "plugin  : alice/demo-patch@1.0.0 failed" in result.stderr


def test_a_declared_shadowing_top_level_name_is_refused_too(builder):
    job = builder.job(plugins=[demo_plugin(top_level=["demo_patch", "numpy"])], trainer=TRAINER)
    _refused(job, job.launch(), "alice/demo-patch@1.0.0", "numpy", "the training-stack package 'numpy'")


@pytest.mark.parametrize("rel", ["app/__init__.py", "app.py"])
def test_a_plugin_claiming_a_package_of_the_recipe_is_refused_naming_both(builder, rel):
    # the recipe's own code is the package `app` (recipe/app/); the plugin brings `app` too
    plugin = demo_plugin(files={"demo_patch.py": "def install(params):\n    pass\n", rel: SHADOW})
    job = builder.job(plugins=[plugin], trainer=TRAINER)
    err = _refused(job, job.launch(), "alice/demo-patch@1.0.0", "app", "which is the recipe's own recipe/app/")
    assert "would replace it for the whole job" in err


def test_a_recipe_namespace_package_counts_and_data_folders_do_not(builder):
    plugin = demo_plugin(files={"demo_patch.py": "def install(params):\n    pass\n", "tools/x.py": SHADOW})
    job = builder.job(plugins=[plugin], trainer=TRAINER, recipe={"tools/run.py": "X = 1\n"})
    _refused(job, job.launch(), "alice/demo-patch@1.0.0", "tools", "recipe/tools/")
    # a recipe folder without Python files is data, not a package: no clash
    plugin = demo_plugin(files={"demo_patch.py": "def install(params):\n    pass\n", "data/x.py": "X = 1\n"})
    job = builder.job(plugins=[plugin], trainer=TRAINER, recipe={"data/train.jsonl": "{}\n"})
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "TRAINER RAN" in result.stdout


def test_a_builtin_shadowing_the_standard_library_is_refused(builder):
    builtin = {"name": "reward-clip", "files": {"reward_clip.py": "def install(params):\n    pass\n", "typing.py": SHADOW}}
    job = builder.job(builtins=[builtin], trainer=TRAINER)
    _refused(job, job.launch(), "recipe:reward-clip@1.0.0", "typing", "the standard-library module 'typing'")


def test_verify_only_refuses_it_as_well(builder):
    plugin = demo_plugin(files={"demo_patch.py": "def install(params):\n    pass\n", "json.py": SHADOW})
    job = builder.job(plugins=[plugin], trainer=TRAINER)
    result = job.launch()  # warm: same result as a plain launch
    import subprocess
    import sys

    verify = subprocess.run([sys.executable, "-m", "starforge.launch", "--spec", str(job.spec_path), "--verify-only"],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 2 and "provides the top-level module 'json'" in verify.stderr, verify.stderr
    assert result.returncode == 2
    assert json.loads((job.dir / "status.json").read_text())["phase"] == "spec"
