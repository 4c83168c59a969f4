"""``check_items``: the launcher's check of the DSSE envelopes a job carries against ``FORGE_TRUST``."""

from __future__ import annotations

import pytest

from starforge.cluster.errors import LaunchFailure
from starforge.cluster.jobspec import PluginEntry
from starforge.cluster.load_order import Item
from starforge.cluster.signatures import check_items
from starforge.signatures.signing import generate_key, sign_statement, trust_add

TREE = "sf1:" + "1f" * 32
OTHER_TREE = "sf1:" + "2e" * 32


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {name: generate_key(folder / f"{name}.key") for name in ("alice", "mallory")}


@pytest.fixture
def trust(tmp_path, keys):
    path = tmp_path / "trust.json"
    trust_add("alice", keys["alice"].public, path=path)
    return str(path)


def envelope(key, *, owner="alice", name="opsd-patch", version="1.2.0", tree=TREE) -> str:
    return sign_statement(key.private, owner=owner, name=name, version=version, tree_digest=tree,
                          artifact_digest="sha256:" + "0" * 64).decode("utf-8")


def item(signature: str | None = None, *, owner: str | None = "alice", name="opsd-patch", version="1.2.0",
         tree=TREE) -> Item:
    entry = PluginEntry(name, version, tree, "algorithm", "eager", "opsd_patch:install", owner=owner, signature=signature)
    return Item(entry, owner is None, "/nonexistent")


def refused(items, environ) -> LaunchFailure:
    with pytest.raises(LaunchFailure) as info:
        check_items(items, environ)
    assert (info.value.phase, info.value.code) == ("verify", 10)
    return info.value


def test_nothing_is_checked_without_a_trust_file_or_a_requirement(keys):
    assert check_items([item(), item(envelope(keys["mallory"]))], {}) == []
    for off in ("0", "false", "No", "off", " "):
        assert check_items([item()], {"FORGE_REQUIRE_SIGNATURES": off}) == []


def test_a_good_envelope_returns_the_ref_and_the_key_id(trust, keys):
    checked = check_items([item(envelope(keys["alice"]))], {"FORGE_TRUST": trust})
    assert checked == [("alice/opsd-patch@1.2.0", keys["alice"].key_id)]


def test_an_owner_with_trusted_keys_and_no_envelope_is_refused_never_downgraded(trust):
    f = refused([item()], {"FORGE_TRUST": trust})
    assert f.plugin == "alice/opsd-patch@1.2.0"
    assert f.message == f"alice/opsd-patch@1.2.0: the job carries no signature, but owner alice has trusted keys in {trust}"


def test_an_owner_without_trusted_keys_passes_unless_signatures_are_required(trust, keys):
    bob = item(owner="bob")
    signed_by_stranger = item(envelope(keys["mallory"], owner="carol"), owner="carol")
    assert check_items([bob, signed_by_stranger], {"FORGE_TRUST": trust}) == []
    f = refused([bob], {"FORGE_TRUST": trust, "FORGE_REQUIRE_SIGNATURES": "1"})
    assert f.plugin == "bob/opsd-patch@1.2.0"
    assert f.message == (
        f"bob/opsd-patch@1.2.0: signatures are required (FORGE_REQUIRE_SIGNATURES), but no key is trusted for owner bob in {trust}"
    )


def test_recipe_builtins_are_never_checked(trust):
    builtin = item(owner=None)
    assert builtin.builtin
    assert check_items([builtin], {"FORGE_TRUST": trust, "FORGE_REQUIRE_SIGNATURES": "yes"}) == []


@pytest.mark.parametrize("signed, expected", [
    (dict(version="1.1.0"), "signature is for alice/opsd-patch@1.1.0, not alice/opsd-patch@1.2.0"),
    (dict(name="other-patch"), "signature is for alice/other-patch@1.2.0, not alice/opsd-patch@1.2.0"),
    (dict(tree=OTHER_TREE), f"is for tree digest {OTHER_TREE}, but the registry serves {TREE}"),
])
def test_an_envelope_moved_onto_another_entry_is_refused(trust, keys, signed, expected):
    f = refused([item(envelope(keys["alice"], **signed))], {"FORGE_TRUST": trust})
    assert f.plugin == "alice/opsd-patch@1.2.0"
    assert f.message.startswith("alice/opsd-patch@1.2.0: signature check failed: ")
    assert expected in f.message


def test_an_envelope_by_an_untrusted_key_is_refused(trust, keys):
    f = refused([item(envelope(keys["mallory"]))], {"FORGE_TRUST": trust})
    assert f"signed by key {keys['mallory'].key_id}, which is not in the trust file" in f.message


def test_an_altered_envelope_is_refused(trust, keys):
    good = envelope(keys["alice"])
    assert '"sig": "' in good
    tampered = good.replace('"sig": "', '"sig": "AAAA', 1)
    f = refused([item(tampered)], {"FORGE_TRUST": trust})
    assert f"signature check failed: signature of alice/opsd-patch@1.2.0 does not verify with key {keys['alice'].key_id}" in f.message


def test_the_first_bad_item_stops_the_check(trust, keys):
    items = [item(envelope(keys["alice"])), item(name="second-patch")]
    f = refused(items, {"FORGE_TRUST": trust})
    assert f.plugin == "alice/second-patch@1.2.0"


def test_a_requirement_without_a_trust_file_is_refused():
    f = refused([item()], {"FORGE_REQUIRE_SIGNATURES": "1"})
    assert f.plugin is None
    assert f.message == "FORGE_REQUIRE_SIGNATURES is set, but FORGE_TRUST names no trust file to check signatures against"


def test_an_unusable_trust_file_is_refused_naming_it(tmp_path):
    missing = tmp_path / "absent.json"
    assert refused([item()], {"FORGE_TRUST": str(missing)}).message == f"FORGE_TRUST={missing}: no such trust file"
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    f = refused([item()], {"FORGE_TRUST": str(garbage)})
    assert f.plugin is None
    assert f.message.startswith(f"FORGE_TRUST: trust file {garbage} is not valid JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"schema": "forge/trust/v0", "owners": {}}')
    assert refused([item()], {"FORGE_TRUST": str(wrong)}).message == (
        f"FORGE_TRUST: trust file {wrong} is not a forge/trust/v1 document"
    )
