"""PluginManifest validation: every §2 rule, with file, line, key and suggestion in the error."""

import pytest

from starforge.errors import ManifestError
from starforge.package_format.manifest import PluginManifest, canonical_version, check_name, type_matches
from starforge.package_format.yamlio import load_yaml

BASE = """\
schema: forge/plugin/v1
name: opsd-patch
version: 1.2.0
kind: algorithm
entrypoint: opsd_patch:install
"""


def parse(text: str, source: str = "p/plugin.yaml") -> PluginManifest:
    doc = load_yaml(text, source)
    return PluginManifest.from_mapping(doc.data, source=source, lines=doc.line)


def error_of(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as err:
        parse(text)
    return err.value


def test_minimal_manifest_defaults():
    m = parse(BASE)
    assert (m.name, m.version, m.kind, m.entrypoint, m.load) == ("opsd-patch", "1.2.0", "algorithm", "opsd_patch:install", "eager")
    assert (m.module, m.function) == ("opsd_patch", "install")
    assert m.targets == () and m.params == {} and m.requires.to_dict() == {}


def test_full_manifest_round_trips_to_dict():
    text = BASE + """\
load: deferred
targets: [nemo_rl.algorithms.grpo]
requires:
  core: ">=0.1,<1"
  python: ">=3.10"
  packages: {nemo-rl: ">=0.4"}
params:
  opsd.scale: {type: float, default: 1, description: "advantage multiplier"}
  opsd.lr: {type: float, default: 1e-6}
  opsd.flag: {type: str, default: no}
description: "Scale GRPO advantages"
"""
    m = parse(text)
    assert m.load == "deferred"
    assert m.targets == ("nemo_rl.algorithms.grpo",)
    assert m.requires.packages == {"nemo-rl": ">=0.4"}
    # An int default of a float param is stored as a float; YAML 1.2: 1e-6 is a float, no a string.
    assert m.param_defaults() == {"opsd.scale": 1.0, "opsd.lr": 1e-06, "opsd.flag": "no"}
    assert type(m.params["opsd.scale"].default) is float
    d = m.to_dict()
    assert d["requires"] == {"core": ">=0.1,<1", "python": ">=3.10", "packages": {"nemo-rl": ">=0.4"}}
    assert d["params"]["opsd.scale"] == {"type": "float", "default": 1.0, "description": "advantage multiplier"}
    assert PluginManifest.from_mapping(d) == m


def test_versions_are_stored_in_canonical_form():
    assert parse(BASE.replace("1.2.0", '"1.2"')).version == "1.2"
    assert parse(BASE.replace("1.2.0", "v1.2.0RC1")).version == "1.2.0rc1"
    assert parse(BASE.replace("1.2.0", "3")).version == "3"
    assert canonical_version("1.0.post1") == "1.0.post1"


@pytest.mark.parametrize(
    "edit, expected",
    [
        (("entrypoint: opsd_patch:install", "entry_point: opsd_patch:install"),
         "p/plugin.yaml:5: entry_point: unknown key 'entry_point' (did you mean 'entrypoint'?)"),
        (("schema: forge/plugin/v1", "schema: forge/plugin/v2"), "p/plugin.yaml:1: schema: expected 'forge/plugin/v1'"),
        (("name: opsd-patch", "name: Opsd_Patch"), "p/plugin.yaml:2: name: 'Opsd_Patch' is not a valid name"),
        (("name: opsd-patch", "name: opsd--patch"), "p/plugin.yaml:2: name: 'opsd--patch' is not a valid name"),
        (("version: 1.2.0", "version: 1.2"), "p/plugin.yaml:3: version: was read as the number 1.2; quote it exactly as intended"),
        (("version: 1.2.0", "version: 1.10"), "p/plugin.yaml:3: version: was read as the number 1.1; quote it exactly as intended"),
        (("version: 1.2.0", "version: 1!1.0"), "p/plugin.yaml:3: version: '1!1.0' has an epoch"),
        (("version: 1.2.0", "version: 1.0+local"), "p/plugin.yaml:3: version: '1.0+local' has a local part"),
        (("version: 1.2.0", "version: banana"), "p/plugin.yaml:3: version: 'banana' is not a PEP 440 version"),
        (("kind: algorithm", "kind: algorthm"), "p/plugin.yaml:4: kind: expected one of algorithm, environment, data-prep, got 'algorthm' (did you mean 'algorithm'?)"),
        (("entrypoint: opsd_patch:install", "entrypoint: opsd_patch.install"), "p/plugin.yaml:5: entrypoint: 'opsd_patch.install' is not 'dotted.module:function'"),
    ],
)
def test_bad_values_name_file_line_key_and_fix(edit, expected):
    assert str(error_of(BASE.replace(*edit))).startswith(expected)


def test_unknown_key_suggests_once_and_hints_the_valid_keys():
    err = error_of(BASE.replace("kind:", "knd:"))
    assert "(did you mean 'kind'?)" in err.message
    assert err.hint.startswith("valid keys: ") and "kind" in err.hint and "did you mean" not in err.hint


def test_missing_required_key_names_it():
    assert str(error_of(BASE.replace("kind: algorithm\n", ""))) == "p/plugin.yaml:1: missing required key 'kind'"


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("load: lazy\n", "p/plugin.yaml:6: load: expected one of eager, deferred, got 'lazy'"),
        ("targets: nemo_rl\n", "p/plugin.yaml:6: targets: expected a list of module names"),
        ("targets: [ok.mod, 'not a module']\n", "p/plugin.yaml:6: targets.1: 'not a module' is not a dotted module name"),
        ("requires:\n  core: banana\n", "p/plugin.yaml:7: requires.core: 'banana' is not a PEP 440 specifier set"),
        ("requires:\n  pyhton: '>=3.10'\n", "p/plugin.yaml:7: requires.pyhton: unknown key 'pyhton' (did you mean 'python'?)"),
        ("requires:\n  packages: [torch]\n", "p/plugin.yaml:7: requires.packages: expected a mapping"),
        ("params:\n  opsd.scale: {type: float, default: fast}\n", "p/plugin.yaml:7: params.opsd.scale.default: default 'fast' is not of type float"),
        ("params:\n  opsd.scale: {type: float, default: .nan}\n", "p/plugin.yaml:7: params.opsd.scale.default: default nan holds NaN or an infinity"),
        ("params:\n  opsd.ks: {type: list, default: [1, -.inf]}\n", "p/plugin.yaml:7: params.opsd.ks.default: default [1, -inf] holds NaN or an infinity"),
        ("params:\n  opsd.scale: {type: double}\n", "p/plugin.yaml:7: params.opsd.scale.type: expected one of float, int, bool, str, list, dict, got 'double'"),
        ("params:\n  opsd.scale: {typ: float}\n", "p/plugin.yaml:7: params.opsd.scale.typ: unknown key 'typ' (did you mean 'type'?)"),
        ("params:\n  opsd.flag: {type: int, default: true}\n", "p/plugin.yaml:7: params.opsd.flag.default: default True is not of type int"),
        ("description: [a]\n", "p/plugin.yaml:6: description: expected a string"),
    ],
)
def test_optional_sections_errors(extra, expected):
    assert str(error_of(BASE + extra)).startswith(expected)


