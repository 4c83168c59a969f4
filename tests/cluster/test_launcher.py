"""``launcher``: forge-launch's command line, its log lines, status.json and how the entrypoint runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from starforge.cluster import launcher
from starforge.cluster.jobspec import PluginEntry
from starforge.cluster.load_order import Item


@pytest.mark.parametrize("argv, message", [
    ([], "--spec JOBSPEC is required"),
    (["--verify-only"], "--spec JOBSPEC is required"),
    (["--spec"], "--spec needs a path"),
    (["--spec", "j.json", "--plan"], "--plan needs a path (or '-' for stdout)"),
    (["--spec", "j.json", "--"], "nothing after '--'"),
    (["--spec", "j.json", "--frobnicate"], "unexpected argument '--frobnicate'"),
    (["--spec=j.json", "--verify-only", "--", "python", "t.py"], "--verify-only runs no command; drop '-- CMD ...'"),
    (["--spec", "j.json", "--plan", "-", "--verify-only"], "--plan and --verify-only are two different stops; give one"),
    (["--spec", "j.json", "--spec-sha256", "ABC"], "--spec-sha256 needs a sha256 (64 lowercase hex digits), got 'ABC'"),
    (["--spec", "j.json", "--spec-sha256=" + "A" * 64], f"--spec-sha256 needs a sha256 (64 lowercase hex digits), got '{'A' * 64}'"),
    (["--spec", "j.json", "--spec-sha256"], "--spec-sha256 needs a sha256 (64 lowercase hex digits), got ''"),
])
def test_bad_usage_is_one_error_line_and_a_hint_with_exit_code_2(capsys, argv, message):
    assert launcher.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"error: {message}",
        "hint: forge-launch --spec JOBSPEC [--verify-only | --plan LEDGER] [-- CMD ...]",  # what a user types
    ]


def test_help_prints_the_usage_and_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        launcher.main(["--spec", "j.json", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out == launcher.USAGE
    assert out.startswith("usage: forge-launch --spec JOBSPEC")


def item(status: str, *, builtin: bool = False, kind: str = "algorithm", shadowed_by: str | None = None) -> Item:
    entry = PluginEntry("p", "1.0.0", "sf1:" + "0" * 64, kind, "eager", "p:install", owner=None if builtin else "alice")
    it = Item(entry, builtin, "/nonexistent")
    it.status = status
    it.shadowed_by = shadowed_by
    return it


@pytest.mark.parametrize("it, line", [
    (item("loaded"), "plugin  : alice/p@1.0.0 loaded"),
    (item("loaded", builtin=True), "plugin  : recipe:p@1.0.0 loaded (built-in)"),
    (item("registered"), "plugin  : alice/p@1.0.0 registered (needs runtime context, loaded by the training entrypoint)"),
    (item("registered", builtin=True),
     "plugin  : recipe:p@1.0.0 registered (built-in; needs runtime context, loaded by the training entrypoint)"),
    (item("skipped", kind="environment"), "plugin  : alice/p@1.0.0 skipped (kind environment: left to the environment mechanism)"),
    (item("shadowed", builtin=True, shadowed_by="alice/p@2.0.0"),
     "plugin  : recipe:p@1.0.0 shadowed (built-in replaced by the locked package alice/p@2.0.0)"),
    (item("failed"), "plugin  : alice/p@1.0.0 failed"),
    (item("verified"), "plugin  : alice/p@1.0.0 verified"),
])
def test_plugin_lines_of_the_job_log(it, line):
    assert launcher.plugin_line(it) == line


def test_write_status_writes_the_phase_record(tmp_path):
    launcher.write_status(str(tmp_path), "requires", 11, "alice/p@1.0.0", "alice/p@1.0.0 requires python >=9")
    text = (tmp_path / "status.json").read_text()
    data = json.loads(text)
    assert {k: data[k] for k in ("phase", "code", "plugin", "message")} == {
        "phase": "requires", "code": 11, "plugin": "alice/p@1.0.0", "message": "alice/p@1.0.0 requires python >=9"}
    assert data["time"].endswith("Z")
    assert text.endswith("}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temporary file left beside it


def test_write_status_into_a_missing_directory_says_so_and_goes_on(tmp_path, capsys):
    launcher.write_status(str(tmp_path / "gone"), "done", 0)
    assert capsys.readouterr().err.startswith("forge-launch: cannot write status.json: ")


DRIVER = textwrap.dedent(
    """
    import os, sys
    from starforge.cluster.launcher import run_entrypoint
    print("DRIVER", os.getpid(), flush=True)
    code, failure = run_entrypoint(sys.argv[2:], sys.argv[1])
    detail = failure and (failure.phase, failure.code, failure.plugin, failure.message)
    print("RESULT", code, detail, flush=True)
    """
)

TRAINER = textwrap.dedent(
    """
    import os, sys
    print("TRAINER", os.getpid(), os.getcwd(), sys.argv, sys.path[0], sys.flags.optimize, flush=True)
    how = sys.argv[1] if len(sys.argv) > 1 else "ok"
    if how == "exit7":
        raise SystemExit(7)
    if how == "exit-text":
        sys.exit("trainer gave up")
    if how == "crash":
        raise ZeroDivisionError("bad step")
    if how == "install":
        from starforge.cluster.errors import InstallError
        def install():
            err = InstallError("alice/p@1.0.0: install raised KeyError: 'tokenizer'")
            err.plugin = "alice/p@1.0.0"
            raise err
        try:
            install()
        except InstallError:
            raise RuntimeError("the trainer wrapped it")
    """
)


@pytest.fixture
def recipe(tmp_path):
    folder = tmp_path / "recipe"
    folder.mkdir()
    (folder / "train_mod.py").write_text(TRAINER)
    return folder


def drive(recipe, *argv: str):
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(recipe), *argv], capture_output=True, text=True,
                          timeout=60, cwd=str(recipe.parent))
    lines = proc.stdout.splitlines()
    driver = next(line.split()[1] for line in lines if line.startswith("DRIVER"))
    trainer = next((line.split(" ", 2) for line in lines if line.startswith("TRAINER")), None)
    result = next(line[len("RESULT "):] for line in lines if line.startswith("RESULT"))
    return proc, driver, trainer, result


def test_python_m_runs_in_the_launchers_process_from_the_recipe(recipe):
    proc, driver, trainer, result = drive(recipe, "python", "-m", "train_mod", "ok", "--lr", "1e-6")
    assert result == "0 None", proc.stderr
    assert trainer[1] == driver  # in this process: the plugins installed here apply
    assert f" {recipe} ['{recipe / 'train_mod.py'}', 'ok', '--lr', '1e-6'] {recipe} 0" in " " + trainer[2]


def test_python_script_runs_in_process_with_its_own_argv(recipe):
    proc, driver, trainer, result = drive(recipe, "python", "train_mod.py", "exit7")
    assert result == "7 None", proc.stderr
    assert trainer[1] == driver
    assert "['train_mod.py', 'exit7']" in trainer[2]


def test_a_flag_only_the_real_interpreter_honours_makes_a_child(recipe):
    proc, driver, trainer, result = drive(recipe, "python", "-O", "-m", "train_mod")
    assert result == "0 None", proc.stderr
    assert trainer[1] != driver
    assert trainer[2].endswith(" 1")  # -O honoured


def test_sys_exit_with_text_is_code_1_and_the_text_on_stderr(recipe):
    proc, driver, trainer, result = drive(recipe, "python", "-m", "train_mod", "exit-text")
    assert result == "1 None"
    assert "trainer gave up" in proc.stderr


def test_a_trainer_exception_is_code_1_with_the_trainers_traceback_only(recipe):
    proc, driver, trainer, result = drive(recipe, "python", "-m", "train_mod", "crash")
    assert result == "1 None"
    assert "ZeroDivisionError: bad step" in proc.stderr
    assert 'train_mod.py", line' in proc.stderr
    assert "launcher.py" not in proc.stderr and "runpy" not in proc.stderr


def test_an_install_error_anywhere_in_the_chain_is_the_plugins_install_failure(recipe):
    proc, driver, trainer, result = drive(recipe, "python", "-m", "train_mod", "install")
    assert result == "13 ('install', 13, 'alice/p@1.0.0', \"alice/p@1.0.0: install raised KeyError: 'tokenizer'\")", proc.stderr


def test_a_non_python_entrypoint_is_a_child_with_its_exit_code(recipe):
    proc, driver, trainer, result = drive(recipe, "/bin/sh", "-c", "pwd; exit 5")
    assert result == "5 None"
    assert str(recipe) in proc.stdout.splitlines()


def test_a_missing_recipe_directory_is_a_spec_failure(tmp_path):
    proc, driver, trainer, result = drive(tmp_path / "absent", "python", "-m", "train_mod")
    assert trainer is None
    assert result.startswith(f"2 ('spec', 2, None, \"cannot enter the job's working directory {tmp_path / 'absent'}: ")
