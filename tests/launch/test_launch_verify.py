"""Verification: exit 10 on any difference from the locked tree, before any code runs."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from launch_jobs import REPO, bytecode_in, is_read_only, make_writable, plugin_entry

# The plugin and the trainer each leave a marker when their code runs.
MARKING_PLUGIN = """
open({marker!r}, "a").write("plugin module ran\\n")

def install(params):
    open({marker!r}, "a").write("install ran\\n")
"""


def marking_job(builder, tmp_path: Path):
    plugin_marker = tmp_path / "plugin-ran"
    trainer_marker = tmp_path / "trainer-ran"
    plugin = {
        "name": "marked",
        "files": {
            "marked.py": MARKING_PLUGIN.format(marker=str(plugin_marker)),
            "marked_helpers/__init__.py": "",
            "marked_helpers/scale.py": "FACTOR = 2\n",
            "plugin.yaml": "schema: forge/plugin/v1\nname: marked\n",
        },
    }
    job = builder.job(plugins=[plugin], trainer=f"open({str(trainer_marker)!r}, 'w').close()\n")
    return job, plugin_marker, trainer_marker


def assert_refused(job, result, plugin_marker, trainer_marker, *details: str) -> None:
    assert result.returncode == 10, result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/marked@1.0.0 failed (verification failed, exit 10)"]
    for detail in details:
        assert detail in result.stderr
    assert not plugin_marker.exists(), "plugin code ran before verification"
    assert not trainer_marker.exists(), "the trainer ran after a failed verification"
    status = job.status()
    assert (status["phase"], status["code"], status["plugin"]) == ("verify", 10, "alice/marked@1.0.0")


@pytest.mark.parametrize(
    "change, details",
    [
        (("forge_plugins/marked/marked_helpers/scale.py", "FACTOR = 3\n"), ["changed: marked_helpers/scale.py"]),
        (("forge_plugins/marked/extra.py", "x = 1\n"), ["added: extra.py"]),
        (("forge_plugins/marked/marked_helpers/scale.py", None), ["removed: marked_helpers/scale.py"]),
        (("forge_plugins/marked/__pycache__/marked.cpython-311.pyc", "planted"), ["added: __pycache__/marked.cpython-311.pyc"]),
    ],
    ids=["changed", "added", "removed", "planted-pyc"],
)
def test_any_difference_fails_with_10_naming_files(builder, tmp_path, change, details):
    job, plugin_marker, trainer_marker = marking_job(builder, tmp_path)
    job.tamper(*change)
    result = job.launch()
    assert_refused(job, result, plugin_marker, trainer_marker, "digest mismatch", *details)


def test_symlink_fifo_and_hard_link_fail_with_10(builder, tmp_path):
    job, plugin_marker, trainer_marker = marking_job(builder, tmp_path)
    root = job.plugin_dir("marked")
    make_writable(root)
    target = tmp_path / "elsewhere.py"
    target.write_text("FACTOR = 2\n")
    (root / "marked_helpers" / "scale.py").unlink()
    os.symlink(target, root / "marked_helpers" / "scale.py")
    result = job.launch()
    assert_refused(job, result, plugin_marker, trainer_marker, "marked_helpers/scale.py: is a symlink")

    job, plugin_marker, trainer_marker = marking_job(builder, tmp_path)
    os.link(job.plugin_dir("marked") / "marked.py", tmp_path / "second-name.py")
    result = job.launch()
    assert_refused(job, result, plugin_marker, trainer_marker, "marked.py: has 2 hard links")

    job, plugin_marker, trainer_marker = marking_job(builder, tmp_path)
    make_writable(job.plugin_dir("marked"))
    os.mkfifo(job.plugin_dir("marked") / "pipe")
    result = job.launch()
    assert_refused(job, result, plugin_marker, trainer_marker, "pipe: is not a regular file")


def test_two_relaunches_pass_leave_tree_read_only_and_without_bytecode(builder, tmp_path):
    job, plugin_marker, _ = marking_job(builder, tmp_path)
    for attempt in range(2):
        result = job.launch()
        assert result.returncode == 0, result.stderr
        assert job.plugin_lines(result) == ["plugin  : alice/marked@1.0.0 loaded"]
    assert plugin_marker.read_text() == "plugin module ran\ninstall ran\n" * 2
    root = job.dir / "forge_plugins"
    assert bytecode_in(root) == []
    assert is_read_only(root)
    attempts = sorted(r["attempt"] for r in job.records() if r["role"] == "launcher")
    assert attempts == [0, 1]


def test_in_the_copy_ray_unpacked_the_plugin_folders_are_deletable_again_once_the_launcher_ends(builder, tmp_path):
    job, _, _ = marking_job(builder, tmp_path)
    root = job.dir / "forge_plugins"
    # the package of another job directory: this one is a staged tree, and stays read-only
    result = job.launch(env={"FORGE_RAY_PACKAGE": "starforge_" + "0" * 32})
    assert result.returncode == 0, result.stderr
    assert is_read_only(root)
    # this directory is the copy of the package Ray unpacked (named after it): its owner
    # may write each folder again, so Ray's rmtree deletes it; the files stay read-only
    result = job.launch(env={"FORGE_RAY_PACKAGE": job.dir.name})
    assert result.returncode == 0, result.stderr
    folders = [root, *(p for p in root.rglob("*") if p.is_dir())]
    assert [str(p) for p in folders if not p.stat().st_mode & stat.S_IWUSR] == []
    assert [str(p) for p in root.rglob("*") if p.is_file() and p.stat().st_mode & 0o222] == []


# Waits, when GATE names a file, until that file exists.
GATED_TRAINER = """
import os, time
if os.environ.get("GATE"):
    open(os.environ["GATE"] + ".waiting", "w").close()
    while not os.path.exists(os.environ["GATE"]):
        time.sleep(0.05)
