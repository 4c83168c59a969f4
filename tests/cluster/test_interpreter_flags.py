"""``in_process_form`` / ``apply_flags``: which ``python ...`` entrypoints run in the launcher's own interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

from starforge.cluster.interpreter_flags import apply_flags, in_process_form


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "-m", "pkg.train", "--lr", "1e-6"], ([], "pkg.train", None, ["--lr", "1e-6"])),
        (["python", "-mpkg.train"], ([], "pkg.train", None, [])),
        (["python", "train.py", "-u", "x"], ([], None, "train.py", ["-u", "x"])),
        (["python", "-u", "-B", "train.py"], ([("u", None), ("B", None)], None, "train.py", [])),
        (["python", "-uBm", "pkg"], ([("u", None), ("B", None)], "pkg", None, [])),
        (["python", "-W", "error::DeprecationWarning", "-m", "pkg", "a"],
         ([("W", "error::DeprecationWarning")], "pkg", None, ["a"])),
        (["python", "-Wignore", "t.py"], ([("W", "ignore")], None, "t.py", [])),
        (["python", "-X", "faulthandler", "-X", "tracemalloc=25", "-m", "pkg"],
         ([("X", "faulthandler"), ("X", "tracemalloc=25")], "pkg", None, [])),
        (["python", "-Xtracemalloc", "t.py"], ([("X", "tracemalloc")], None, "t.py", [])),
    ],
)
def test_forms_that_run_in_process(argv, expected):
    assert in_process_form(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["python"],  # an interactive interpreter
        ["python", "-u"],  # flags and nothing to run
        ["python", "-O", "-m", "pkg"],  # optimisation: only the real interpreter can honour it
        ["python", "-E", "t.py"],
        ["python", "-I", "t.py"],
        ["python", "-c", "print(1)"],
        ["python", "-", "x"],  # a script from stdin
        ["python", "--version"],
        ["python", "-X", "importtime", "-m", "pkg"],  # an -X option not honoured here
        ["python", "-X", "faulthandler=1", "-m", "pkg"],
        ["python", "-X", "tracemalloc=0", "-m", "pkg"],
        ["python", "-X", "tracemalloc=70000", "-m", "pkg"],
        ["python", "-X", "tracemalloc=ten", "-m", "pkg"],
        ["python", "-W"],  # -W without its argument
        ["python", "-m"],
        ["python", "-uO", "t.py"],  # one unsupported letter in a group
    ],
)
def test_forms_that_need_a_child_interpreter(argv):
    assert in_process_form(argv) is None


def test_B_stops_bytecode_writing(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    apply_flags([("B", None)])
    assert sys.dont_write_bytecode is True


def test_W_installs_the_filter_and_passes_it_on_to_children(monkeypatch):
    monkeypatch.setattr(sys, "warnoptions", list(sys.warnoptions))
    with warnings.catch_warnings():
        apply_flags([("W", "error::DeprecationWarning")])
        assert sys.warnoptions[-1] == "error::DeprecationWarning"
        with pytest.raises(DeprecationWarning):
            warnings.warn("old", DeprecationWarning)
        with pytest.warns(UserWarning):
            warnings.warn("only a user warning", UserWarning)  # not turned into an error


def test_u_and_X_options_take_effect_in_the_process():
    script = textwrap.dedent(
        """
        import faulthandler, sys, tracemalloc
        from starforge.cluster.interpreter_flags import apply_flags, in_process_form
        flags, module, script, args = in_process_form(["python", "-u", "-X", "faulthandler", "-X", "tracemalloc=7", "t.py"])
        apply_flags(flags)
        print("write_through", sys.stdout.write_through, sys.stderr.write_through)
        print("faulthandler", faulthandler.is_enabled())
        print("tracemalloc", tracemalloc.is_tracing(), tracemalloc.get_traceback_limit())
        print("xoptions", sorted(sys._xoptions.items()))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "write_through True True",
        "faulthandler True",
        "tracemalloc True 7",
        "xoptions [('faulthandler', True), ('tracemalloc', '7')]",
    ]
