"""examples/quickstart.sh, the README's first command, run twice in a copy of the repository.

Its first run is shared by the tests here (``quickstart_run``, a module fixture that
tests/conftest.py schedules as one unit under xdist, so the script runs once per test run
for all of them); each test only adds to the checkout it leaves, as a user would.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.examples import RUN_LEFTOVERS, copy_example

REPO = Path(__file__).resolve().parents[2]


def _advantages(out: str, scale: str) -> list:
    line = next(ln for ln in out.splitlines() if ln.startswith(f"opsd.scale={scale}  advantages[step 0] = "))
    return ast.literal_eval(line.split(" = ", 1)[1])


def assert_the_docs_sample_shows_the_lines_it_prints(out: str) -> None:
    """docs/quickstart.md's sample of ``forge submit``'s output begins with the labelled
    lines a run prints, in the same order (up to its first elided line)."""
    doc = (REPO / "docs" / "quickstart.md").read_text().split("forge submit examples/quickstart --set opsd.scale=0.5\n", 1)[1]
    after_the_command = doc.split("```", 1)[1]  # the block that follows the command's own
    sample = after_the_command.split("```", 2)[1].splitlines()[1:]
    shown = [ln.split(" : ", 1)[0] for ln in sample[:sample.index("…")]]
    printed = [ln.split(" : ", 1)[0] for ln in out.splitlines()[out.splitlines().index("== 3. submit it with --set opsd.scale=0.5") + 1:]]
    assert printed[:len(shown)] == shown, (shown, printed[:len(shown)])
    runtime = next(ln for ln in sample if ln.startswith("runtime : "))
    assert runtime.replace("0.1.0", starforge_version()) in out.splitlines()


def starforge_version() -> str:
    from starforge import __version__

    return __version__


def _run_quickstart(tmp_path) -> tuple:
    """Run examples/quickstart.sh in a copy of the repository; return (repo, env, result)."""
    repo = tmp_path / "repo"
    if not repo.exists():
        debris = shutil.ignore_patterns(*RUN_LEFTOVERS)
        shutil.copytree(REPO / "examples", repo / "examples", ignore=debris)
        shutil.copytree(REPO / "forge_plugins", repo / "forge_plugins", ignore=debris)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["QUICKSTART_PYTHON"] = sys.executable
    result = subprocess.run(["bash", "examples/quickstart.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    return repo, env, result


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory) -> tuple:
    """The quickstart's first run in a copy of the repository: ``(repo, env, result)``."""
    return _run_quickstart(tmp_path_factory.mktemp("quickstart"))


def test_quickstart_runs_and_reruns(quickstart_run):
    repo, env, first = quickstart_run
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert "published starforge/opsd-patch@1.2.0 sf1:" in out
    assert "plugin  : starforge/opsd-patch@1.2.0 loaded" in out.splitlines()
    assert "plugin  : recipe:reward-clip@0.1.0 loaded (built-in)" in out.splitlines()
    default, scaled = _advantages(out, "1.0"), _advantages(out, "0.5")
    assert len(default) == len(scaled) == 16 and any(default)
    assert scaled == [a * 0.5 for a in default]  # the --set reached the plugin
    assert_the_docs_sample_shows_the_lines_it_prints(out)
    lock = repo / "examples" / "quickstart" / "plugins.lock.json"
    lock_bytes = lock.read_bytes()
    assert (repo / ".forge-home" / "registry").is_dir()  # state stays inside the checkout

    repo, env, second = _run_quickstart(repo.parent)
    assert second.returncode == 0, second.stdout + second.stderr
    published = [p for p in (REPO / "forge_plugins").iterdir() if (p / "plugin.yaml").is_file()]
    assert second.stdout.count("already published starforge/") == len(published) >= 7
    assert f"unchanged: {lock}" in second.stdout
    assert lock.read_bytes() == lock_bytes
    assert _advantages(second.stdout, "0.5") == scaled


def test_the_next_commands_it_prints_work_in_a_new_shell(quickstart_run, tmp_path):
    """Its closing 'Next' lines run as written in a shell that has neither forge on PATH nor
    FORGE_HOME set, and show the job it ran."""
    repo, env, run = quickstart_run
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("== done. Next"))
    commands = [ln.strip() for ln in lines[start + 1:] if ln.startswith("   ")]
    assert commands[0] == f"export FORGE_HOME={repo / '.forge-home'}"
    assert [c.split()[-2:] for c in commands[1:]][0] == ["jobs", "list"]
    job_id = next(ln.split(": ", 1)[1] for ln in lines if ln.startswith("job     : "))
    assert commands[2].endswith(f"jobs show {job_id}")

    new_shell = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k not in ("VIRTUAL_ENV",)}
    new_shell["PATH"] = "/usr/bin:/bin"  # no forge on PATH
    shown = subprocess.run(["bash", "-c", "\n".join(commands)], cwd=tmp_path, env=new_shell, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert job_id in shown.stdout and "no jobs yet" not in shown.stdout + shown.stderr
    assert f"id       : {job_id}" in shown.stdout


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_suites_copies_of_the_examples_are_fresh_after_the_quickstart_and_an_example_ran(quickstart_run, tmp_path):
    """The README's two commands in one checkout: the quickstart and an example leave their
    jobs (read-only staged trees) and locks in examples/, and the suite still copies each
    example as a fresh clone holds it."""
    fresh = {name: _files(copy_example(name, tmp_path / "fresh" / name)) for name in ("quickstart", "trl", "verl")}
    repo, env, run = quickstart_run
    assert run.returncode == 0, run.stdout + run.stderr
    env = dict(env)
    # examples/trl as a user runs it; here its job stops at the launcher's requirement check
    # (this interpreter has no torch), having staged its job directory all the same
    env.update(FORGE_HOME=str(repo / ".forge-home"), FORGE_OWNER="starforge", TRL_PYTHON=sys.executable)
    forge = [sys.executable, "-m", "starforge"]
    locked = subprocess.run([*forge, "lock", "examples/trl"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert locked.returncode == 0, locked.stderr
    subprocess.run([*forge, "submit", "examples/trl"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    for name in ("quickstart", "trl"):
        assert any((repo / "examples" / name / ".forge" / "jobs").iterdir()), name
        assert (repo / "examples" / name / "plugins.lock.json").is_file(), name

    for name in ("quickstart", "trl", "verl"):
        copied = copy_example(name, tmp_path / "copies" / name, repo=repo)
        assert _files(copied) == fresh[name], name
        assert not [p for p in copied.rglob("*") if p.name in (".forge", "plugins.lock.json", "__pycache__")], name