"""


def test_of_two_launchers_in_one_copy_the_last_to_end_gives_the_folders_back(builder, tmp_path):
    # the same staged job submitted twice to Ray runs from the same copy on a node
    plugin = {"name": "marked", "files": {"marked.py": "def install(params):\n    pass\n",
                                          "plugin.yaml": "schema: forge/plugin/v1\nname: marked\n"}}
    job = builder.job(plugins=[plugin], trainer=GATED_TRAINER)
    gate = tmp_path / "gate"
    env = {"FORGE_RAY_PACKAGE": job.dir.name}
    first: dict = {}
    thread = threading.Thread(target=lambda: first.update(result=job.launch(env={**env, "GATE": str(gate)})))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "gate.waiting").exists() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = job.launch(env=env)
        assert second.returncode == 0, second.stderr
        assert is_read_only(job.dir / "forge_plugins")  # the first still runs from it
    finally:
        gate.touch()
        thread.join(60)
    assert first["result"].returncode == 0, first["result"].stderr
    root = job.dir / "forge_plugins"
    assert [str(p) for p in [root, *root.rglob("*")] if p.is_dir() and not p.stat().st_mode & stat.S_IWUSR] == []


def test_file_added_after_verification_is_never_imported(builder, tmp_path):
    """The finder serves the plugin's names from the verified snapshot only."""
    plugin = {
        "name": "lazy-sub",
        "files": {
            "lazy_sub/__init__.py": "def install(params):\n    pass\n",
            "lazy_sub/ok.py": "VALUE = 'verified'\n",
        },
        "entrypoint": "lazy_sub:install",
    }
    trainer = """
    import os, importlib
    root = os.path.join(os.environ["FORGE_JOB_DIR"], "forge_plugins", "lazy-sub", "lazy_sub")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "ok.py"), "w") as f:
        f.write("VALUE = 'tampered'\\n")
    with open(os.path.join(root, "evil.py"), "w") as f:
        f.write("VALUE = 'evil'\\n")
    print("ok:", importlib.import_module("lazy_sub.ok").VALUE)
    try:
        importlib.import_module("lazy_sub.evil")
    except ModuleNotFoundError as exc:
        print("evil:", exc)
    """
    job = builder.job(plugins=[plugin], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "ok: verified" in result.stdout
    assert "evil: No module named 'lazy_sub.evil' in the verified tree of alice/lazy-sub@1.0.0" in result.stdout


def test_builtin_is_verified_too(builder, tmp_path):
    builtin = {"name": "reward-clip", "files": {"reward_clip.py": "def install(params):\n    pass\n"}}
    job = builder.job(builtins=[builtin])
    path = job.dir / "recipe" / "common" / "algorithms" / "reward-clip" / "reward_clip.py"
    path.write_text("def install(params):\n    raise SystemExit(99)\n")
    result = job.launch()
    assert result.returncode == 10
    assert "verification failed in recipe/common/algorithms/reward-clip" in result.stderr
    assert "changed: reward_clip.py" in result.stderr


def test_repo_reference_plugin_loads_from_a_copied_tree(builder, tmp_path):
    """forge_plugins/opsd-patch as shipped in this repository, staged by hand."""
    source = REPO / "forge_plugins" / "opsd-patch"
    if not source.is_dir():
        pytest.skip("forge_plugins/opsd-patch is not in this checkout")
    job = builder.job(recipe={"toy_grpo/__init__.py": "", "toy_grpo/algorithms.py": (
        "ADVANTAGE_ESTIMATORS = {}\n"
        "def compute_advantages(rewards, group_size, eps=1e-6):\n"
        "    return list(rewards)\n"
        "ADVANTAGE_ESTIMATORS['grpo'] = compute_advantages\n")},
        trainer="from toy_grpo import algorithms\nprint('adv', algorithms.compute_advantages([1.0, 2.0], 2))\n",
        hyperparams={"opsd.scale": 0.5})
    dest = job.plugin_dir("opsd-patch")
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    entry = plugin_entry(dest, "opsd-patch", version="1.2.0", entrypoint="opsd_patch:install", targets=["toy_grpo.algorithms"],
                         requires={"core": ">=0.1,<1", "python": ">=3.10"})
    import json

    data = json.loads(job.spec_path.read_text())
    data["plugins"] = [entry]
    job.spec_path.write_text(json.dumps(data))
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/opsd-patch@1.2.0 loaded"]
    assert "adv [0.5, 1.0]" in result.stdout
    assert bytecode_in(dest) == []
    assert sys.modules.get("opsd_patch") is None  # nothing leaked into the test process


def _marking_plugin(name: str, marker: Path) -> dict:
    module = name.replace("-", "_")
    return {"name": name, "files": {f"{module}.py": MARKING_PLUGIN.format(marker=str(marker)),
                                    "plugin.yaml": f"schema: forge/plugin/v1\nname: {name}\n"}}


def test_every_plugin_is_verified_before_any_is_imported(builder, tmp_path):
    first_marker = tmp_path / "first-ran"
    trainer_marker = tmp_path / "trainer-ran"
    job = builder.job(plugins=[_marking_plugin("first", first_marker), _marking_plugin("second", tmp_path / "second-ran")],
                      trainer=f"open({str(trainer_marker)!r}, 'w').close()\n")
    job.tamper("forge_plugins/second/second.py", "def install(params):\n    pass\n")
    result = job.launch()
    assert result.returncode == 10, result.stderr
    # The good first plugin is neither imported nor installed: no line says it loaded.
    assert job.plugin_lines(result) == ["plugin  : alice/second@1.0.0 failed (verification failed, exit 10)"]
    assert not first_marker.exists(), "the first plugin ran before the second was verified"
    assert not trainer_marker.exists()
    assert (job.status()["phase"], job.status()["plugin"]) == ("verify", "alice/second@1.0.0")


def test_a_tampered_builtin_stops_the_packages_before_they_run(builder, tmp_path):
    first_marker = tmp_path / "first-ran"
    builtin = {"name": "reward-clip", "files": {"reward_clip.py": "def install(params):\n    pass\n"}}
    job = builder.job(plugins=[_marking_plugin("first", first_marker)], builtins=[builtin])
    path = job.dir / "recipe" / "common" / "algorithms" / "reward-clip" / "reward_clip.py"
    path.write_text("def install(params):\n    raise SystemExit(99)\n")
    result = job.launch()
    assert result.returncode == 10, result.stderr
    assert job.plugin_lines(result) == ["plugin  : recipe:reward-clip@1.0.0 failed (verification failed, exit 10)"]
    assert not first_marker.exists()


def test_unmet_requirement_of_a_later_plugin_stops_the_job_before_the_first_installs(builder, tmp_path):
    first_marker = tmp_path / "first-ran"
    second = _marking_plugin("second", tmp_path / "second-ran")
    second["requires"] = {"python": "<3"}
    job = builder.job(plugins=[_marking_plugin("first", first_marker), second])
    result = job.launch()
    assert result.returncode == 11, result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/second@1.0.0 failed (requirement not met, exit 11)"]
    assert not first_marker.exists()
