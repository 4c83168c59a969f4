"""forge plugin init: every template checks clean, its own tests pass, and the wheel ships it."""

import os
import subprocess
import sys
import zipfile

import pytest
from support.cli import run_cli
from support.wheel import starforge_wheel

from starforge.authoring.checks import check_plugin
from starforge.authoring.init import TEMPLATES, core_spec, init_plugin, templates_dir
from starforge.errors import UsageError

CASES = [("algorithm", "eager"), ("algorithm", "deferred"), ("environment", "eager"), ("data-prep", "eager")]


@pytest.mark.parametrize("kind, load", CASES)
def test_init_then_check_passes_for_every_template(tmp_path, capsys, monkeypatch, kind, load):
    monkeypatch.chdir(tmp_path)
    args = ["plugin", "init", "opsd-patch", "--kind", kind] + (["--load", load] if kind == "algorithm" else [])
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    # an algorithm's load mode; for the other kinds, how they run (no load mode applies to them)
    how = {"environment": "environment: the trainer builds it with starforge.plugins.load_environment",
           "data-prep": "data-prep: run on the laptop with forge prep"}.get(kind, f"{kind}, {load}")
    assert out.startswith(f"created opsd-patch/ ({how})"), out
    root = tmp_path / "opsd-patch"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        ".forgeignore", "README.md", "opsd_patch.py", "plugin.yaml", "tests/test_opsd_patch.py",
    ]
    code, out, err = run_cli(capsys, "plugin", "check", "opsd-patch", "--strict")
    assert code == 0, err
    assert err == ""
    report = check_plugin(root)
    m = report.manifest
    function = "make_environment" if kind == "environment" else "install"  # load_environment calls it for a factory
    assert (m.name, m.version, m.kind, m.load, m.entrypoint) == ("opsd-patch", "0.1.0", kind, load, f"opsd_patch:{function}")
    assert m.requires.core == core_spec()
    # The tests stay on the laptop: .forgeignore keeps them out of the package and its names.
    assert report.files == [".forgeignore", "README.md", "opsd_patch.py", "plugin.yaml"]
    assert report.top_level == ("opsd_patch",)
    assert "{{" not in "".join(p.read_text() for p in root.rglob("*") if p.is_file())


GENERATED_TESTS = {("algorithm", "eager"): 3, ("algorithm", "deferred"): 2, ("environment", "eager"): 3,
                   ("data-prep", "eager"): 2}


@pytest.mark.parametrize("kind, load", CASES)
def test_generated_tests_pass(tmp_path, kind, load):
    root = init_plugin("reward-clip", kind, load, tmp_path / "reward-clip")
    # a plain pytest, as in a plugin author's environment: none of this suite's plugins (hypothesis alone costs seconds)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root, capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{GENERATED_TESTS[kind, load]} passed" in proc.stdout
    # and with the standard library alone (an environment with StarForge but no pytest)
    proc = subprocess.run(
        [sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd=root, capture_output=True, text=True, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Ran {GENERATED_TESTS[kind, load]} tests" in proc.stderr and "OK" in proc.stderr


def test_module_is_named_after_the_plugin(tmp_path):
    root = init_plugin("grpo-adv-scale", dest=tmp_path / "x")
    assert (root / "grpo_adv_scale.py").is_file() and not (root / "patch.py").exists()
    assert "entrypoint: grpo_adv_scale:install" in (root / "plugin.yaml").read_text()


@pytest.mark.parametrize(
    "name, message",
    [
        ("Opsd", "invalid plugin name 'Opsd'"),
        ("opsd_patch", "invalid plugin name 'opsd_patch'"),
        ("a" * 65, "invalid plugin name"),
        ("types", "would put a module 'types' on the job's sys.path"),
        ("torch", "would put a module 'torch'"),
        ("starforge", "would put a module 'starforge'"),
    ],
)
def test_bad_names_are_refused(tmp_path, name, message):
    with pytest.raises(UsageError, match=message):
        init_plugin(name, dest=tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_existing_non_empty_destination_is_refused_and_untouched(tmp_path, capsys):
    dest = tmp_path / "p"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    code, _, err = run_cli(capsys, "plugin", "init", "opsd-patch", "--dir", str(dest))
    assert code == UsageError.exit_code
    assert err.startswith(f"error: {dest}: already exists and is not an empty directory")
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no temporary directory left


def test_empty_destination_and_nested_dir_are_fine(tmp_path):
    (tmp_path / "empty").mkdir()
    assert (init_plugin("opsd-patch", dest=tmp_path / "empty") / "plugin.yaml").is_file()
    assert (init_plugin("opsd-patch", dest=tmp_path / "a" / "b") / "opsd_patch.py").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "empty"]


def test_load_applies_to_algorithms_only(tmp_path):
    with pytest.raises(UsageError, match="--load deferred applies to algorithm plugins only"):
        init_plugin("env-x", "environment", "deferred", tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_failed_render_leaves_nothing(tmp_path, monkeypatch):
    import starforge.authoring.init as init_mod

    def boom(source, target, values):
        (target / "half.txt").write_text("x")
        raise OSError("disk full")

    monkeypatch.setattr(init_mod, "_render", boom)
    with pytest.raises(OSError, match="disk full"):
        init_plugin("opsd-patch", dest=tmp_path / "p")
    assert list(tmp_path.iterdir()) == []


def test_core_spec():
    assert core_spec("0.1.0") == ">=0.1,<1"
    assert core_spec("2.3.1") == ">=2.3,<3"


def test_templates_come_from_the_installed_package():
    found = templates_dir()
    assert sorted(TEMPLATES.values()) == sorted(p.name for p in found.iterdir() if p.is_dir() and p.name != "__pycache__")


def _wheel_tools_available() -> str | None:
    try:
        import setuptools
    except ImportError:
        return "setuptools is not installed"
    major_minor = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
    if major_minor < (77, 0):
        return f"setuptools {setuptools.__version__} is older than 77 (the SPDX license field)"
    return None


def test_wheel_ships_templates_and_schema(tmp_path_factory):
    """A non-editable install gets the templates and the schema (built offline from a copy)."""
    missing = _wheel_tools_available()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing + " (install the 'test' extra)")
    wheel_file, build_output, src = starforge_wheel(tmp_path_factory)
    # the build is silent: no setuptools deprecation or package-data guessing warnings
    assert "Warning" not in build_output and "is absent from the `packages`" not in build_output, build_output
    names = set(zipfile.ZipFile(wheel_file).namelist())
    assert "starforge/schemas/plugin.schema.json" in names
    for template in TEMPLATES.values():
        for rel in ("plugin.yaml.tmpl", "__module__.py.tmpl", "README.md.tmpl", "dot-forgeignore", "tests/test___module__.py.tmpl"):
            assert f"starforge/plugin_templates/{template}/{rel}" in names
    # the templates ship inside starforge, never as a generic top-level package
    assert not [n for n in names if n.startswith("plugin_templates/")]
    # every module of the source tree ships (the package list in pyproject.toml is explicit)
    modules = {p.relative_to(src).as_posix() for p in (src / "starforge").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    # and the vendored packaging's pin and licence files, without which no runtime zip is built
    vendor = {p.relative_to(src).as_posix() for p in (src / "starforge" / "cluster" / "_vendor").rglob("*")
              if p.is_file() and not p.name.endswith(".py")}
    assert vendor and vendor <= names, sorted(vendor - names)
