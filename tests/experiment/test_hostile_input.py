"""Malformed input of any shape is one ``error:`` line with a non-zero exit, never a traceback:
control characters, huge numbers and deep nesting in plugin.yaml, forge.yaml, the user
config.yaml and --set; a trust file that is JSON but not an object."""

from __future__ import annotations

import pytest

HOSTILE = {
    "control": "\x01",
    "escape": "\x1b[31m",
    "huge-int": "1" * 5000,
    "deep": "[" * 1000,
}


def _one_error(proc, code: int) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: ") and all(l.lstrip().startswith(("error: ", "hint: ")) for l in lines), proc.stderr
    return lines[0]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_plugin_yaml_is_a_manifest_error(project, kind):
    root = project.plugin("opsd-patch")
    (root / "plugin.yaml").write_text((root / "plugin.yaml").read_text() + f"description: {HOSTILE[kind]}\n")
    line = _one_error(project.forge("plugin", "check", str(root), ok=False, cwd=project.tmp), 4)
    assert "plugin.yaml:7: " in line and len(line) < 400


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_forge_yaml_is_a_manifest_error(opsd, kind):
    path = opsd.exp / "forge.yaml"
    path.write_text(path.read_text() + f"extra_key: {HOSTILE[kind]}\n")
    line = _one_error(opsd.forge("lock", ok=False), 3)
    assert "forge.yaml" in line
    assert not opsd.lock.exists()


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_user_config_is_a_manifest_error(project, kind):
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"owner: {HOSTILE[kind]}\n")
    line = _one_error(project.forge("plugin", "list", ok=False, cwd=project.tmp), 3)
    assert "config.yaml" in line


@pytest.mark.parametrize(
    "setting, code",
    [
        ("opsd.scale=" + "9" * 400, 2),  # an integer beyond the float range, on a float key
        ("+x=0x" + "f" * 4000, 2),  # an integer too large to print back
        ("+x=" + "1" * 5000, 2),
        ("+x=" + "[" * 1000, 2),
        ("+x=a\x01b", 2),
    ],
)
def test_hostile_set_values_are_errors(opsd, setting, code):
    opsd.forge("lock")
    line = _one_error(opsd.forge("submit", "--dry-run", "--set", setting, ok=False), code)
    assert "--set" in line and len(line) < 400
    assert not opsd.jobs_dir().exists()


@pytest.mark.parametrize("content", ["[1, 2]", '"x"', "null", "[" * 5000 + "]" * 5000])
def test_a_trust_file_that_is_not_an_object_is_a_signature_error(opsd, content):
    opsd.forge("lock")
    opsd.lock.unlink()
    (opsd.home / "trust.json").write_text(content)
    for args in (("trust", "list"), ("plugin", "pull", "alice/opsd-patch", "-o", str(opsd.tmp / "out")), ("lock",)):
        line = _one_error(opsd.forge(*args, ok=False), 9)
        assert "trust file" in line and "is not" in line
    assert not opsd.lock.exists() and not (opsd.tmp / "out").exists()


@pytest.mark.parametrize("value", ["? ", "{1: a}", "[{null: 1}]"])
def test_set_mapping_with_a_key_json_cannot_carry_is_refused(value):
    from starforge.errors import UsageError
    from starforge.experiment.overrides import Override

    with pytest.raises(UsageError, match="a mapping key that is not a string has no JSON form"):
        Override.parse(f"+new={value}")
    assert Override.parse("+new={a: 1}").value == {"a": 1}


@pytest.mark.parametrize("depth", [100_000, 150])
def test_a_deeply_nested_lock_or_trust_file_is_one_error_line(opsd, depth):
    """JSON nesting is bounded (100 levels) wherever forge reads JSON it did not just write."""
    deep = "[" * depth + "]" * depth
    opsd.lock.write_text('{"plugins": ' + deep + "}")
    line = _one_error(opsd.forge("lock", "--check", ok=False), 15)
    assert "nested deeper than 100 levels" in line
    opsd.lock.unlink()
    (opsd.home / "trust.json").write_text('{"owners": ' + deep + "}")
    line = _one_error(opsd.forge("trust", "list", ok=False), 9)
    assert "trust file" in line and "nested deeper than 100 levels" in line
