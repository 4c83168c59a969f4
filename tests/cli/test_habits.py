"""Habits users bring from helm, kubectl and uv: values files, comma --set, -o json, forge.yaml
found from a subdirectory, near-miss command names, completion from local state, FORCE_COLOR,
and `forge config` saying where each setting came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.cli import forge as run_forge

ESC = "\x1b["

FORGE_YAML = """\
schema: forge/job/v1
name: habits
entrypoint: python -c pass
plugins: []
config:
  grpo:
    lr: 0.5
    steps: 10
  tag: base
backend: local
"""


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "XDG_")) and k not in ("NO_COLOR", "FORCE_COLOR")}
    e.update(FORGE_HOME=str(tmp_path / "home"), FORGE_JOBS_DIR=str(tmp_path / "jobs"))
    return e


@pytest.fixture
def exp(tmp_path, env) -> Path:
    root = tmp_path / "exp"
    (root / "runs" / "today").mkdir(parents=True)
    (root / "forge.yaml").write_text(FORGE_YAML)
    forge(env, "lock", str(root), check=True)
    return root


def forge(env, *args, cwd=None, check=False, extra=None):
    result = run_forge(*args, env={**env, **(extra or {})}, cwd=cwd, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def hyperparams(env, *args, cwd) -> dict:
    result = forge(env, "submit", "--dry-run", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["hyperparams"]


def test_values_file_lies_over_config_and_set_comes_after(env, exp):
    (exp / "lr-high.yaml").write_text("grpo:\n  lr: 2\n+sweep.name: high   # dotted keys too; a new key is written +key\n")
    (exp / "seed.yaml").write_text("grpo: {lr: 3, +seed: 7}\n")
    assert hyperparams(env, "-f", "lr-high.yaml", cwd=exp) == {"grpo.lr": 2.0, "grpo.steps": 10, "tag": "base", "sweep.name": "high"}
    # files in order, then --set: the last word wins
    got = hyperparams(env, "--values", "lr-high.yaml", "-f", "seed.yaml", "--set", "grpo.lr=4", cwd=exp)
    assert (got["grpo.lr"], got["grpo.seed"], got["sweep.name"]) == (4.0, 7, "high")


def test_values_file_errors_name_the_file_line_and_key(env, exp):
    (exp / "bad.yaml").write_text("grpo:\n  lr: fast\n")
    result = forge(env, "submit", "--dry-run", "-f", "bad.yaml", cwd=exp)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: bad.yaml:2: grpo.lr: 'grpo.lr' is a float in config (0.5), got a string 'fast'")
    missing = forge(env, "plan", "-f", "nope.yaml", cwd=exp)
    assert missing.returncode == 2 and missing.stderr.startswith("error: -f/--values nope.yaml: no such file")
    (exp / "whole.yaml").write_text(FORGE_YAML)
    looks = forge(env, "submit", "--dry-run", "-f", "whole.yaml", cwd=exp)
    assert looks.returncode != 0 and "looks like a forge.yaml" in looks.stderr


def test_a_values_file_key_nobody_declares_is_refused_with_the_closest_unless_written_plus_key(env, exp):
    # a typo used to become a new setting; now it is refused as --set refuses it
    (exp / "typo.yaml").write_text("grpo:\n  lr: 2\n  stpes: 20\n")
    typo = forge(env, "submit", "--dry-run", "-f", "typo.yaml", cwd=exp)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert typo.stderr.splitlines() == [
        "error: typo.yaml:3: grpo.stpes: unknown key 'grpo.stpes' (closest: grpo.steps)",
        "hint: to add a key that neither config nor any plugin declares, write '+grpo.stpes:' in the values file",
    ]
    same = forge(env, "submit", "--dry-run", "--set", "grpo.stpes=20", cwd=exp)
    assert same.returncode == 2 and "unknown key 'grpo.stpes' (closest: grpo.steps)" in same.stderr
    # +key at any level makes that key, and every key under it, new; a known key stays typed
    (exp / "new.yaml").write_text("+sweep: {name: high, id: 3}\ngrpo: {+seed: 7}\n+grpo.lr: 2\n")
    got = hyperparams(env, "-f", "new.yaml", cwd=exp)
    assert (got["sweep.name"], got["sweep.id"], got["grpo.seed"], got["grpo.lr"]) == ("high", 3, 7, 2.0)


def test_a_values_file_that_sets_one_key_twice_is_refused_as_forge_yaml_is(env, exp):
    for text, line, first in (("grpo: {lr: 1.0}\ngrpo.lr: 9.0\n", 2, 1), ("grpo.lr: 9.0\ngrpo:\n  lr: 1.0\n", 3, 1),
                              ("+grpo.seed: 1\ngrpo: {+seed: 2}\n", 2, 1)):
        (exp / "twice.yaml").write_text(text)
        twice = forge(env, "submit", "--dry-run", "-f", "twice.yaml", cwd=exp)
        assert twice.returncode == 3 and "Traceback" not in twice.stderr, twice.stderr
        key = "grpo.seed" if "seed" in text else "grpo.lr"
        assert twice.stderr.splitlines()[0] == f"error: twice.yaml:{line}: config key '{key}' is written twice (first at line {first})"
    # the same words forge.yaml's own rule uses
    (exp / "forge.yaml").write_text(FORGE_YAML.replace("  tag: base\n", "  tag: base\n  grpo.lr: 9.0\n"))
    in_forge_yaml = forge(env, "submit", "--dry-run", cwd=exp)
    assert in_forge_yaml.stderr.splitlines()[0] == f"error: {exp / 'forge.yaml'}:10: config key 'grpo.lr' is written twice (first at line 7)"
    # a value and a group, in either order
    for text in ("grpo: 1\ngrpo.lr: 2\n", "grpo.lr: 2\ngrpo: 1\n"):
        (exp / "group.yaml").write_text(text)
        group = forge(env, "plan", "-f", "group.yaml", cwd=exp)
        assert group.returncode == 3 and "error: group.yaml:2: config key 'grpo" in group.stderr, group.stderr


def test_a_values_file_over_one_mebibyte_is_refused_before_it_is_read(env, exp):
    import time

    (exp / "big.yaml").write_text("".join(f"+k{i}: {i}\n" for i in range(300_000)))  # 3.6 MB of keys
    started = time.monotonic()
    big = forge(env, "submit", "--dry-run", "-f", "big.yaml", cwd=exp)
    assert time.monotonic() - started < 5
    size = (exp / "big.yaml").stat().st_size
    assert big.returncode == 3 and big.stderr.splitlines() == [
        f"error: big.yaml: {size} bytes, more than the 1 MiB a values file may hold",
        "hint: a values file holds config keys; put large data in a file the trainer reads, and set its path",
    ]
    # just under the cap is read
    (exp / "fits.yaml").write_text("".join(f"+k{i}: {'x' * 1000}\n" for i in range(1000)))
    assert (exp / "fits.yaml").stat().st_size < 1 << 20
    assert len(hyperparams(env, "-f", "fits.yaml", cwd=exp)["k999"]) == 1000


def test_set_takes_helms_comma_form_with_escapes_and_keeps_flow_lists(env, exp):
    got = hyperparams(env, "--set", "grpo.lr=1,grpo.steps=20", "--set", r"tag=a\,b", "--set", "+ids=[1,2],+who=x", cwd=exp)
    assert got == {"grpo.lr": 1.0, "grpo.steps": 20, "tag": "a,b", "ids": [1, 2], "who": "x"}
    # a comma not followed by KEY= is part of the value, as before
    assert hyperparams(env, "--set", "tag=red, green", cwd=exp)["tag"] == "red, green"


def test_set_quoting_is_helms_quotes_never_hide_a_comma_and_a_backslash_escapes_one_character(env, exp):
    # an apostrophe used to switch the comma split off for the rest of the argument
    got = hyperparams(env, "--set", "tag=it's,grpo.steps=99", cwd=exp)
    assert (got["tag"], got["grpo.steps"]) == ("it's", 99)
    assert hyperparams(env, "--set=tag=it's,grpo.steps=98", cwd=exp)["grpo.steps"] == 98
    # a bracket inside a value is a character; a flow list the value begins with stays one value
    got = hyperparams(env, "--set", "tag=see [draft,grpo.steps=97", "--set", "+ids=[[1,2],[3]],+m={a: 1, b: 2},grpo.lr=2", cwd=exp)
    assert (got["tag"], got["grpo.steps"], got["ids"], got["m"], got["grpo.lr"]) == ("see [draft", 97, [[1, 2], [3]], {"a": 1, "b": 2}, 2.0)
    # a backslash makes the next character literal and goes, in both --set spellings
    assert hyperparams(env, "--set", r"tag=a\\b\,c", cwd=exp)["tag"] == "a\\b,c"
    assert hyperparams(env, r"--set=tag=a\,b", cwd=exp)["tag"] == "a,b"
    # a quoted value holding a comma before KEY= is cut there, as helm cuts it; the error says why
    cut = forge(env, "submit", "--dry-run", "--set", 'tag="x,grpo.steps=1"', cwd=exp)
    assert cut.returncode == 2
    assert cut.stderr.splitlines()[0].startswith("error: --set 'tag=\"x': value is not a YAML scalar")
    assert cut.stderr.splitlines()[1] == ("hint: a comma followed by KEY= starts the next --set even inside quotes, as in helm; "
                                          "write \\, for a comma in a value")
    assert hyperparams(env, "--set", r'tag="x\,grpo.steps=1"', cwd=exp)["tag"] == "x,grpo.steps=1"


@pytest.mark.parametrize("pieces", [["grpo.lr", "=", "3"], ["grpo.lr", "=3"], ["grpo.lr=", "="]])
def test_spaces_around_the_equals_sign_are_explained(env, exp, pieces):
    result = forge(env, "submit", "--set", *pieces, cwd=exp)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: --set grpo.lr") and "spaces around '='" in lines[0], lines
    assert lines[1].startswith("hint: write it as one argument without spaces: --set grpo.lr="), lines
    assert "unexpected extra argument" not in result.stderr


def test_output_json_is_json_and_other_formats_are_refused(env, exp):
    for spelling in (["-o", "json"], ["--output", "json"], ["-ojson"], ["--output=json"]):
        result = forge(env, "jobs", "list", *spelling)
        assert result.returncode == 0 and json.loads(result.stdout) == [], (spelling, result.stderr)
    plan = forge(env, "plan", "-o", "json", cwd=exp)
    assert plan.returncode == 0 and json.loads(plan.stdout)["clean"] is True
    assert forge(env, "jobs", "list", "-o", "text").stdout == ""  # the default output
    yaml = forge(env, "jobs", "list", "-o", "yaml")
    assert yaml.returncode == 2 and yaml.stderr.splitlines()[0] == "error: -o/--output 'yaml': 'forge jobs list' prints text (the default) or json"
    # a command whose -o is its own keeps it: bundle create -o FILE
    assert "-o, --output" in forge(env, "bundle", "create", "--help").stdout


def test_commands_find_forge_yaml_in_a_parent_directory(env, exp):
    below = exp / "runs" / "today"
    assert hyperparams(env, cwd=below)["grpo.steps"] == 10
    assert forge(env, "lock", "--check", cwd=below).returncode == 0
    # another directory named on the command line is taken as given
    named = forge(env, "submit", "--dry-run", str(below), cwd=exp)
    assert named.returncode != 0 and f"{below / 'forge.yaml'}: no forge.yaml here" in named.stderr
    outside = forge(env, "submit", "--dry-run", cwd=exp.parent)
    assert outside.returncode != 0 and "no forge.yaml here or in a parent directory" in outside.stderr


@pytest.mark.parametrize("args, meant", [
    (["plugin", "lint"], "forge plugin check"),
    (["plugin", "info"], "forge plugin show"),
    (["jobs", "submit"], "forge submit"),
    (["run"], "forge submit"),
])
def test_other_tools_command_names_get_the_forge_command(env, args, meant):
    result = forge(env, *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == f"error: no command 'forge {' '.join(args)}' (did you mean '{meant}'?)"


def complete(env, line: str, cwd) -> list:
    words = line.split(" ")
    result = forge(env, extra={"_FORGE_COMPLETE": "bash_complete", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return [row.split(",", 1)[1] for row in result.stdout.splitlines() if "," in row]


def test_completion_offers_job_ids_plugin_refs_and_set_keys_from_local_state(env, exp, tmp_path):
    started = forge(env, "submit", "--detach", "--json", cwd=exp)
    assert started.returncode == 0, started.stderr
    job_id = json.loads(started.stdout)["id"]
    assert complete(env, "forge jobs show ", exp) == [job_id]
    assert complete(env, "forge jobs logs habits-2", exp) == [job_id]
    assert complete(env, "forge jobs show nomatch", exp) == []
    assert complete(env, "forge submit --set grpo.", exp / "runs") == ["grpo.lr=", "grpo.steps="]
    assert complete(env, "forge plan --set +t", exp) == ["+tag="]
    forge(env, "plugin", "init", "opsd-patch", cwd=tmp_path, check=True)
    forge(env, "plugin", "publish", "opsd-patch", "--owner", "alice", cwd=tmp_path, check=True)
    assert complete(env, "forge plugin show alice/", exp) == ["alice/opsd-patch", "alice/opsd-patch@0.1.0"]
    # an OCI registry is never asked: nothing to offer, and no wait on the network
    unreachable = {**env, "FORGE_REGISTRY": "oci://192.0.2.1:5000/forge"}
    assert complete(unreachable, "forge plugin pull alice/", exp) == []


def test_key_completes_to_key_names_and_to_files_once_it_holds_a_slash(env, tmp_path):
    forge(env, "key", "generate", "--name", "release", check=True)
    forge(env, "key", "generate", "--name", "laptop", check=True)
    assert complete(env, "forge plugin publish --sign --key re", tmp_path) == ["release"]
    assert complete(env, "forge plugin sign alice/x@1.0.0 --key ", tmp_path) == ["laptop", "release"]
    words = "forge plugin sign alice/x@1.0.0 --key ./k".split(" ")
    result = forge(env, extra={"_FORGE_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(words), "COMP_CWORD": str(len(words) - 1)},
                   cwd=tmp_path)
    assert result.stdout.splitlines() == ["file,./k"]  # the shell completes the path


def test_force_color_colours_piped_errors_and_no_color_wins(env):
    plain = forge(env, "jobs", "show", "nope")
    assert ESC not in plain.stderr
    forced = forge(env, "jobs", "show", "nope", extra={"FORCE_COLOR": "1"})
    assert forced.returncode == 7 and forced.stderr.startswith(ESC) and "error:" in forced.stderr
    assert ESC not in forge(env, "jobs", "show", "nope", extra={"FORCE_COLOR": "0"}).stderr
    assert ESC not in forge(env, "jobs", "show", "nope", extra={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stderr


def test_forge_config_says_where_each_setting_came_from(env, exp, tmp_path):
    home = Path(env["FORGE_HOME"])
    shown = json.loads(forge(env, "config", "--json", cwd=exp / "runs", check=True).stdout)
    assert shown["config_dir"] == {"value": str(home), "source": "FORGE_HOME"}
    assert shown["registry"] == {"value": str(home / "registry"), "source": "default: the embedded directory registry"}
    assert shown["experiment"]["value"] == str(exp / "forge.yaml")
    assert shown["trust_file"]["value"] == str(home / "trust.json") and shown["keys"]["value"] == []
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text("registry: /srv/forge\nowner: carol\n")
    shown = json.loads(forge(env, "config", "--json", check=True).stdout)
    assert shown["registry"] == {"value": "/srv/forge", "source": f"'registry' in {home / 'config.yaml'}"}
    assert shown["owner"] == {"value": "carol", "source": f"'owner' in {home / 'config.yaml'}"}
    shown = json.loads(forge(env, "config", "--json", extra={"FORGE_REGISTRY": "/elsewhere", "FORGE_OWNER": "bob"}, check=True).stdout)
    assert shown["registry"]["source"] == "FORGE_REGISTRY" and shown["owner"] == {"value": "bob", "source": "FORGE_OWNER"}
    shown = json.loads(forge(env, "config", "--json", "--registry", "/flag", "--owner", "dave", check=True).stdout)
    assert shown["registry"] == {"value": "/flag", "source": "--registry"} and shown["owner"]["source"] == "--owner"
    forge(env, "key", "generate", "--name", "release", check=True)
    text = forge(env, "config", check=True).stdout
    assert "keys        : release\n" in text and "from FORGE_HOME" in text
