"""--set typing: declared params first, then the config value's type; unknown keys need '+'."""

import pytest

from starforge.errors import ManifestError, UsageError
from starforge.experiment.overrides import build_hyperparams, declared_params

DECLARED = {"opsd.scale": {"type": "float", "default": 1.0}, "clip.on": {"type": "bool", "default": False}}
CONFIG = {"grpo.group_size": 8, "grpo.lr": 1e-6, "run.tag": "base", "task.target": [1, 2, 3], "opt.seed": None}


def hp(*sets, config=CONFIG):
    return build_hyperparams(DECLARED, config, sets)


def test_order_defaults_then_config_then_set():
    assert hp() == {"opsd.scale": 1.0, "clip.on": False, **CONFIG}
    assert hp(config={"opsd.scale": 2.0})["opsd.scale"] == 2.0
    assert hp("opsd.scale=0.5", config={"opsd.scale": 2.0})["opsd.scale"] == 0.5


def test_values_are_yaml_core_scalars_typed_against_the_declaration_or_config():
    got = hp("opsd.scale=1", "clip.on=true", "grpo.group_size=16", "grpo.lr=1e-5", "task.target=[0,1]", "opt.seed=7")
    assert got["opsd.scale"] == 1.0 and isinstance(got["opsd.scale"], float)  # an int is accepted for a float
    assert got["clip.on"] is True
    assert got["grpo.group_size"] == 16
    assert got["grpo.lr"] == 1e-5
    assert got["task.target"] == [0, 1]
    assert got["opt.seed"] == 7  # a null config value takes anything


def test_a_number_for_a_string_key_is_the_text_written():
    assert hp("run.tag=2024")["run.tag"] == "2024"


@pytest.mark.parametrize(
    "setting, message",
    [
        ("grpo.group_size=abc", r"'grpo.group_size' is an integer in config \(8\), got a string 'abc'"),
        ("grpo.group_size=1.5", r"'grpo.group_size' is an integer in config \(8\), got a float 1.5"),
        ("opsd.scale=true", r"'opsd.scale' is declared as float, got a boolean True"),
        ("opsd.scale=null", r"'opsd.scale' is declared as float, got null"),
        ("clip.on=1", r"'clip.on' is declared as bool, got an integer 1"),
        ("opsd.scael=0.5", r"unknown key 'opsd.scael' \(closest: opsd.scale\)"),
        ("nonsense", r"expected KEY=VALUE"),
        ("bad key=1", r"'bad key' is not a dotted key"),
        ("grpo.lr=.nan", r"--set grpo.lr=\.nan: \.nan is not a finite number"),
        ("opsd.scale=.inf", r"--set opsd.scale=\.inf: \.inf is not a finite number"),
        ("+new.key=[1, -.Inf]", r"--set \+new.key=\[1, -\.Inf\]: -\.inf is not a finite number"),
        ("opsd.scale=1e400", r"--set opsd.scale=1e400: 1e400 is beyond the float range \(it would read as infinity\)$"),
        ("+new.key=[1, -2E999]", r"--set \+new.key=\[1, -2E999\]: -2E999 is beyond the float range"),
    ],
)
def test_bad_overrides(setting, message):
    with pytest.raises(UsageError, match=message):
        hp(setting)


def test_plus_adds_a_new_key_as_parsed():
    assert hp("+new.key=1")["new.key"] == 1
    assert hp("+new.list=[a, b]")["new.list"] == ["a", "b"]


def test_unknown_key_hint_says_how_to_add_it():
    with pytest.raises(UsageError) as exc:
        hp("brand.new=3")
    assert exc.value.hint.endswith("write --set +brand.new=...")


def test_config_value_must_fit_a_declared_param():
    with pytest.raises(ManifestError, match=r"forge.yaml:9: config key 'opsd.scale' is a string 'big', but the plugin declares it as float") as exc:
        build_hyperparams(DECLARED, {"opsd.scale": "big"}, (), {"opsd.scale": "forge.yaml:9"})
    assert exc.value.hint == "write a float there (e.g. 'scale: 0.5' under opsd), or remove it to use the plugin's default"


def test_two_plugins_declaring_one_key_with_different_types_is_refused():
    with pytest.raises(ManifestError, match="declared as float by a/x@1.0.0 and as int by b/y@1.0.0"):
        declared_params([("a/x@1.0.0", {"k": {"type": "float"}}), ("b/y@1.0.0", {"k": {"type": "int"}})])
    merged = declared_params([("a/x@1.0.0", {"k": {"type": "int", "default": 1}}), ("b/y@1.0.0", {"k": {"type": "int", "default": 2}})])
    assert merged == {"k": {"type": "int", "default": 1}}


CHOICES = {"trl.loss_type": {"type": "str", "default": "dr_grpo", "choices": ["dr_grpo", "grpo"]},
           "g.level": {"type": "int", "default": 1, "choices": [1, 2]}}


def test_set_outside_the_declared_choices_is_refused_naming_them():
    assert build_hyperparams(CHOICES, {}, ["trl.loss_type=grpo", "g.level=2"]) == {"trl.loss_type": "grpo", "g.level": 2}
    with pytest.raises(UsageError) as exc:
        build_hyperparams(CHOICES, {}, ["trl.loss_type=dapo"])
    assert str(exc.value) == "--set trl.loss_type=dapo: 'trl.loss_type' must be one of dr_grpo, grpo, got 'dapo'"
    assert exc.value.hint == "example: --set trl.loss_type=dr_grpo"
    with pytest.raises(UsageError, match="'g.level' must be one of 1, 2, got 3"):
        build_hyperparams(CHOICES, {}, ["g.level=3"])
    with pytest.raises(UsageError, match="'g.flag' must be one of false, got True"):
        build_hyperparams({"g.flag": {"type": "bool", "choices": [False]}}, {}, ["g.flag=true"])
    with pytest.raises(ManifestError, match="forge.yaml:4: config key 'trl.loss_type' is 'bnpo', not one of the plugin's choices: dr_grpo, grpo"):
        build_hyperparams(CHOICES, {"trl.loss_type": "bnpo"}, (), {"trl.loss_type": "forge.yaml:4"})


def test_a_new_key_is_a_value_or_a_group_never_both_as_in_config():
    # forge.yaml refuses `grpo: 1` beside `grpo.lr`; a new key set beside the known ones follows the same rule
    with pytest.raises(UsageError, match=r"^--set \+grpo=1: 'grpo' is both a value and a group \('grpo.group_size'\)$"):
        hp("+grpo=1")
    with pytest.raises(UsageError, match=r"^--set \+grpo.lr.warmup=3: 'grpo.lr.warmup' is inside 'grpo.lr', which is already a value$"):
        hp("+grpo.lr.warmup=3")
    with pytest.raises(UsageError, match=r"'opsd' is both a value and a group \('opsd.scale'\)"):
        hp("+opsd=2")  # a declared param counts as a known key
    with pytest.raises(UsageError, match=r"'sweep.name.x' is inside 'sweep.name'"):
        hp("+sweep.name=a", "+sweep.name.x=b")  # and so does a key an earlier --set added
    assert hp("+grpo.seed=7", "+sweep.name=a", "+sweep.id=2")["sweep.id"] == 2  # beside known keys, inside a group: fine
