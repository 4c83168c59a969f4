"""starforge.patching against real modules written to a temp directory and imported."""

from __future__ import annotations

import importlib
import itertools
import json
import sys
import textwrap

import pytest

from starforge import patching
from starforge.errors import ForgeError, PatchError, PatchTargetError

_counter = itertools.count()

FRAMEWORK = """
def compute(x):
    return x + 1

def other(x):
    return x - 1

SCALE = 3

ESTIMATORS = {"grpo": compute, "dr-grpo": other}

class Trainer:
    def step(self, x):
        return x * 2

    @staticmethod
    def helper(x):
        return x + 100

    @classmethod
    def build(cls, x):
        return (cls.__name__, x)

class Child(Trainer):
    pass
"""


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A fresh uniquely named package ``<name>`` with a ``framework`` module, importable."""
    name = f"fakefw{next(_counter)}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "framework.py").write_text(textwrap.dedent(FRAMEWORK))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = len(patching.patches())
    yield name, root
    for p in reversed(patching.patches()[before:]):
        p.undo()
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def write(root, module: str, text: str) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(text))
    importlib.invalidate_caches()


# -- targets ---------------------------------------------------------------------------------


def test_target_forms_parse_and_keys_may_be_quoted_or_bare():
    assert patching.parse_target("a.b:f") == patching.Target("a.b", ("f",))
    assert patching.parse_target("a.b:Cls.meth") == patching.Target("a.b", ("Cls", "meth"))
    bare = patching.parse_target("a:REG[grpo]")
    assert bare == patching.parse_target("a:REG['grpo']") == patching.parse_target('a:REG["grpo"]')
    assert bare.key == "grpo" and str(bare) == "a:REG[grpo]"
    assert str(patching.parse_target("a:REG['two words']")) == "a:REG['two words']"


@pytest.mark.parametrize("bad", ["a.b", "a:", ":f", "a:f()", "a:REG[]", "a:REG[x][y]", "a b:f", "a:1f"])
def test_malformed_target_is_a_target_error(bad):
    with pytest.raises(PatchTargetError) as exc:
        patching.parse_target(bad)
    assert exc.value.missing == "target"
    assert isinstance(exc.value, ForgeError)


# -- wrapping and replacing ------------------------------------------------------------------


def test_wrap_passes_the_original_and_records_the_acting_plugin(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    calls = []

    def doubled(original, x):
        calls.append(x)
        return original(x) * 2

    with patching.acting_for("alice/opsd-patch@1.2.0"):
        p = patching.wrap(f"{name}.framework:compute", doubled)
    assert fw.compute(4) == 10 and calls == [4]
    assert fw.compute.__name__ == "compute" and fw.compute.__wrapped__ is not None
    assert p.applied and p.plugin == "alice/opsd-patch@1.2.0"
    assert patching.current_plugin() is None


def test_replace_puts_any_value_in_place(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    patching.replace(f"{name}.framework:SCALE", 7)
    patching.replace(f"{name}.framework:other", lambda x: "replaced")
    assert fw.SCALE == 7 and fw.other(1) == "replaced"


def test_patch_without_when_imported_imports_the_target_module(pkg):
    name, _ = pkg
    assert f"{name}.framework" not in sys.modules
    patching.replace(f"{name}.framework:SCALE", 9)
    assert sys.modules[f"{name}.framework"].SCALE == 9


def test_methods_staticmethods_and_classmethods_keep_their_kind(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    patching.wrap(f"{name}.framework:Trainer.step", lambda original, self, x: original(self, x) + 1)
    patching.wrap(f"{name}.framework:Trainer.helper", lambda original, x: -original(x))
    patching.wrap(f"{name}.framework:Trainer.build", lambda original, cls, x: original(cls, x * 10))
    t = fw.Trainer()
    assert t.step(5) == 11
    assert fw.Trainer.helper(1) == -101 and t.helper(1) == -101
    assert fw.Child.build(2) == ("Child", 20)


def test_inherited_method_is_patched_on_the_subclass_only_and_undo_removes_it(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    p = patching.wrap(f"{name}.framework:Child.step", lambda original, self, x: original(self, x) + 1000)
    assert fw.Child().step(1) == 1002
    assert fw.Trainer().step(1) == 2
    p.undo()
    assert "step" not in vars(fw.Child) and fw.Child().step(1) == 2


def test_registry_entry_is_patched_where_dispatch_happens(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    original = fw.compute
    patching.wrap(f"{name}.framework:ESTIMATORS[grpo]", lambda orig, x: orig(x) * 100)
    patching.wrap(f"{name}.framework:ESTIMATORS['dr-grpo']", lambda orig, x: orig(x) * 10)
    assert fw.ESTIMATORS["grpo"](1) == 200
    assert fw.ESTIMATORS["dr-grpo"](1) == 0 * 10
    # The module attribute is another binding of the same function: untouched.
    assert fw.compute is original and fw.compute(1) == 2


def test_patching_the_attribute_does_not_reach_a_registry_holding_the_function(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    patching.replace(f"{name}.framework:compute", lambda x: "patched")
    assert fw.compute(1) == "patched"
    assert fw.ESTIMATORS["grpo"](1) == 2  # why "module:REGISTRY[key]" targets exist


def test_create_adds_a_registry_entry_and_undo_removes_it(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    with pytest.raises(PatchTargetError):
        patching.replace(f"{name}.framework:ESTIMATORS[gspo]", abs)
    p = patching.replace(f"{name}.framework:ESTIMATORS[gspo]", abs, create=True)
    assert fw.ESTIMATORS["gspo"] is abs
    p.undo()
    assert "gspo" not in fw.ESTIMATORS
    with pytest.raises(PatchError):
        patching.wrap(f"{name}.framework:ESTIMATORS[gspo]", abs, create=True)


def test_wrapping_a_non_callable_is_refused_and_nothing_changes(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    with pytest.raises(PatchTargetError, match="not a callable"):
        patching.wrap(f"{name}.framework:SCALE", lambda original: original)
    assert fw.SCALE == 3
    with pytest.raises(TypeError):
        patching.wrap(f"{name}.framework:compute", 42)


# -- missing targets -------------------------------------------------------------------------


def test_missing_module_names_the_module(pkg):
    name, _ = pkg
    with pytest.raises(PatchTargetError) as exc:
        patching.wrap(f"{name}.algorithms.grpo:compute_advantages", lambda o, *a: o(*a))
    err = exc.value
    assert err.missing == "module" and err.exit_code == 13
    assert f"no module named '{name}.algorithms'" in str(err)
    assert patching.records()[-1]["status"] == "failed"


def test_missing_attribute_names_it_and_suggests_the_closest(pkg):
    name, _ = pkg
    with pytest.raises(PatchTargetError) as exc:
        patching.wrap(f"{name}.framework:comptue", lambda o, *a: o(*a))
    assert exc.value.missing == "attribute"
    assert str(exc.value) == (
        f"patch target '{name}.framework:comptue' not found: module '{name}.framework' "
        "has no attribute 'comptue' (did you mean 'compute'?)"
    )


def test_missing_class_and_method_are_named(pkg):
    name, _ = pkg
    with pytest.raises(PatchTargetError, match=f"module '{name}.framework' has no attribute 'Trainr'"):
        patching.wrap(f"{name}.framework:Trainr.step", lambda o, *a: o(*a))
    with pytest.raises(PatchTargetError, match=f"class '{name}.framework:Trainer' has no attribute 'stp'"):
        patching.wrap(f"{name}.framework:Trainer.stp", lambda o, *a: o(*a))


def test_missing_registry_key_lists_the_keys(pkg):
    name, _ = pkg
    with pytest.raises(PatchTargetError) as exc:
        patching.wrap(f"{name}.framework:ESTIMATORS[grp]", lambda o, *a: o(*a))
    assert exc.value.missing == "key"
    assert "has no key 'grp' (did you mean 'grpo'?) (keys: dr-grpo, grpo)" in str(exc.value)


def test_registry_target_that_is_not_a_mapping_is_refused(pkg):
    name, _ = pkg
    with pytest.raises(PatchTargetError, match="is int, not a registry mapping"):
        patching.wrap(f"{name}.framework:SCALE[x]", lambda o, *a: o(*a))


def test_a_read_only_target_is_a_target_error_and_recorded_as_failed():
    with pytest.raises(PatchTargetError, match="cannot patch 'builtins:int.bit_length'"):
        patching.wrap("builtins:int.bit_length", lambda original, self: 0)
    assert (1).bit_length() == 1
    assert patching.records()[-1]["status"] == "failed"


# -- idempotency and stacking ----------------------------------------------------------------


def _install_scale(target: str, scale: float) -> patching.Patch:
    """What a plugin's install looks like: a closure made anew on every call."""

    def scaled(original, x):
        return original(x) * scale

    return patching.wrap(target, scaled)


