"""Resolution: newest match by PEP 440; pre-releases only when asked for; clear misses."""

from __future__ import annotations

import pytest

from starforge.errors import NotFoundError, UsageError
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.resolve import resolve, select_version

VERSIONS = ["0.9.0", "1.0.0", "1.2.0", "1.2.5", "1.10.0", "2.0.0rc1", "2.0.0.dev1"]


@pytest.mark.parametrize(
    "spec, expected",
    [
        (None, "1.10.0"),  # bare: newest final release, not 2.0.0rc1
        ("", "1.10.0"),
        ("~=1.2", "1.10.0"),  # ~=1.2 means >=1.2,<2
        ("~=1.2.0", "1.2.5"),  # ~=1.2.0 means >=1.2.0,<1.3
        ("==1.2", "1.2.0"),  # 1.2 equals 1.2.0
        ("<1.2", "1.0.0"),
        (">=2.0.0rc1", "2.0.0rc1"),  # names a pre-release: pre-releases allowed
        ("==2.0.0.dev1", "2.0.0.dev1"),
        (">1.10", None),  # only pre-releases match: not chosen unasked
        (">=2", None),  # 2.0.0rc1 sorts before 2 under PEP 440
        ("==3.0", None),
    ],
)
def test_select_version(spec, expected):
    assert select_version(VERSIONS, spec) == expected


def test_only_prereleases_published_means_a_bare_ref_finds_nothing():
    assert select_version(["1.0.0a1", "1.0.0b2"], None) is None
    assert select_version(["1.0.0a1", "1.0.0b2"], ">=1.0.0a1") == "1.0.0b2"


@pytest.fixture
def registry(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    for v in ("1.0.0", "1.2.0", "1.3.0", "2.0.0rc1"):
        reg.publish(*make_version(version=v, extra=f"V = '{v}'\n"))
    return reg


def test_resolve_returns_the_published_record(registry):
    got = resolve(registry, "alice/opsd-patch@~=1.2")
    assert got.ref == "alice/opsd-patch@1.3.0"
    assert got.tree_digest.startswith("sf1:")
    assert resolve(registry, "alice/opsd-patch").version == "1.3.0"
    assert resolve(registry, "alice/opsd-patch@1.2").version == "1.2.0"
    assert resolve(registry, "alice/opsd-patch@2.0.0rc1").version == "2.0.0rc1"


def test_no_matching_version_lists_what_is_available(registry):
    with pytest.raises(NotFoundError) as err:
        resolve(registry, "alice/opsd-patch@>=1.5")
    assert err.value.message.startswith("no version of alice/opsd-patch matches '>=1.5'")
    assert "available: 1.0.0, 1.2.0, 1.3.0, 2.0.0rc1" in err.value.hint
    assert "alice/opsd-patch@2.0.0rc1" in err.value.hint  # how to ask for the pre-release
    with pytest.raises(NotFoundError) as err:
        resolve(registry, "alice/opsd-patch@==0.5")
    assert "pre-release" not in err.value.hint


def test_a_missing_plugin_names_what_the_owner_has(registry):
    with pytest.raises(NotFoundError) as err:
        resolve(registry, "alice/opsd-ptach")
    assert err.value.message.startswith("no plugin alice/opsd-ptach in registry")
    assert err.value.hint == "did you mean alice/opsd-patch?"  # the closest name, not the whole listing
    with pytest.raises(NotFoundError) as err:
        resolve(registry, "alice/reward-clip")
    assert err.value.hint == "alice has published alice/opsd-patch (forge plugin list alice lists them)"
    with pytest.raises(NotFoundError, match="no plugin nobody/x"):
        resolve(registry, "nobody/x")


def test_a_malformed_reference_is_a_usage_error(registry):
    with pytest.raises(UsageError):
        resolve(registry, "opsd-patch")