def test_top_level_must_be_a_mapping():
    with pytest.raises(ManifestError, match="expected a mapping at the top level, got a list"):
        PluginManifest.from_mapping(["x"], source="p/plugin.yaml")


def test_without_lines_the_error_still_names_the_file():
    with pytest.raises(ManifestError, match=r"^plugin.yaml: missing required key 'schema'"):
        PluginManifest.from_mapping({})


def test_type_matches_int_for_float_but_never_bool():
    assert type_matches("float", 1) and type_matches("float", 1.5)
    assert not type_matches("float", True) and not type_matches("int", False)
    assert type_matches("bool", False)


def test_check_name_guards_paths():
    assert check_name("alice") == "alice"
    for bad in ("../x", "Alice", "a" * 65, "", "a_b", None):
        with pytest.raises(ManifestError):
            check_name(bad)


def test_a_version_read_as_a_number_is_not_guessed():
    err = error_of(BASE.replace("version: 1.2.0", "version: 1.10"))
    assert "'1.1'" not in str(err) and '"1.1"' not in str(err)
    assert err.hint == 'write the version as a string, e.g. version: "1.10"'


def test_param_choices_are_typed_and_round_trip():
    m = parse(BASE + "params:\n  trl.loss_type: {type: str, default: dr_grpo, choices: [dr_grpo, grpo, dapo]}\n"
              "  g.eps: {type: float, default: 1, choices: [1, 0.5]}\n")
    assert m.params["trl.loss_type"].choices == ("dr_grpo", "grpo", "dapo")
    assert m.params["g.eps"].choices == (1.0, 0.5)
    assert m.to_dict()["params"]["trl.loss_type"]["choices"] == ["dr_grpo", "grpo", "dapo"]
    assert "choices" not in parse(BASE + "params:\n  a.b: {type: int}\n").to_dict()["params"]["a.b"]


@pytest.mark.parametrize(
    "decl, expected",
    [
        ("{type: str, default: bnpo, choices: [grpo, dapo]}", "params.a.b.default: default 'bnpo' is not one of the choices ('grpo', 'dapo')"),
        ("{type: str, choices: []}", "params.a.b.choices: expected a non-empty list of str values, got a list"),
        ("{type: str, choices: grpo}", "params.a.b.choices: expected a non-empty list of str values, got a string"),
        ("{type: int, choices: [1, 2.5]}", "params.a.b.choices: choice 2.5 is not a finite int"),
        ("{type: float, choices: [0.1, .inf]}", "params.a.b.choices: choice inf is not a finite float"),
        ("{type: str, choices: [a, a]}", "params.a.b.choices: choice 'a' is listed twice"),
        ("{type: list, choices: [[1]]}", "params.a.b.choices: choices need a scalar type (float, int, bool, str), not list"),
    ],
)
def test_param_choices_errors(decl, expected):
    assert str(error_of(BASE + f"params:\n  a.b: {decl}\n")).startswith("p/plugin.yaml:7: " + expected)
