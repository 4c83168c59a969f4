"""forge plugin check: manifest, entrypoint, syntax floor, shadowing names, imports, files."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.cli import run_cli

from starforge.authoring import checks, syntax
from starforge.authoring.checks import check_plugin, load_manifest, require_valid, top_level_names
from starforge.errors import CheckError

MANIFEST = """\
schema: forge/plugin/v1
name: opsd-patch
version: 1.2.0
kind: algorithm
entrypoint: opsd_patch:install
"""

EAGER = "def install(params):\n    return None\n"
DEFERRED = "def install(params, **ctx):\n    return None\n"


def make_plugin(root: Path, manifest: str = MANIFEST, files: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(manifest)
    for rel, text in ({"opsd_patch.py": EAGER} if files is None else files).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def codes(findings):
    return [(f.code, f.path, f.line) for f in findings]


# -- a good plugin ------------------------------------------------------------------------

def test_valid_plugin_passes_with_digest_and_top_level(tmp_path, capsys):
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": EAGER, "README.md": "hi\n"})
    report = check_plugin(root)
    assert report.ok and report.errors == [] and report.warnings == []
    assert report.files == ["README.md", "opsd_patch.py", "plugin.yaml"]
    assert report.top_level == ("opsd_patch",)
    assert report.digest.startswith("sf1:") and len(report.digest) == 68
    code, out, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == 0, err
    assert "ok: opsd-patch 1.2.0 (algorithm, eager); 3 files; top-level: opsd_patch" in out
    assert report.digest in out


def test_yaml_1_2_scalars_in_params(tmp_path):
    root = make_plugin(tmp_path / "p", MANIFEST + "params:\n  opsd.lr: {type: float, default: 1e-6}\n  opsd.flag: {type: str, default: no}\n")
    m = load_manifest(root)
    assert m.param_defaults() == {"opsd.lr": 1e-06, "opsd.flag": "no"}
    assert type(m.params["opsd.lr"].default) is float
    assert check_plugin(root).ok


# -- manifest errors through the CLI --------------------------------------------------------

@pytest.mark.parametrize(
    "manifest, line, expected",
    [
        (MANIFEST.replace("entrypoint:", "entry_point:"), 5, "unknown key 'entry_point' (did you mean 'entrypoint'?)"),
        (MANIFEST.replace("kind: algorithm", "kind: algorithms"), 4, "got 'algorithms' (did you mean 'algorithm'?)"),
        (MANIFEST.replace("version: 1.2.0", "version: 1.2"), 3, "version: was read as the number 1.2; quote it exactly as intended"),
        (MANIFEST + "name: other\n", 6, "duplicate key 'name' (first at line 2)"),
        (MANIFEST + "load: eagerly\n", 6, "got 'eagerly' (did you mean 'eager'?)"),
        (MANIFEST + "requires:\n  pyhton: '>=3.10'\n", 7, "unknown key 'pyhton' (did you mean 'python'?)"),
        (MANIFEST + "params:\n  opsd.scale: {type: flaot}\n", 7, "got 'flaot' (did you mean 'float'?)"),
        (MANIFEST + "x: &a 1\ny: *a\n", 7, "aliases (*a) are not allowed"),
        (MANIFEST + "targets: [a, [b]\n", 7, "not valid YAML"),
    ],
)
def test_manifest_errors_show_file_line_and_suggestion(tmp_path, capsys, manifest, line, expected):
    root = make_plugin(tmp_path / "p", manifest)
    code, out, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == CheckError.exit_code
    assert "Traceback" not in err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {root / 'plugin.yaml'}:{line}: ")
    assert expected in first and first.endswith("[manifest]")
    assert err.splitlines()[-2:] == [f"error: {root}: 1 check failed", "hint: fix the errors above and run 'forge plugin check' again"]


def test_missing_manifest_is_one_error_with_a_hint(tmp_path, capsys):
    root = tmp_path / "p"
    root.mkdir()
    (root / "opsd_patch.py").write_text(EAGER)
    code, _, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == CheckError.exit_code and "Traceback" not in err
    assert f"error: {root / 'plugin.yaml'}: no such file [manifest]" in err
    assert "forge plugin init NAME" in err


# -- shadowing names ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "rel, origin, what",
    [
        ("types.py", "types.py", "standard-library"),
        ("json.py", "json.py", "standard-library"),
        ("tomllib.py", "tomllib.py", "standard-library"),
        ("distutils/__init__.py", "distutils/", "standard-library"),
        ("ray/__init__.py", "ray/", "training-stack"),
        ("torch.py", "torch.py", "training-stack"),
        ("numpy/data.txt", "numpy/", "training-stack"),
        ("starforge.py", "starforge.py", "reserved"),
        ("forge_plugins/x.py", "forge_plugins/", "reserved"),
        ("sitecustomize.py", "sitecustomize.py", "reserved"),
        ("packaging/__init__.py", "packaging/", "reserved"),
    ],
)
def test_top_level_names_shadowing_real_modules_are_refused(tmp_path, rel, origin, what):
    # requires.python >=3.10: tomllib does not exist in 3.10 but does in every later Python.
    manifest = MANIFEST + "requires:\n  python: '>=3.10'\n"
    root = make_plugin(tmp_path / "p", manifest, {"opsd_patch.py": EAGER, rel: "x = 1\n"})
    report = check_plugin(root)
    assert [(f.code, f.path) for f in report.errors] == [("shadowing", origin)]
    name = origin.rstrip("/").removesuffix(".py")
    assert f"'{name}'" in report.errors[0].message and what in report.errors[0].message
    assert report.errors[0].hint.startswith("name modules after the plugin ('opsd_patch')")


def test_stdlib_list_is_the_union_of_3_10_to_3_14():
    names = checks.STDLIB_NAMES
    # new in 3.11, removed in 3.12, removed in 3.13, new in 3.14, and the running interpreter's own.
    assert {"tomllib", "distutils", "asynchat", "telnetlib", "cgi", "annotationlib", "compression"} <= names
    assert set(sys.stdlib_module_names) <= names
    assert "opsd_patch" not in names and "numpy" not in names


def test_clash_with_an_installed_distribution_is_a_warning(tmp_path, capsys):
    # PyYAML is a dependency of starforge-core, so 'yaml' is installed wherever this runs.
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": EAGER, "yaml/__init__.py": ""})
    report = check_plugin(root)
    assert report.ok
    assert codes(report.warnings) == [("installed-clash", "yaml/", None)]
    assert "PyYAML" in report.warnings[0].message
    code, out, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == 0 and f"warning: {root}/yaml/: top-level name 'yaml'" in err
    strict = check_plugin(root, strict=True)
    assert codes(strict.errors) == [("installed-clash", "yaml/", None)] and strict.warnings == []
    code, _, err = run_cli(capsys, "plugin", "check", str(root), "--strict")
    assert code == CheckError.exit_code and "error: " in err


def test_top_level_names_of_files():
    files = ["plugin.yaml", "opsd_patch.py", "helpers/__init__.py", "ns/deep/x.py", "fast.cpython-311-x86_64-linux-gnu.so",
             "win.pyd", "README.md", "my-data/x.txt", "notes.txt"]
    assert top_level_names(files) == ("fast", "helpers", "ns", "opsd_patch", "win")


# -- entrypoint ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    "load, source, line, expected",
    [
        ("deferred", "def install(params):\n    pass\n", 1, "does not accept **ctx"),
        ("deferred", "def install(**ctx):\n    pass\n", 1, "takes no positional parameter"),
        ("eager", "def install():\n    pass\n", 1, "takes no positional parameter"),
        ("eager", "def install(params, model):\n    pass\n", 1, "needs 2 positional arguments"),
        ("eager", "def install(params, *, trainer):\n    pass\n", 1, "keyword-only parameter(s) without default (trainer)"),
        ("eager", "x = 1\n\nasync def install(params):\n    pass\n", 3, "is 'async def'"),
        ("eager", "def other(params):\n    def install(params):\n        pass\n", None, "'install' is not defined at module level"),
    ],
)
def test_entrypoint_signature_must_fit_the_load_mode(tmp_path, load, source, line, expected):
    root = make_plugin(tmp_path / "p", MANIFEST + f"load: {load}\n", {"opsd_patch.py": source})
    report = check_plugin(root)
    assert [(f.code, f.path, f.line) for f in report.errors] == [("entrypoint", "opsd_patch.py", line)]
    assert expected in report.errors[0].message


@pytest.mark.parametrize(
    "load, source",
    [
        ("eager", "def install(params, extra=None, *args, option=1, **kw):\n    pass\n"),
        ("eager", "def install(*args):\n    pass\n"),
        ("deferred", "def install(params, /, *, trainer, **ctx):\n    pass\n"),
        ("deferred", "import sys\nif sys.version_info >= (3, 11):\n    def install(params, **ctx):\n        pass\nelse:\n    def install(params, **ctx):\n        pass\n"),
    ],
)
def test_signatures_that_fit(tmp_path, load, source):
    root = make_plugin(tmp_path / "p", MANIFEST + f"load: {load}\n", {"opsd_patch.py": source})
    assert check_plugin(root).errors == []


def test_environment_entrypoint_is_called_with_ctx_and_data_prep_without(tmp_path):
    # load_environment(name, **ctx) calls entrypoint(params, **ctx); forge prep calls entrypoint(params)
    env = MANIFEST.replace("kind: algorithm", "kind: environment")
    root = make_plugin(tmp_path / "env", env, {"opsd_patch.py": "def install(params):\n    pass\n"})
    (error,) = check_plugin(root).errors
    assert "does not accept **ctx; an environment plugin is called as install(params, **ctx)" in error.message
    root = make_plugin(tmp_path / "env-ok", env, {"opsd_patch.py": "def install(params, **ctx):\n    pass\n"})
    assert check_plugin(root).errors == []
    prep = MANIFEST.replace("kind: algorithm", "kind: data-prep") + "load: deferred\n"
    root = make_plugin(tmp_path / "prep", prep, {"opsd_patch.py": "def install(params):\n    return dict\n"})
    assert check_plugin(root).errors == []


def test_entrypoint_module_missing_or_in_a_package(tmp_path):
    root = make_plugin(tmp_path / "a", files={"other.py": EAGER})
    report = check_plugin(root)
    assert codes(report.errors) == [("entrypoint", "plugin.yaml", None)]
    assert "expected opsd_patch.py or opsd_patch/__init__.py" in report.errors[0].message
    pkg = MANIFEST.replace("opsd_patch:install", "opsd_patch.hooks:install")
    root = make_plugin(tmp_path / "b", pkg, {"opsd_patch/__init__.py": "", "opsd_patch/hooks.py": EAGER})
    assert check_plugin(root).ok


def test_reexported_entrypoint_is_followed_to_its_def(tmp_path):
    files = {"opsd_patch/__init__.py": "from ._impl import install\n", "opsd_patch/_impl.py": "def install(params, **ctx):\n    pass\n"}
    root = make_plugin(tmp_path / "ok", MANIFEST + "load: deferred\n", files)
    assert check_plugin(root).ok
    files["opsd_patch/_impl.py"] = "def install(params):\n    pass\n"
    root = make_plugin(tmp_path / "bad", MANIFEST + "load: deferred\n", files)
    assert codes(check_plugin(root).errors) == [("entrypoint", "opsd_patch/_impl.py", 1)]


def test_star_imports_are_followed_inside_the_plugin(tmp_path):
    files = {"opsd_patch/__init__.py": "from .hooks import *\n", "opsd_patch/hooks.py": "def install(params):\n    pass\n"}
    root = make_plugin(tmp_path / "ok", MANIFEST + "load: deferred\n", files)
    assert codes(check_plugin(root).errors) == [("entrypoint", "opsd_patch/hooks.py", 1)]
    files["opsd_patch/__init__.py"] = "from os.path import *\n"
    root = make_plugin(tmp_path / "outside", MANIFEST, files)
    report = check_plugin(root)
    assert report.ok and codes(report.warnings) == [("entrypoint", "opsd_patch/__init__.py", 1)]


def test_entrypoint_imported_from_outside_the_plugin_is_a_warning(tmp_path):
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": "from shared_hooks import install\n"})
    report = check_plugin(root)
    assert report.ok and codes(report.warnings) == [("entrypoint", "opsd_patch.py", 1)]
    assert "outside the plugin" in report.warnings[0].message


def test_entrypoint_bound_by_assignment_is_a_warning(tmp_path):
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": "def _real(params):\n    pass\n\ninstall = _real\n"})
    report = check_plugin(root)
    assert report.ok and codes(report.warnings) == [("entrypoint", "opsd_patch.py", 4)]


# -- syntax floor ---------------------------------------------------------------------------

MATCH = "def install(params):\n    match params:\n        case _:\n            pass\n"
EXCEPT_STAR = "def install(params):\n    try:\n        pass\n    except* ValueError:\n        pass\n"
STAR_SUBSCRIPT = "def install(params):\n    return params[*(1, 2)]\n"
TYPE_ALIAS = "type Scale = float\n\ndef install(params):\n    pass\n"


@pytest.mark.parametrize(
    "python, source, line",
    [
        (None, MATCH, None),
        (">=3.10", EXCEPT_STAR, 5),  # CPython reports except* at the end of its handler
        (">=3.11", EXCEPT_STAR, None),
        (">=3.10", STAR_SUBSCRIPT, 2),
        ("~=3.11", STAR_SUBSCRIPT, None),
        (">=3.8", EXCEPT_STAR, 5),  # the floor never goes below 3.10, and 3.10 lacks except*
        (">=3.11", TYPE_ALIAS, 1),
    ],
)
def test_sources_must_parse_for_the_oldest_admitted_python(tmp_path, python, source, line):
    manifest = MANIFEST + (f"requires:\n  python: '{python}'\n" if python else "")
    root = make_plugin(tmp_path / "p", manifest, {"opsd_patch.py": source})
    report = check_plugin(root)
    if line is None:
        assert report.errors == []
    else:
        assert codes(report.errors) == [("syntax", "opsd_patch.py", line)]
        assert "needs Python" in report.errors[0].message or "does not parse for Python" in report.errors[0].message


def test_requires_python_admitting_nothing_supported(tmp_path):
    root = make_plugin(tmp_path / "p", MANIFEST + "requires:\n  python: '<3.10'\n")
    assert codes(check_plugin(root).errors) == [("requires-python", "plugin.yaml", None)]


def test_python_floor():
    assert syntax.python_floor(None) == (3, 10)
    assert syntax.python_floor(">=3.12,<4") == (3, 12)
    assert syntax.python_floor("==3.11.*") == (3, 11)
    assert syntax.python_floor(">3.10.99") == (3, 11)
    assert syntax.python_floor(">=2.7") == (3, 10)


FSTRING_CASES = {
    "quote": ("x = f'{'a'}'\n", "quote"),
    "backslash": ("x = f'{\"\\\\n\".join(a)}'\n", "backslash"),
    "comment": ("x = f'''{1 # c\n}'''\n", "comment"),
    "nested": ("x = f'{f'{1}'}'\n", "quote"),
    "fine": ("x = f'{a!r:>{w}} {f\"{b}\"}'\n", None),
}


@pytest.mark.parametrize("interpreter", ["python3.12", "python3.13", "python3.14"])
def test_pep701_fstrings_are_refused_for_3_10_on_newer_interpreters(interpreter, tmp_path):
    """3.12+ parses PEP 701 f-strings even with feature_version=(3, 10); the tokenizer check catches them."""
    exe = shutil.which(interpreter)
    if exe is None or subprocess.run([exe, "-c", "pass"], capture_output=True).returncode != 0:
        pytest.skip(f"{interpreter} is not installed (optional: the check for interpreters newer than this one)")
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(f"""
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("syntax_probe", {syntax.__file__!r})
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        cases = json.loads(sys.stdin.read())
        print(json.dumps({{k: mod.source_problems(src, (3, 10)) for k, (src, _) in cases.items()}}))
    """))
    out = subprocess.run([exe, str(script)], input=json.dumps(FSTRING_CASES), capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    for key, (_, word) in FSTRING_CASES.items():
        if word is None:
            assert result[key] == [], key
        else:
            assert len(result[key]) == 1 and word in result[key][0][1] and "3.12" in result[key][0][1], (key, result[key])


def test_pep701_fstrings_do_not_pass_on_this_interpreter(tmp_path):
    for key, (source, word) in FSTRING_CASES.items():
        problems = syntax.source_problems(source, (3, 10))
        assert (problems == []) == (word is None), (key, problems)


# -- imports at module level ----------------------------------------------------------------

def test_framework_imports_at_module_level_are_warnings(tmp_path):
    source = """\
    import os
    import torch.nn
    from typing import TYPE_CHECKING
    if TYPE_CHECKING:
        import numpy
    try:
        from ray import actor
    except ImportError:
        actor = None

    class Hook:
        import vllm

    def install(params):
        import transformers
        return lambda: __import__("verl")
    """
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": source})
    report = check_plugin(root)
    assert report.ok
    assert codes(report.warnings) == [
        ("import-time-framework", "opsd_patch.py", 2),
        ("import-time-framework", "opsd_patch.py", 7),
        ("import-time-framework", "opsd_patch.py", 12),
    ]
    assert "'torch' is imported when the module is imported" in report.warnings[0].message
    assert [f.code for f in check_plugin(root, strict=True).errors] == ["import-time-framework"] * 3


# -- never runs plugin code -----------------------------------------------------------------

def test_check_never_imports_or_runs_plugin_code(tmp_path):
    marker = tmp_path / "marker"
    code = f"open({str(marker)!r}, 'w').write('imported')\n"
    files = {
        "opsd_patch/__init__.py": code + "from .hooks import install\n",
        "opsd_patch/hooks.py": code + "def install(params, **ctx):\n    " + code,
        "setup.py": code,
        "conftest.py": code,
        "sitecustomize_notes.py": code,
    }
    root = make_plugin(tmp_path / "p", MANIFEST + "load: deferred\n", files)
    report = check_plugin(root)
    assert report.ok, report.errors
    require_valid(root)
    proc = subprocess.run([sys.executable, "-m", "starforge", "plugin", "check", str(root), "--strict"],
                          capture_output=True, text=True, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert not list(root.rglob("__pycache__"))


# -- files, JSON, require_valid -------------------------------------------------------------

def test_file_rules_come_from_the_file_selection(tmp_path, capsys):
    root = make_plugin(tmp_path / "p")
    os.symlink("opsd_patch.py", root / "alias.py")
    report = check_plugin(root)
    assert [f.code for f in report.errors] == ["files"] and "symlink" in report.errors[0].message
    assert report.digest is None and report.files == []
    code, _, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == CheckError.exit_code and "symlink" in err and "Traceback" not in err


def test_limits_are_configurable(tmp_path):
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": EAGER, "a.txt": "1", "b.txt": "2"})
    assert check_plugin(root).ok
    report = check_plugin(root, max_files=2)
    assert [f.code for f in report.errors] == ["files"] and "more than 2 files" in report.errors[0].message


def test_forgeignore_excluding_manifest_or_entrypoint(tmp_path):
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": EAGER, ".forgeignore": "plugin.yaml\nopsd_patch.py\n"})
    report = check_plugin(root)
    assert [(f.code, f.path) for f in report.errors] == [("files", "plugin.yaml"), ("entrypoint", "plugin.yaml")]


def test_json_report(tmp_path, capsys):
    root = make_plugin(tmp_path / "p", files={"opsd_patch.py": EAGER, "json.py": ""})
    code, out, _ = run_cli(capsys, "plugin", "check", str(root), "--json")
    assert code == CheckError.exit_code
    data = json.loads(out)
    assert data["ok"] is False and data["name"] == "opsd-patch" and data["version"] == "1.2.0"
    assert [(e["code"], e["path"]) for e in data["errors"]] == [("shadowing", "json.py")]
    assert data["top_level"] == ["json", "opsd_patch"]
    (root / "json.py").unlink()
    code, out, _ = run_cli(capsys, "plugin", "check", str(root), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["errors"] == [] and data["digest"].startswith("sf1:")


def test_require_valid_raises_the_first_error_and_counts_the_rest(tmp_path):
    root = make_plugin(tmp_path / "p", MANIFEST + "load: deferred\n", {"opsd_patch.py": EAGER, "types.py": "", "torch.py": ""})
    with pytest.raises(CheckError) as err:
        require_valid(root)
    assert str(err.value).startswith(f"{root / 'torch.py'}: top-level name 'torch'")
    assert str(err.value).endswith("(and 2 more errors)")
    assert f"run 'forge plugin check {root}' to see every problem" in err.value.hint
    ok = make_plugin(tmp_path / "ok")
    assert require_valid(ok).manifest.name == "opsd-patch"


def test_every_manifest_error_is_reported_in_one_run(tmp_path, capsys):
    bad = "schema: forge/plugin/v1\nname: Opsd_Patch\nversion: one\nkind: algo\nentry_point: opsd_patch:install\ncolour: red\n"
    root = make_plugin(tmp_path / "p", bad)
    code, out, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == CheckError.exit_code
    located = [line.split(": ", 2)[1] for line in err.splitlines() if line.startswith("error: ") and "[manifest]" in line]
    assert located == [f"{root / 'plugin.yaml'}:{n}" for n in (5, 6, 2, 3, 4)]  # unknown keys first, then each field
    assert "did you mean 'entrypoint'" in err and "unknown key 'colour'" in err
    assert "missing required key 'entrypoint'" not in err  # the typo already said where it went
    assert f"error: {root}: 5 checks failed" in err


def test_the_shadowing_hint_names_a_module_that_would_pass(tmp_path, capsys):
    json_plugin = MANIFEST.replace("name: opsd-patch", "name: json").replace("opsd_patch:install", "json:install")
    root = make_plugin(tmp_path / "p", json_plugin, files={"json.py": EAGER})
    code, out, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == CheckError.exit_code
    assert "shadows the standard-library module" in err
    assert "name modules after the plugin ('json_patch')" in err and "'json')" not in err
    nameless = make_plugin(tmp_path / "q", "schema: [", files={"types.py": EAGER})
    code, out, err = run_cli(capsys, "plugin", "check", str(nameless))
    assert "shadows the standard-library module" in err and "opsd_patch" not in err


FILE_READS = {
    "opsd_patch/__init__.py": """\
        import json
        import os
        from pathlib import Path

        HERE = os.path.dirname(os.path.abspath(__file__))
        TABLE = os.path.join(HERE, "table.json")


        def install(params):
            with open(os.path.join(os.path.dirname(__file__), "a.json")) as f:
                json.load(f)
            json.load(open(TABLE))
            (Path(__file__).parent / "b.txt").read_text()
            with open("/etc/hostname") as f:  # not the plugin's own file: not this check's business
                f.read()
            from importlib.resources import files
            (files(__package__) / "conf" / "c.json").read_text()  # the way to do it: hashed
    """,
}


def test_reads_through_paths_built_from_file_are_a_warning_pointing_to_importlib_resources(tmp_path, capsys):
    root = make_plugin(tmp_path / "p", MANIFEST, FILE_READS)
    report = check_plugin(root)
    assert report.ok, report.errors
    reads = [w for w in report.warnings if w.code == "file-read"]
    assert [(w.path, w.line) for w in reads] == [("opsd_patch/__init__.py", 10), ("opsd_patch/__init__.py", 12),
                                                   ("opsd_patch/__init__.py", 13)]
    assert all("not hashed" in w.message and "importlib.resources" in w.hint for w in reads)
    code, out, err = run_cli(capsys, "plugin", "check", str(root))
    assert code == 0 and "[file-read]" in out + err
    assert check_plugin(root, strict=True).errors  # --strict makes it an error, like every warning
