"""``check_requires``: a plugin's ``requires`` (core, python, packages) against this process."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

import starforge
from starforge.cluster.errors import LaunchFailure
from starforge.cluster.jobspec import PluginEntry
from starforge.cluster.requires import check_requires, packaging_version

HAVE_PY = "%d.%d.%d" % sys.version_info[:3]
PYTEST = importlib.metadata.version("pytest")


def entry(requires: dict | None, owner: str | None = "alice") -> PluginEntry:
    return PluginEntry("p", "1.0.0", "sf1:" + "0" * 64, "algorithm", "eager", "p:install", owner=owner,
                       requires=requires)


def failure(requires: dict, owner: str | None = "alice") -> LaunchFailure:
    with pytest.raises(LaunchFailure) as info:
        check_requires(entry(requires, owner))
    assert (info.value.phase, info.value.code) == ("requires", 11)
    return info.value


def test_met_requirements_pass():
    major, minor = sys.version_info[:2]
    check_requires(entry(None))
    check_requires(entry({}))
    check_requires(entry({
        "core": f">={starforge.__version__},<99",
        "python": f">={major}.{minor},<{major}.{minor + 1}",
        "packages": {"pytest": f"=={PYTEST}", "pluggy": None, "iniconfig": ""},
    }))


def test_an_unmet_core_names_the_plugin_the_spec_and_the_version_found():
    f = failure({"core": ">=99"})
    assert f.plugin == "alice/p@1.0.0"
    assert f.message == f"alice/p@1.0.0 requires starforge-core >=99, found {starforge.__version__}"


def test_an_unmet_python_names_the_running_version():
    f = failure({"python": "<3"}, owner=None)
    assert f.plugin == "recipe:p@1.0.0"
    assert f.message == f"recipe:p@1.0.0 requires python <3, found {HAVE_PY}"


def test_a_package_of_the_wrong_version_names_the_installed_one():
    f = failure({"packages": {"pytest": f"!={PYTEST}"}})
    assert f.message == f"alice/p@1.0.0 requires pytest !={PYTEST}, found {PYTEST}"


def test_a_missing_package_is_not_installed_with_or_without_a_spec():
    assert failure({"packages": {"surely-not-installed-dist": ">=1"}}).message == (
        "alice/p@1.0.0 requires surely-not-installed-dist >=1, not installed"
    )
    assert failure({"packages": {"surely-not-installed-dist": None}}).message == (
        "alice/p@1.0.0 requires surely-not-installed-dist (any version), not installed"
    )


def test_core_is_checked_before_python_and_packages():
    f = failure({"core": "<0", "python": "<3", "packages": {"surely-not-installed-dist": None}})
    assert "starforge-core" in f.message


def test_an_invalid_specifier_is_a_requirement_failure_naming_what_it_was_for():
    assert failure({"python": "around 3.11"}).message == "alice/p@1.0.0: invalid specifier for python: 'around 3.11'"
    assert failure({"packages": {"pytest": "~=1"}}).message == "alice/p@1.0.0: invalid specifier for pytest: '~=1'"


def test_the_vendored_packaging_is_used_not_the_environments():
    check_requires(entry({"core": ">=0"}))
    Version, InvalidVersion = packaging_version()
    assert Version.__module__.startswith("starforge.cluster._vendor.packaging")
    assert Version("1.0.0rc1") < Version("1.0.0")
    with pytest.raises(InvalidVersion):
        Version("not a version")


VERSIONS = ["0", "0.1", "0.1.0", "0.1.0a1", "0.1.0.dev1", "0.1.0.post1", "0.1.0rc2.post1.dev3", "0.2", "1!0.1",
            "3.10", "3.10.0", "3.11.7", "3.13.0rc1", "3.9.18", "10.0", "0.1.0+local", "3.10.0+cu121",
            "1.0.post0.dev0", "v0.1", " 0.1 ", "not a version"]
PLAIN = [">=0.1", "<=0.1", "==0.1", "!=0.1", ">=3.10", ">=3.10,<=3.12", " >= 3.10 , != 3.11.7 ", "==3.10.0", "!=0",
         ">=0,<=0", "==1", ">=0.1.0.0"]
OTHERS = ["~=3.10", "<3.12", ">0.1", "==3.*", "==0.1+local", ">=0.1a1", "===0.1", ">=1!0", ""]


@pytest.mark.parametrize("spec", PLAIN + OTHERS)
def test_every_verdict_is_the_one_packagings_specifierset_gives(spec):
    # Plain specifiers (>=, <=, ==, != and a release) are answered with packaging's Version
    # alone, without importing its specifiers module; the verdicts are the same.
    from starforge.cluster._vendor.packaging.specifiers import SpecifierSet
    from starforge.cluster._vendor.packaging.version import InvalidVersion, Version
    from starforge.cluster.plain_specifiers import plain_clauses
    from starforge.cluster.requires import satisfies

    assert (plain_clauses(spec) is not None) == (spec in PLAIN)
    for have in VERSIONS:
        try:
            expected = bool(SpecifierSet(spec).contains(Version(have), prereleases=True))
        except InvalidVersion:
            expected = False
        assert satisfies(spec, have) is expected, (spec, have)


def test_a_plain_requirement_on_bare_releases_is_checked_without_importing_packaging():
    code = ("import sys; from starforge.cluster.jobspec import PluginEntry; "
            "from starforge.cluster.requires import check_requires; "
            "check_requires(PluginEntry('p', '1.0.0', 'sf1:' + '0' * 64, 'algorithm', 'eager', 'p:install', owner='a', "
            "requires={'core': '>=0.1', 'python': '>=3.10,!=3.9.1'})); "
            "print(sorted(m for m in sys.modules if '_vendor.packaging' in m))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # starforge-core 0.1.0 and the running Python are bare releases
