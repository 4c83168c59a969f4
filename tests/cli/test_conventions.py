"""Command-line conventions through the installed `forge`: -V, -q/-v, colour only on a
terminal and never with NO_COLOR, did-you-mean, bare groups, completion, fast help."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import forge as run_forge

FORGE = str(Path(sys.executable).with_name("forge"))
ESC = "\x1b["


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "NO_COLOR"}
    e.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="alice", FORGE_JOBS_DIR=str(tmp_path / "jobs"))
    return e


def forge(env, *args):
    return run_forge(*args, env=env, timeout=60)


def on_terminal(env, *args) -> str:
    """Run forge with stdout and stderr on a pseudo-terminal; return what it wrote."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([FORGE, *args], env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_short_version_flag():
    from starforge import __version__

    out = subprocess.run([FORGE, "-V"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"forge {__version__}"


def test_bare_forge_and_bare_group_print_help_and_succeed(env):
    for args in ([], ["plugin"], ["jobs"]):
        result = forge(env, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout.startswith("Usage: forge") and "Commands:" in result.stdout and result.stderr == ""


def test_misspelt_subcommand_gets_did_you_mean(env):
    result = forge(env, "plugin", "chek")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: no command 'forge plugin chek' (did you mean 'forge plugin check'?)",
        "hint: see 'forge plugin --help'",
    ]
    assert "did you mean 'forge submit'" in forge(env, "sumbit").stderr


def test_set_without_a_value_points_at_submit_help(env):
    result = forge(env, "submit", ".", "--set")
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == "hint: see 'forge submit --help'"


def test_colour_on_a_terminal_only_and_never_with_no_color(env):
    on_tty = on_terminal(env, "jobs", "show", "nope")
    assert f"{ESC}" in on_tty and "error:" in on_tty and "hint:" in on_tty
    assert ESC not in on_terminal({**env, "NO_COLOR": "1"}, "jobs", "show", "nope")
    piped = forge(env, "jobs", "show", "nope")
    assert piped.returncode == 7 and ESC not in piped.stderr and piped.stderr.startswith("error: no job 'nope'")


def test_plugin_lines_of_a_job_log_are_coloured_on_a_terminal(env, tmp_path):
    from starforge.jobs.jobrecord import JobRecord
    from starforge.jobs.store import JobStore

    job_dir = tmp_path / "job-1"
    job_dir.mkdir()
    JobStore(Path(env["FORGE_JOBS_DIR"])).save(
        JobRecord(id="job-1", name="job", backend="local", status="succeeded", dir=str(job_dir), created="2026-11-29T12:00:00Z", exit_code=0)
    )
    from starforge.backends.local import LOG_NAME

    (job_dir / LOG_NAME).write_text("plugin  : alice/opsd-patch@1.2.0 loaded\nstep 0 loss 1.0\n")
    shown = on_terminal(env, "jobs", "logs", "job-1")
    plugin_line = next(line for line in shown.splitlines() if "opsd-patch" in line)
    assert plugin_line.startswith(ESC)
    assert next(line for line in shown.splitlines() if "loss" in line).startswith("step 0")
    assert ESC not in forge(env, "jobs", "logs", "job-1").stdout


def test_quiet_silences_notes_and_verbose_explains_the_exit_code(env):
    empty = forge(env, "jobs", "list")
    assert empty.stdout == "" and empty.stderr.startswith("no jobs yet")  # a note: stderr, never the results' stream
    assert forge(env, "-q", "jobs", "list").stderr == ""
    assert forge(env, "trust", "list").stderr.startswith("no trusted keys")
    assert forge(env, "-q", "trust", "list").stderr == ""
    loud = forge(env, "-v", "jobs", "show", "nope")
    assert loud.returncode == 7
    assert f"config {env['FORGE_HOME']}" in loud.stderr
    assert "exit 7: NotFoundError" in loud.stderr
    quiet = forge(env, "-q", "jobs", "show", "nope")
    assert quiet.returncode == 7 and quiet.stderr.startswith("error: no job 'nope'")
    both = forge(env, "-q", "-v", "jobs", "list")
    assert both.returncode == 2 and "contradict" in both.stderr


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F"), ("zsh", "#compdef forge"), ("fish", "complete --no-files --command forge")])
def test_completion_prints_the_shell_script(env, shell, marker):
    result = forge(env, "completion", shell)
    assert result.returncode == 0 and marker in result.stdout and "_FORGE_COMPLETE" in result.stdout


def test_completion_completes_subcommands(env):
    result = subprocess.run(
        [FORGE], env={**env, "_FORGE_COMPLETE": "bash_complete", "COMP_WORDS": "forge jobs pr", "COMP_CWORD": "2"},
        capture_output=True, text=True, timeout=60,
    )
    assert "prune" in result.stdout


def _leaves(table, path=()):
    for name, entry in table.items():
        if isinstance(entry, dict):
            yield from _leaves(entry, path + (name,))
        else:
            yield path + (name,), entry


def test_every_summary_in_the_command_table_is_its_commands_docstring():
    """The command lists show the table's summaries (data: `forge --help` imports no command,
    tests/cli/test_main.py checks that); each must be the first paragraph of the command's
    docstring, its --help, so there is one help text."""
    import importlib

    from starforge.cli import main

    leaves = list(_leaves(main.COMMANDS))
    assert len(leaves) >= 30
    for path, entry in leaves:
        module, attr = entry.target.split(":")
        command = getattr(importlib.import_module(f"starforge.cli.{module}"), attr)
        first = " ".join(command.help.split("\n\n")[0].split())
        assert entry.summary == first, f"forge {' '.join(path)}: the table says {entry.summary!r}, the docstring {first!r}"
        assert main.summary(entry) == entry.summary


def test_plugin_show_and_pull_take_a_bare_name_as_the_default_owner(env, tmp_path):
    src = tmp_path / "opsd-patch"
    src.mkdir()
    (src / "plugin.yaml").write_text(
        "schema: forge/plugin/v1\nname: opsd-patch\nversion: '1.2.0'\nkind: algorithm\nentrypoint: opsd_patch:install\n"
    )
    (src / "opsd_patch.py").write_text("def install(params):\n    return None\n")
    assert forge(env, "plugin", "publish", str(src)).returncode == 0
    import json

    shown = json.loads(forge(env, "plugin", "show", "opsd-patch", "--json").stdout)
    assert shown["ref"] == "alice/opsd-patch@1.2.0"
    pulled = forge(env, "plugin", "pull", "opsd-patch@~=1.2", "-o", str(tmp_path / "out"))
    assert pulled.returncode == 0 and pulled.stdout.startswith("pulled alice/opsd-patch@1.2.0")
    other = forge({**env, "FORGE_OWNER": "bob"}, "plugin", "show", "opsd-patch")
    assert other.returncode == 7 and "bob/opsd-patch" in other.stderr


@pytest.mark.parametrize("args", [
    ("jobs", "list", "-q"), ("jobs", "-q", "list"), ("-q", "jobs", "list"), ("jobs", "list", "--quiet"),
])
def test_global_options_are_accepted_after_the_command_too(env, args):
    result = forge(env, *args)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""  # -q silenced the 'no jobs yet' note


def test_debug_after_the_command_shows_the_traceback(env):
    result = forge(env, "jobs", "show", "nope", "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_global_options_are_not_taken_from_option_values_or_after_the_separator(env, tmp_path):
    from starforge.cli.main import normalize_argv

    assert normalize_argv(["submit", "exp", "--set", "-q", "-v"]) == ["-v", "submit", "exp", "--set", "-q"]
    assert normalize_argv(["submit", "--set=-q"]) == ["submit", "--set=-q"]
    assert normalize_argv(["plugin", "check", "-q", "--", "-v"]) == ["-q", "plugin", "check", "--", "-v"]
    # for real: '--set -q' is a --set value (refused as one), not the quiet flag
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "forge.yaml").write_text("schema: forge/job/v1\nname: e\nentrypoint: python -c pass\n")
    assert forge(env, "lock", str(exp)).returncode == 0
    refused = forge(env, "submit", str(exp), "--set", "-q", "--dry-run")
    assert refused.returncode == 2 and "--set '-q': expected KEY=VALUE" in refused.stderr


def test_help_and_version_as_commands(env):
    assert forge(env, "version").stdout == forge(env, "--version").stdout
    assert forge(env, "version").stdout.startswith("forge ")
    assert forge(env, "help").stdout == forge(env, "--help").stdout
    by_help = forge(env, "help", "jobs", "prune")
    assert by_help.returncode == 0 and by_help.stdout == forge(env, "jobs", "prune", "--help").stdout


@pytest.mark.parametrize("alias, command", [
    (("jobs", "ls"), ("jobs", "list")), (("plugin", "ls"), ("plugin", "list")), (("trust", "ls"), ("trust", "list")),
])
def test_aliases_run_the_command_they_name(env, alias, command):
    a, c = forge(env, *alias), forge(env, *command)
    assert a.returncode == c.returncode == 0 and (a.stdout, a.stderr) == (c.stdout, c.stderr)


@pytest.mark.parametrize("alias", ["stop", "kill", "delete", "remove"])
def test_job_aliases_reach_cancel_and_rm(env, alias):
    result = forge(env, "jobs", alias, "nope")
    assert result.returncode == 7 and result.stderr.startswith("error: no job 'nope'")  # the command ran, not 'no command'


def test_a_forge_home_that_is_a_file_is_one_clear_error(env, tmp_path):
    afile = tmp_path / "home-file"
    afile.write_text("")
    for args in (("plugin", "list"), ("key", "generate"), ("trust", "list")):
        result = forge({**env, "FORGE_HOME": str(afile)}, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.splitlines()[0] == f"error: FORGE_HOME={afile} is not a directory"


def test_publishing_as_the_login_name_says_so(env, tmp_path):
    import getpass

    plugin = tmp_path / "opsd-patch"
    assert forge(env, "plugin", "init", "opsd-patch", "--dir", str(plugin)).returncode == 0
    anonymous = {k: v for k, v in env.items() if k != "FORGE_OWNER"}
    result = forge(anonymous, "plugin", "publish", str(plugin))
    assert result.returncode == 0, result.stderr
    login = getpass.getuser()
    assert f"publishing as owner '{login}' (your login name)" in result.stderr and "FORGE_OWNER" in result.stderr
    assert f"published {login}/opsd-patch@0.1.0" in result.stdout
    named = forge(env, "plugin", "publish", str(plugin))  # FORGE_OWNER=alice
    assert named.returncode == 0 and "login name" not in named.stderr
    assert "login name" not in forge(anonymous, "-q", "plugin", "publish", str(plugin)).stderr
