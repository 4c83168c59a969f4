"""``patch_targets``: a target string read, and resolved to the place it names in a module."""

from __future__ import annotations

import enum
import types

import pytest

from starforge.cluster.errors import PatchTargetError
from starforge.cluster.patch_targets import Target, module_not_found, parse_target, resolve


class Kind(str, enum.Enum):
    GRPO = "grpo"


def framework() -> types.ModuleType:
    mod = types.ModuleType("fw")

    class Trainer:
        def step(self):
            return 1

    mod.Trainer = Trainer
    mod.compute_advantages = lambda x: x
    mod.REGISTRY = {Kind.GRPO: "fn"}
    mod.PLAIN = {"ppo": "fn"}
    return mod


def test_an_attribute_a_method_and_a_registry_entry_resolve_to_their_owner():
    mod = framework()
    assert resolve(parse_target("fw:compute_advantages"), mod, create=False) == (mod, "compute_advantages", False, "fw")
    assert resolve(parse_target("fw:Trainer.step"), mod, create=False) == (mod.Trainer, "step", False, "fw:Trainer")
    # a registry keyed by a str enum: the entry is found by the enum's value, and named by its own key
    assert resolve(parse_target("fw:REGISTRY[grpo]"), mod, create=False) == (mod.REGISTRY, Kind.GRPO, True, "fw:REGISTRY")


def test_what_is_missing_is_named_with_the_closest_name():
    mod = framework()
    with pytest.raises(PatchTargetError, match=r"has no attribute 'Trainr' \(did you mean 'Trainer'\?\)") as err:
        resolve(parse_target("fw:Trainr.step"), mod, create=False)
    assert err.value.missing == "attribute"
    with pytest.raises(PatchTargetError, match=r"'fw:PLAIN' has no key 'ppp' \(did you mean 'ppo'\?\) \(keys: ppo\)"):
        resolve(parse_target("fw:PLAIN[ppp]"), mod, create=False)
    assert resolve(parse_target("fw:PLAIN[new]"), mod, create=True) == (mod.PLAIN, "new", True, "fw:PLAIN")
    with pytest.raises(PatchTargetError, match="not a registry mapping"):
        resolve(parse_target("fw:compute_advantages[x]"), mod, create=False)


def test_a_missing_target_module_is_told_apart_from_a_missing_import_inside_it():
    t = parse_target("fw.algos:f")
    assert module_not_found(t, ModuleNotFoundError("no fw", name="fw")).missing == "module"
    assert module_not_found(t, ModuleNotFoundError("no torch", name="torch")) is None


def test_a_target_prints_in_its_canonical_form():
    assert str(Target("m", ("REG",), "two words")) == "m:REG['two words']"
    assert str(parse_target(" m:REG['grpo'] ")) == "m:REG[grpo]"
