"""A later plugin's replace hiding an earlier plugin's patch of the same target: one warning line."""

from __future__ import annotations

import sys

from launch_jobs import demo_plugin

from starforge.cluster.provenance import summarize

# Replaces app.algo:compute outright: whatever wrapped it before (demo-patch) never runs.
SWAP = """
from starforge import patching

def install(params):
    patching.replace("app.algo:compute", lambda x: x - 1, when_imported=True)
"""

HIDING = (
    "warning : alice/swap@2.0.0 replaces app.algo:compute, hiding alice/demo-patch@1.0.0's wrap of it "
    "(it never runs, so its settings have no effect there)"
)


def swap_plugin(name: str = "swap", **kw) -> dict:
    files = {f"{name}.py": SWAP, "plugin.yaml": f"schema: forge/plugin/v1\nname: {name}\n"}
    return {"name": name, "files": files, "version": "2.0.0", **kw}


def warnings(result) -> list:
    return [line for line in result.stderr.splitlines() if line.startswith("warning : ")]


def test_a_later_replace_of_an_earlier_plugins_wrap_is_a_warning_naming_both(builder):
    job = builder.job(plugins=[demo_plugin(), swap_plugin()])
    result = job.launch()
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(("plugin  : ", "warning : "))]
    # right after the plugin line of the plugin that replaces
    assert lines == ["plugin  : alice/demo-patch@1.0.0 loaded", "plugin  : alice/swap@2.0.0 loaded", HIDING]
    # demo.scale (10) indeed changes nothing: compute(1) is the replacement's 0, not 20
    assert "compute(1) = 0" in result.stdout
    # the trainer runs in the launcher's process here: the warning is printed once
    assert result.stderr.count("warning : ") == 1
    (launcher,) = [r for r in job.records() if r["role"] == "launcher"]
    (swap,) = [p for p in launcher["patches"] if p["plugin"] == "alice/swap@2.0.0"]
    assert swap["mode"] == "replace"
    assert [(h["plugin"], h["mode"]) for h in swap["hides"]] == [("alice/demo-patch@1.0.0", "wrap")]
    (demo,) = [p for p in launcher["patches"] if p["plugin"] == "alice/demo-patch@1.0.0"]
    assert demo["hides"] == []
    summary = {p["plugin"]: p["hides"] for p in summarize(str(job.dir))["patches"]}
    assert [h["plugin"] for h in summary["alice/swap@2.0.0"]] == ["alice/demo-patch@1.0.0"]
    assert summary["alice/demo-patch@1.0.0"] == []


def test_a_child_process_trainer_applies_the_patches_again_but_only_the_launcher_warns(builder):
    job = builder.job(plugins=[demo_plugin(), swap_plugin()])
    result = job.launch("/bin/sh", "-c", f"'{sys.executable}' -m app.train")
    assert result.returncode == 0, result.stderr
    assert "compute(1) = 0" in result.stdout
    assert warnings(result) == [HIDING]
    child = [r for r in job.records() if r["role"] != "launcher"]
    assert child, "the child process wrote no provenance record"
    (swap,) = [p for p in child[0]["patches"] if p["plugin"] == "alice/swap@2.0.0"]
    assert [h["plugin"] for h in swap["hides"]] == ["alice/demo-patch@1.0.0"]


def test_a_wrap_stacking_on_an_earlier_replace_is_no_warning(builder):
    job = builder.job(plugins=[swap_plugin(), demo_plugin()])
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert warnings(result) == []
    # the wrap stacks on the replacement: (1 - 1) * 10
    assert "compute(1) = 0" in result.stdout
    job2 = builder.job(plugins=[demo_plugin(), demo_plugin("more-patch")])
    result = job2.launch()
    assert result.returncode == 0, result.stderr
    assert warnings(result) == []
    assert "compute(1) = 200" in result.stdout
