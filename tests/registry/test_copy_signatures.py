"""`forge plugin copy` checks every signature envelope before copying it (SPEC §6), across
directory and real OCI registries: a bad one is refused, one the copier cannot verify is
labelled "signature not verified here" (never "signed"), none is dropped silently, and
``--require-signatures`` copies only what verifies here."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from support.registry_world import OWNER, User, write_experiment, write_plugin
from test_locked_signatures import NAME, VERSION, envelope_by, set_envelopes


def _url(kind: str, request, tmp_path: Path, label: str) -> str:
    if kind == "directory":
        return str(tmp_path / f"{label}-registry")
    server = request.getfixturevalue("oci_registry")
    return f"oci://127.0.0.1:{server.port}/{label}-{tmp_path.name.replace('_', '-').lower()[-36:]}"


@pytest.fixture(params=[pytest.param(("directory", "oci"), marks=pytest.mark.oci, id="dir-to-oci"),
                        pytest.param(("oci", "directory"), marks=pytest.mark.oci, id="oci-to-dir")])
def pair(request, tmp_path):
    src, dst = request.param
    return _url(src, request, tmp_path, "src"), _url(dst, request, tmp_path, "dst")


@pytest.fixture
def user(tmp_path) -> User:
    user = User(tmp_path / "user")
    user.forge("key", "generate")
    user.forge("key", "generate", "--name", "second")
    return user


def _publish_signed(user: User, registry: str, tmp_path: Path) -> None:
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign")


def _copy(user: User, src: str, dst: str, *extra, ok=True):
    return user.forge("plugin", "copy", f"{OWNER}/{NAME}", "--from", src, "--to", dst, *extra, ok=ok)


def served_version(registry: str) -> list:
    from starforge.registry.factory import open_registry
    from starforge.registry.store import PluginStore

    reg = open_registry(registry)
    return PluginStore(reg).envelopes(reg.get(OWNER, NAME, VERSION))


def test_a_trusted_owners_signature_is_verified_and_copied(user, pair, tmp_path):
    src, dst = pair
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    _publish_signed(user, src, tmp_path)
    out = _copy(user, src, dst)
    assert "copied alice/opsd-patch@1.0.0 " in out.stdout and out.stdout.splitlines()[0].endswith(" (signed)")
    assert served_version(dst) == served_version(src)
    exp = write_experiment(tmp_path / "exp", dst)
    assert "signature verified" in user.forge("lock", exp).stdout


def test_an_unverifiable_signature_is_copied_labelled_not_verified_here(user, pair, tmp_path):
    src, dst = pair
    _publish_signed(user, src, tmp_path)  # nobody trusted here
    out = _copy(user, src, dst)
    first = out.stdout.splitlines()[0]
    assert first.endswith(" (signature not verified here)") and "(signed)" not in out.stdout
    assert served_version(dst) == served_version(src)  # carried, not dropped
    data = json.loads(_copy(user, src, dst, "--json").stdout)["copied"][0]
    assert data["signature"] == "signature not verified here" and data["signed"] is False
    assert data["signatures"][0]["status"] == "signature not verified here" and data["signatures"][0]["copied"]


def test_a_bad_envelope_is_refused_and_nothing_is_copied(user, tmp_path, request):
    src, dst = _url("directory", request, tmp_path, "src"), _url("oci", request, tmp_path, "dst")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    _publish_signed(user, src, tmp_path)
    good = json.loads(served_version(src)[0])
    statement = json.loads(base64.b64decode(good["payload"]))
    statement["predicate"]["note"] = "altered after signing"
    good["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    set_envelopes(src, [json.dumps(good).encode()])
    refused = _copy(user, src, dst, ok=False)
    assert refused.returncode == 9, refused.stderr
    assert "alice/opsd-patch@1.0.0: refusing to copy a signature that does not check out: signature of" in refused.stderr
    assert "does not verify" in refused.stderr
    with pytest.raises(Exception):
        served_version(dst)  # the version was not copied at all

    # an owner nobody trusts here: the statement is still checked against the version
    (user.home / "trust.json").unlink()
    user.forge("plugin", "publish", write_plugin(tmp_path / "src2", version="1.0.1"), "--registry", src, "--sign")
    moved = (Path(src) / "plugins" / OWNER / NAME / "1.0.1.dsse.json").read_bytes()
    set_envelopes(src, [moved])  # 1.0.1's envelope under 1.0.0
    refused = _copy(user, src, dst, ok=False)
    assert refused.returncode == 9 and "signature is for alice/opsd-patch@1.0.1, not alice/opsd-patch@1.0.0" in refused.stderr


def test_require_signatures_copies_only_what_verifies_here(user, pair, tmp_path):
    src, dst = pair
    _publish_signed(user, src, tmp_path)
    refused = _copy(user, src, dst, "--require-signatures", ok=False)
    assert refused.returncode == 9
    assert "--require-signatures copies only versions with a signature verified here" in refused.stderr
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    assert _copy(user, src, dst, "--require-signatures").stdout.splitlines()[0].endswith(" (signed)")


def test_a_second_signature_is_copied_beside_the_first(user, tmp_path, request):
    src, dst = _url("oci", request, tmp_path, "src"), _url("directory", request, tmp_path, "dst")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    user.forge("trust", "add", OWNER, user.home / "keys" / "second.pub")
    _publish_signed(user, src, tmp_path)
    set_envelopes(src, [envelope_by(user, src, "second")], keep=True)  # re-signed with a second key
    assert len(served_version(src)) == 2
    out = _copy(user, src, dst)
    assert out.stdout.splitlines()[0].endswith(" (signed)")
    assert "not copied" not in out.stdout
    assert served_version(dst) == served_version(src)  # both envelopes, in order: several keys may sign one version


def test_a_trusted_owners_version_whose_signature_was_stripped_is_not_copied(user, pair, tmp_path):
    src, dst = pair
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    _publish_signed(user, src, tmp_path)
    set_envelopes(src, [])
    refused = _copy(user, src, dst, ok=False)
    assert refused.returncode == 9, refused.stdout + refused.stderr
    assert refused.stderr.startswith("error: alice/opsd-patch@1.0.0 has no signature, but owner alice has trusted keys: "
                                     "refusing to copy it"), refused.stderr
    with pytest.raises(Exception):
        served_version(dst)  # the mirror does not serve it as unsigned


def test_bundle_create_refuses_an_unsigned_version_of_a_trusted_owner(user, tmp_path):
    registry = str(tmp_path / "registry")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry)
    exp = write_experiment(tmp_path / "exp", registry)
    user.forge("lock", exp)  # nobody trusted yet: locked unsigned
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    refused = user.forge("bundle", "create", exp, "-o", tmp_path / "b.tar", ok=False)
    assert refused.returncode == 9, refused.stdout + refused.stderr
    assert "alice/opsd-patch@1.0.0 has no signature, but owner alice has trusted keys: refusing to bundle it" in refused.stderr
    assert not (tmp_path / "b.tar").exists()
