"""``starforge.cluster.plugins``: the runtime API a trainer calls, against this process's registry.

Each test gets a fresh registry (the one the launcher or the bootstrap fills in a job),
filled here the way they fill it: ``set_hyperparams``, ``register`` and the hooks.
"""

from __future__ import annotations

import pytest

from starforge.cluster import hyperparams_and_deferred as deferred
from starforge.cluster import plugins
from starforge.cluster.errors import InstallError, UsageError
from starforge.cluster.plugins import (
    ContextMismatchError,
    UnknownPluginError,
    hyperparams,
    install_deferred,
    load_environment,
    registered,
)


@pytest.fixture
def reg(monkeypatch):
    fresh = deferred._Registry()
    monkeypatch.setattr(deferred, "registry", fresh)
    monkeypatch.setattr(plugins, "registry", fresh)
    for name in ("FORGE_JOBSPEC", "FORGE_HYPERPARAMS"):
        monkeypatch.delenv(name, raising=False)
    fresh.booted = True  # filled "by the launcher" below
    deferred.set_hyperparams({"opsd.scale": 0.5, "nested": {"k": [1, 2]}})
    return fresh


class Recorder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list = []
        self.fail = fail

    def __call__(self, params, **ctx) -> None:
        self.calls.append((dict(params), ctx))
        if self.fail is not None:
            raise self.fail


def test_install_deferred_calls_install_with_the_hyperparams_and_the_context(reg):
    install = Recorder()
    deferred.register("opsd-patch", "alice/opsd-patch@1.2.0", install)
    tokenizer = object()
    install_deferred("opsd-patch", tokenizer=tokenizer, max_seq_len=4096)
    assert install.calls == [({"opsd.scale": 0.5, "nested": {"k": [1, 2]}}, {"tokenizer": tokenizer, "max_seq_len": 4096})]
    [status] = deferred.deferred_status()
    assert status["installed"] is True
    assert status["ctx_keys"] == ["max_seq_len", "tokenizer"]
    assert status["ref"] == "alice/opsd-patch@1.2.0"


def test_a_second_call_with_the_same_context_does_nothing(reg):
    install = Recorder()
    deferred.register("opsd-patch", "alice/opsd-patch@1.2.0", install)
    tokenizer = object()
    install_deferred("opsd-patch", tokenizer=tokenizer, max_seq_len=4096)
    install_deferred("opsd-patch", tokenizer=tokenizer, max_seq_len=4096)
    assert len(install.calls) == 1


class ElementWise:
    """Compares like an array: ``==`` gives no single bool."""

    def __eq__(self, other):
        return [True, True]


ARRAY = ElementWise()


@pytest.mark.parametrize("first, second", [
    ("tok", {"tokenizer": "other", "max_seq_len": 4096}),
    ("tok", {"max_seq_len": 4096}),
    ("tok", {"tokenizer": "tok", "max_seq_len": 4096, "extra": 1}),
    (ARRAY, {"tokenizer": ElementWise(), "max_seq_len": 4096}),  # no single bool: not the same context
])
def test_a_second_call_with_another_context_is_refused(reg, first, second):
    install = Recorder()
    deferred.register("opsd-patch", "alice/opsd-patch@1.2.0", install)
    install_deferred("opsd-patch", tokenizer=first, max_seq_len=4096)
    install_deferred("opsd-patch", tokenizer=first, max_seq_len=4096)  # the very same objects: nothing to do
    with pytest.raises(ContextMismatchError) as info:
        install_deferred("opsd-patch", **second)
    assert isinstance(info.value, UsageError) and isinstance(info.value, ValueError)
    assert info.value.message == (
        "deferred plugin 'opsd-patch' (alice/opsd-patch@1.2.0) is already installed with another context "
        "(keys ['max_seq_len', 'tokenizer']); a plugin is installed once per process"
    )
    assert info.value.exit_code == 2
    assert len(install.calls) == 1


def test_an_install_that_raises_is_an_install_error_naming_the_plugin(reg):
    install = Recorder(fail=ValueError("max_seq_len too small"))
    deferred.register("opsd-patch", "alice/opsd-patch@1.2.0", install)
    with pytest.raises(InstallError) as info:
        install_deferred("opsd-patch", max_seq_len=1)
    assert info.value.message == "alice/opsd-patch@1.2.0: install raised ValueError: max_seq_len too small"
    assert info.value.exit_code == 13
    assert isinstance(info.value.__cause__, ValueError)
    assert deferred.deferred_status()[0]["installed"] is False  # not installed: a later call tries again
    install.fail = None
    install_deferred("opsd-patch", max_seq_len=2)
    assert deferred.deferred_status()[0]["installed"] is True


def test_an_unknown_name_lists_what_is_registered(reg):
    deferred.register("opsd-patch", "alice/opsd-patch@1.2.0", Recorder())
    deferred.register("kl-patch", "bob/kl-patch@0.1.0", Recorder())
    with pytest.raises(UnknownPluginError) as info:
        install_deferred("alice/opsd-patch")
    assert isinstance(info.value, LookupError)
    assert info.value.message == "no deferred plugin named 'alice/opsd-patch' is registered (registered: opsd-patch, kl-patch)"
    assert "pass the manifest name" in info.value.hint


