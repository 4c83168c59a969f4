"""The YAML loader: YAML 1.2 core scalars, located errors, no aliases or duplicate keys."""

import math

import pytest

from starforge.errors import ManifestError
from starforge.package_format.yamlio import load_yaml, load_yaml_file, parse_scalar


@pytest.mark.parametrize(
    "text, expected",
    [
        ("lr: 1e-6", 1e-06),
        ("lr: 1.0e-6", 1e-06),
        ("lr: -2.5E+3", -2500.0),
        ("n: 8", 8),
        ("n: 0x1f", 31),
        ("n: 0o17", 15),
        ("n: 0755", 755),  # decimal in YAML 1.2 (octal in 1.1)
        ("x: .inf", math.inf),
        ("x: -.inf", -math.inf),
        ("flag: true", True),
        ("flag: False", False),
        ("v: null", None),
        ("v: ~", None),
        ("v:", None),
    ],
)
def test_core_schema_numbers_booleans_and_null(text, expected):
    value = load_yaml(text + "\n", "x.yaml").data
    ((_, got),) = value.items()
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("word", ["no", "yes", "on", "off", "y", "n", "NO", "12:30", "2024-01-02", "1_000", "010e", "+.5.5"])
def test_yaml_1_1_specials_stay_strings(word):
    doc = load_yaml(f"v: {word}\n", "x.yaml")
    assert doc.data == {"v": word}


def test_nan_is_a_float():
    assert math.isnan(load_yaml("x: .nan\n", "x.yaml").data["x"])


def test_quoted_scalars_are_strings():
    assert load_yaml("a: '1e-6'\nb: \"true\"\n", "x.yaml").data == {"a": "1e-6", "b": "true"}


def test_lines_of_nested_keys_and_list_items():
    doc = load_yaml("a: 1\nrequires:\n  core: '>=0.1'\ntargets:\n  - x\n  - y\n", "x.yaml")
    assert doc.line(("a",)) == 1
    assert doc.line(("requires", "core")) == 3
    assert doc.line(("targets", 1)) == 6
    assert doc.line(("missing",)) is None


def test_duplicate_key_names_both_lines():
    with pytest.raises(ManifestError) as err:
        load_yaml("name: a\nversion: 1\nname: b\n", "p/plugin.yaml")
    assert str(err.value) == "p/plugin.yaml:3: duplicate key 'name' (first at line 1)"


def test_alias_is_refused_with_its_line():
    with pytest.raises(ManifestError, match=r"^x.yaml:2: aliases \(\*a\) are not allowed"):
        load_yaml("base: &a 1\nother: *a\n", "x.yaml")


def test_merge_key_is_refused():
    with pytest.raises(ManifestError, match=r"^x.yaml:2: merge keys"):
        load_yaml("base: {a: 1}\n<<: {b: 2}\n", "x.yaml")


def test_non_core_tag_is_refused():
    with pytest.raises(ManifestError, match=r"^x.yaml:1: .*not allowed"):
        load_yaml("v: !!python/object:os.system ls\n", "x.yaml")


def test_syntax_error_names_file_and_line():
    with pytest.raises(ManifestError, match=r"^bad.yaml:2: not valid YAML"):
        load_yaml("a: [1, 2\nb: c: d\n", "bad.yaml")


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(ManifestError, match="no such file"):
        load_yaml_file(tmp_path / "absent.yaml")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_yaml_file(bad)


@pytest.mark.parametrize(
    "text, expected",
    [("0.5", 0.5), ("8", 8), ("true", True), ("null", None), ("[1, 2]", [1, 2]), ("no", "no"), ("", ""), ("hello world", "hello world")],
)
def test_parse_scalar_for_set(text, expected):
    got = parse_scalar(text)
    assert got == expected and type(got) is type(expected)


def test_a_capped_read_refuses_a_larger_file_and_reads_a_smaller_one_as_an_uncapped_read_does(tmp_path):
    crlf = tmp_path / "crlf.yaml"
    crlf.write_bytes(b"a: 1\r\nb:\r\n  c: x\ry: 2\r\n")
    capped, whole = load_yaml_file(crlf, max_bytes=64), load_yaml_file(crlf)
    assert (capped.data, capped.lines) == (whole.data, whole.lines)
    with pytest.raises(ManifestError, match=r"crlf.yaml: 23 bytes, more than the 22 bytes a test file may hold$"):
        load_yaml_file(crlf, max_bytes=22, kind="a test file")