def test_running_the_same_install_twice_wraps_once(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:compute"
    with patching.acting_for("alice/opsd-patch@1.2.0"):
        first = _install_scale(target, 2)
        second = _install_scale(target, 2)
    assert first is second
    assert fw.compute(1) == 4  # (1 + 1) * 2, not * 4
    mine = [r for r in patching.records() if r["target"] == target]
    assert len(mine) == 1 and mine[0]["reinstalled"] == 1


def test_a_rerun_with_new_params_takes_the_same_layer(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:compute"
    with patching.acting_for("alice/opsd-patch@1.2.0"):
        _install_scale(target, 2)
        _install_scale(target, 5)
    assert fw.compute(1) == 10


def test_a_partial_made_anew_by_a_rerun_is_the_same_patch(pkg):
    import functools

    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")

    def scaled(original, x, *, scale):
        return original(x) * scale

    patching.wrap(f"{name}.framework:compute", functools.partial(scaled, scale=2))
    patching.wrap(f"{name}.framework:compute", functools.partial(scaled, scale=3))
    assert fw.compute(1) == 6


def test_same_function_from_two_plugins_stacks(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:compute"
    with patching.acting_for("alice/a@1.0.0"):
        _install_scale(target, 2)
    with patching.acting_for("bob/b@1.0.0"):
        _install_scale(target, 2)
    assert fw.compute(1) == 8


def test_patches_stack_in_load_order_and_undo_of_a_middle_layer_keeps_the_rest(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:compute"
    trace = []

    def plugin_a(original, x):
        trace.append("a")
        return original(x) * 10

    def plugin_b(original, x):
        trace.append("b")
        return original(x) + 5

    with patching.acting_for("alice/a@1.0.0"):
        a = patching.wrap(target, plugin_a)
    with patching.acting_for("bob/b@1.0.0"):
        b = patching.wrap(target, plugin_b)
    assert fw.compute(1) == (1 + 1) * 10 + 5
    assert trace == ["b", "a"]  # B wraps A's result: B runs first, calls A
    assert (a.layer, b.layer) == (0, 1)
    a.undo()
    assert fw.compute(1) == 2 + 5 and b.layer == 0
    b.undo()
    assert fw.compute(1) == 2


def test_a_replacement_shadows_earlier_layers_and_later_wraps_stack_on_it(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:compute"
    patching.wrap(target, lambda original, x: original(x) * 10)
    patching.replace(target, lambda x: x)
    patching.wrap(target, lambda original, x: original(x) - 1)
    assert fw.compute(7) == 6


# -- aliases ---------------------------------------------------------------------------------


def test_from_import_copies_are_rebound_and_recorded(pkg):
    name, root = pkg
    write(root, "trainer", f"from {name}.framework import compute\nfrom {name}.framework import compute as c2\n")
    fw = importlib.import_module(f"{name}.framework")
    trainer = importlib.import_module(f"{name}.trainer")
    original = fw.compute
    p = patching.wrap(f"{name}.framework:compute", lambda o, x: o(x) * 3)
    assert trainer.compute(1) == 6 and trainer.c2 is fw.compute
    assert p.aliases == [f"{name}.trainer.c2", f"{name}.trainer.compute"]
    assert patching.records()[-1]["aliases"] == p.aliases
    # A second layer follows the aliases too; undo brings everything back.
    q = patching.wrap(f"{name}.framework:compute", lambda o, x: o(x) + 1)
    assert trainer.compute(1) == 7
    q.undo()
    p.undo()
    assert trainer.compute is original and trainer.c2 is original and fw.compute is original


def test_alias_rebinding_can_be_turned_off(pkg):
    name, root = pkg
    write(root, "trainer", f"from {name}.framework import compute\n")
    trainer = importlib.import_module(f"{name}.trainer")
    p = patching.wrap(f"{name}.framework:compute", lambda o, x: o(x) * 3, rebind_aliases=False)
    assert trainer.compute(1) == 2 and p.aliases == []


def test_the_wrappers_own_module_keeps_its_reference_to_the_original(pkg):
    name, root = pkg
    write(root, "plugin", f"""
        from {name}.framework import compute as unpatched

        def louder(original, x):
            return original(x) * 2

        def direct(x):
            return unpatched(x)
    """)
    fw = importlib.import_module(f"{name}.framework")
    plugin = importlib.import_module(f"{name}.plugin")
    patching.wrap(f"{name}.framework:compute", plugin.louder)
    assert fw.compute(1) == 4 and plugin.direct(1) == 2  # no accidental recursion


def test_constants_are_not_rebound_by_identity(pkg):
    name, root = pkg
    write(root, "unrelated", "LIMIT = 3\n")
    unrelated = importlib.import_module(f"{name}.unrelated")
    p = patching.replace(f"{name}.framework:SCALE", 4)
    assert unrelated.LIMIT == 3 and p.aliases == []


# -- waiting for an import -------------------------------------------------------------------


def test_when_imported_waits_for_the_module_without_importing_it(pkg):
    name, root = pkg
    write(root, "late", "def f(x):\n    return x + 1\n")
    write(root, "user", f"from {name}.late import f\n")
    meta_path = list(sys.meta_path)
    with patching.acting_for("alice/late@1.0.0"):
        p = patching.wrap(f"{name}.late:f", lambda o, x: o(x) * 100, when_imported=True)
    assert p.status == "pending" and f"{name}.late" not in sys.modules
    assert patching.records()[-1]["status"] == "pending"
    user = importlib.import_module(f"{name}.user")  # imports late, which applies the patch
    assert user.f(1) == 200 and sys.modules[f"{name}.late"].f(1) == 200
    assert p.status == "applied"
    late = sys.modules[f"{name}.late"]
    assert type(late.__loader__).__name__ == "SourceFileLoader"
    assert late.__spec__.loader is late.__loader__
    assert sys.meta_path == meta_path


def test_when_imported_applies_at_once_when_already_imported(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    p = patching.wrap(f"{name}.framework:compute", lambda o, x: -o(x), when_imported=True)
    assert p.applied and fw.compute(1) == -2


def test_when_imported_from_a_post_import_hook_applies_at_once(pkg):
    """The launcher installs a plugin right after its target module ran, still inside the import."""
    name, root = pkg
    write(root, "hooked", f"""
        def f(x):
            return x + 1

        from starforge import patching
        patching.wrap("{name}.hooked:f", lambda original, x: original(x) * 5, when_imported=True)
    """)
    assert importlib.import_module(f"{name}.hooked").f(1) == 10
    assert patching.records()[-1]["status"] == "applied"


class _OtherPostImportHook:
    """Another meta-path finder that wraps loaders to run code after an import, as launchers do."""

    def __init__(self, watched: str) -> None:
        self.watched = watched
        self.seen: list = []
        self.busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.watched or self.busy:
            return None
        self.busy = True
        try:
            spec = next(s for f in sys.meta_path if f is not self and hasattr(f, "find_spec")
                        for s in [f.find_spec(fullname, path, target)] if s is not None)
        finally:
            self.busy = False
        hook, real = self, spec.loader

        class Loader:
            def create_module(self, spec):
                return None

            def exec_module(self, module):
                module.__loader__ = module.__spec__.loader = real
                real.exec_module(module)
                hook.seen.append(module.__name__)

        spec.loader = Loader()
        return spec


@pytest.mark.parametrize("other_first", [True, False], ids=["other-hook-first", "patching-hook-first"])
def test_waiting_patches_compose_with_another_post_import_hook(pkg, other_first):
    name, root = pkg
    write(root, "late", "def f(x):\n    return x + 1\n")
    other = _OtherPostImportHook(f"{name}.late")
    if not other_first:
        sys.meta_path.insert(0, other)
    p = patching.wrap(f"{name}.late:f", lambda o, x: o(x) * 3, when_imported=True)
    if other_first:
        sys.meta_path.insert(0, other)
    try:
        late = importlib.import_module(f"{name}.late")
    finally:
        sys.meta_path.remove(other)
    assert late.f(1) == 6 and p.status == "applied"
    assert other.seen == [f"{name}.late"]
    assert type(late.__loader__).__name__ == "SourceFileLoader"
    assert late.__spec__.loader is late.__loader__


def test_aliases_of_a_submodule_function_reached_through_its_package(pkg):
    name, root = pkg
    (root / "__init__.py").write_text("from . import framework\n")
    write(root, "trainer", f"from {name}.framework import compute\n")
    trainer = importlib.import_module(f"{name}.trainer")
    p = patching.wrap(f"{name}:framework.compute", lambda o, x: o(x) * 3)
    assert trainer.compute(1) == 6 and p.aliases == [f"{name}.trainer.compute"]


def test_a_missing_attribute_fails_the_import_of_the_deferred_target(pkg):
    name, root = pkg
    write(root, "late", "def f(x):\n    return x\n")
    p = patching.wrap(f"{name}.late:g", lambda o, x: o(x), when_imported=True)
    with pytest.raises(PatchTargetError, match=f"module '{name}.late' has no attribute 'g'"):
        importlib.import_module(f"{name}.late")
    assert p.status == "failed" and f"{name}.late" not in sys.modules


def test_undoing_a_pending_patch_means_it_never_applies(pkg):
    name, root = pkg
    write(root, "late", "def f(x):\n    return x\n")
    meta_path = list(sys.meta_path)
    p = patching.wrap(f"{name}.late:f", lambda o, x: o(x) + 1, when_imported=True)
    p.undo()
    assert sys.meta_path == meta_path
    assert importlib.import_module(f"{name}.late").f(1) == 1
    assert p.status == "undone"


# -- undo and records ------------------------------------------------------------------------


def test_undo_restores_the_very_same_objects_and_is_idempotent(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    compute, entry, step = fw.compute, fw.ESTIMATORS["grpo"], vars(fw.Trainer)["helper"]
    ps = [
        patching.wrap(f"{name}.framework:compute", lambda o, x: o(x)),
        patching.wrap(f"{name}.framework:ESTIMATORS[grpo]", lambda o, x: o(x)),
        patching.wrap(f"{name}.framework:Trainer.helper", lambda o, x: o(x)),
    ]
    for p in ps:
        p.undo()
        p.undo()
    assert fw.compute is compute and fw.ESTIMATORS["grpo"] is entry and vars(fw.Trainer)["helper"] is step
    assert [p.status for p in ps] == ["undone"] * 3


def test_undo_all_restores_in_reverse_order(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    original = fw.compute
    patching.wrap(f"{name}.framework:compute", lambda o, x: o(x) * 2)
    patching.wrap(f"{name}.framework:compute", lambda o, x: o(x) + 2)
    patching.replace(f"{name}.framework:SCALE", 0)
    patching.undo_all()
    assert fw.compute is original and fw.SCALE == 3
    assert all(r["status"] in ("undone", "failed") for r in patching.records())


def test_a_direct_assignment_over_a_patch_is_reported_not_silently_lost(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    with patching.acting_for("alice/a@1.0.0"):
        p = patching.wrap(f"{name}.framework:compute", lambda o, x: o(x))
    ours = fw.compute
    fw.compute = lambda x: x  # a plain assignment, bypassing patching
    with pytest.raises(PatchError, match="reassigned outside starforge.patching after alice/a@1.0.0"):
        patching.wrap(f"{name}.framework:compute", lambda o, x: o(x) * 2)
    with pytest.raises(PatchError):
        p.undo()
    fw.compute = ours  # put the patch back so the fixture can undo it


def test_records_are_json_and_say_what_happened(pkg):
    name, root = pkg
    write(root, "trainer", f"from {name}.framework import compute\n")
    importlib.import_module(f"{name}.trainer")
    before = len(patching.records())
    with patching.acting_for("alice/opsd-patch@1.2.0"):
        patching.wrap(f"{name}.framework:compute", _record_wrapper)
        patching.wrap(f"{name}.never:f", _record_wrapper, when_imported=True)
    recs = json.loads(json.dumps(patching.records()))[before:]
    applied, pending = recs
    assert applied["target"] == f"{name}.framework:compute"
    assert applied["plugin"] == "alice/opsd-patch@1.2.0"
    assert applied["mode"] == "wrap" and applied["status"] == "applied" and applied["layer"] == 0
    assert applied["function"] == f"{__name__}._record_wrapper"
    assert applied["aliases"] == [f"{name}.trainer.compute"]
    assert applied["applied_at"].endswith("Z") and applied["registered_at"] <= applied["applied_at"]
    assert pending["status"] == "pending" and pending["applied_at"] is None and pending["when_imported"] is True


def _record_wrapper(original, x):
    return original(x)


def test_patching_module_imports_only_the_standard_library(tmp_path):
    import subprocess

    code = (
        "import sys; before = set(sys.modules); import starforge.patching; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(m for m in new if m not in sys.stdlib_module_names))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "['starforge']"


# -- a replace hiding other plugins' patches -------------------------------------------------


def test_a_replace_records_the_other_plugins_patches_it_hides(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:ESTIMATORS[grpo]"

    def scaled(original, x):
        return original(x) * 2

    with patching.acting_for("alice/opsd-patch@1.2.0"):
        opsd = patching.wrap(target, scaled)
    with patching.acting_for("bob/dr-grpo@2.0.0"):
        dr = patching.replace(target, lambda x: -x)
        own = patching.wrap(target, scaled)  # stacks on dr-grpo's own replacement: hides nothing
    with patching.acting_for("carol/other@1.0.0"):
        last = patching.replace(target, lambda x: 0)
    assert fw.ESTIMATORS["grpo"](3) == 0
    assert opsd.hides == [] and own.hides == []
    assert dr.hides == [{"plugin": "alice/opsd-patch@1.2.0", "mode": "wrap", "function": opsd.record()["function"]}]
    # opsd-patch's wrap was hidden already: only what the replace newly hides is named
    assert [(h["plugin"], h["mode"]) for h in last.hides] == [("bob/dr-grpo@2.0.0", "replace"), ("bob/dr-grpo@2.0.0", "wrap")]
    mine = [r for r in patching.records() if r["target"] == target]
    assert [len(r["hides"]) for r in mine] == [0, 1, 0, 2]


def test_a_wrap_over_a_replace_and_a_plugin_replacing_its_own_wrap_hide_nothing(pkg):
    name, _ = pkg
    fw = importlib.import_module(f"{name}.framework")
    target = f"{name}.framework:compute"
    with patching.acting_for("bob/dr-grpo@2.0.0"):
        first = patching.replace(target, lambda x: 10 * x)
    with patching.acting_for("alice/opsd-patch@1.2.0"):
        on_top = patching.wrap(target, lambda original, x: original(x) + 1)
        patching.wrap(f"{name}.framework:other", lambda original, x: original(x))
        mine = patching.replace(f"{name}.framework:other", lambda x: x)
    assert fw.compute(2) == 21
    assert first.hides == on_top.hides == mine.hides == []


def test_a_replace_waiting_for_its_module_counts_the_patches_waiting_before_it(pkg):
    name, root = pkg
    write(root, "later", "def f(x):\n    return x\n")
    target = f"{name}.later:f"
    with patching.acting_for("alice/opsd-patch@1.2.0"):
        patching.wrap(target, lambda original, x: original(x) * 2, when_imported=True)
    with patching.acting_for("bob/dr-grpo@2.0.0"):
        dr = patching.replace(target, lambda x: -x, when_imported=True)
    assert dr.status == "pending"
    assert [h["plugin"] for h in dr.hides] == ["alice/opsd-patch@1.2.0"]
    later = importlib.import_module(f"{name}.later")
    assert later.f(3) == -3