def test_disabled_plugins_say_so(reg):
    reg.disabled = True
    with pytest.raises(UnknownPluginError, match=r"registered: none: plugins are disabled in this process \(FORGE_DISABLE=1\)"):
        install_deferred("opsd-patch")


def test_a_plugin_still_waiting_for_its_target_is_activated_on_demand(reg):
    install = Recorder()
    asked = []

    def activate(name: str) -> bool:
        asked.append(name)
        if name != "waiting-patch":
            return False
        deferred.register(name, "alice/waiting-patch@1.0.0", install)
        return True

    reg.activate = activate
    reg.listing = lambda: ["waiting-patch"]
    assert registered() == ("waiting-patch",)
    install_deferred("waiting-patch", model="m")
    assert asked == ["waiting-patch"]
    assert install.calls[0][1] == {"model": "m"}
    with pytest.raises(UnknownPluginError, match=r"registered: waiting-patch\)"):
        install_deferred("never-there")
    assert asked == ["waiting-patch", "never-there"]


def test_registered_lists_the_waiting_ones_first_in_load_order(reg):
    deferred.register("b", "alice/b@1.0.0", Recorder())
    deferred.register("a", "alice/a@1.0.0", Recorder())
    assert registered() == ("b", "a")
    reg.listing = lambda: ["z", "a"]
    assert registered() == ("z", "a", "b")


def test_the_installed_hook_is_told_after_each_install(reg):
    told = []
    reg.installed = lambda: told.append(deferred.deferred_status()[0]["installed"])
    deferred.register("opsd-patch", "alice/opsd-patch@1.2.0", Recorder())
    install_deferred("opsd-patch")
    assert told == [True]


def test_hyperparams_are_a_read_only_copy_of_what_was_set(reg):
    source = {"grpo.lr": 1e-06, "grpo.group_size": 8}
    deferred.set_hyperparams(source)
    values = hyperparams()
    source["grpo.lr"] = 1.0  # the caller's dict is not what the job reads
    assert dict(values) == {"grpo.lr": 1e-06, "grpo.group_size": 8}
    assert hyperparams() is values
    with pytest.raises(TypeError):
        values["grpo.lr"] = 1.0  # type: ignore[index]


def test_nested_hyperparams_are_read_only_too_and_still_behave_as_json_values(reg):
    import copy
    import json
    import pickle

    deferred.set_hyperparams({"sched.milestones": [10, [20]], "sched.warmup": {"steps": 5, "ranges": [[1, 2]]}})
    values = hyperparams()
    milestones, warmup = values["sched.milestones"], values["sched.warmup"]
    for attempt in (
        lambda: milestones.append(1), lambda: milestones.__setitem__(0, 1), lambda: milestones.__delitem__(0),
        lambda: milestones.__iadd__([1]), lambda: milestones.sort(), lambda: milestones[1].append(1),
        lambda: warmup.__setitem__("steps", 0), lambda: warmup.update(steps=0), lambda: warmup.pop("steps"),
        lambda: warmup.setdefault("new", 1), lambda: warmup.__ior__({"steps": 0}), lambda: warmup["ranges"][0].extend([3]),
    ):
        with pytest.raises(TypeError, match="read-only"):
            attempt()
    # still the JSON values they were: equal to lists and dicts, a list and a dict, serializable
    assert milestones == [10, [20]] and warmup == {"steps": 5, "ranges": [[1, 2]]}
    assert isinstance(milestones, list) and isinstance(warmup, dict)
    assert json.loads(json.dumps(dict(values))) == {"sched.milestones": [10, [20]], "sched.warmup": {"steps": 5, "ranges": [[1, 2]]}}
    # a copy (or a pickle, as Ray sends it to a task) is an ordinary, mutable value
    for mine in (copy.deepcopy(warmup), pickle.loads(pickle.dumps(warmup))):
        mine["ranges"][0].append(3)
        assert type(mine) is dict and mine["ranges"] == [[1, 2, 3]]
    assert warmup == {"steps": 5, "ranges": [[1, 2]]}


def test_hyperparams_outside_a_job_come_from_the_environment_or_are_empty(reg, tmp_path, monkeypatch):
    reg.hyperparams = None
    assert dict(hyperparams()) == {}
    reg.hyperparams = None
    path = tmp_path / "hp.json"
    path.write_text('{"grpo.lr": 1e-06}')
    monkeypatch.setenv("FORGE_HYPERPARAMS", str(path))
    assert dict(hyperparams()) == {"grpo.lr": 1e-06}


def test_load_environment_outside_a_job_says_there_is_none(reg):
    with pytest.raises(UnknownPluginError) as info:
        load_environment("counting-env", tokenizer=None)
    assert info.value.message == (
        "no environment plugin named 'counting-env' in this job (environment plugins: none: this process is not part of a forge job)"
    )
    reg.environments["counting-env"] = factory = object()
    assert load_environment("counting-env") is factory  # once per process: the same object again
