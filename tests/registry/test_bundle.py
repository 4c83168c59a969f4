"""forge bundle create|verify|push and forge plugin copy, through the CLI, on real registries.

Two docker-registry instances and directory registries; skopeo as an independent reader of
the bundle; forge submit on the far side with the lock unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support.registry_world import User

from starforge.bundle.layout import layout_header

OWNER = "alice"


class Side(User):
    """One side of the gap: its own FORGE_HOME (cache, keys, trust), run as a user would."""


def write_plugin(root: Path, name: str, version: str = "1.0.0", kind: str = "algorithm", extra: str = "") -> Path:
    module = name.replace("-", "_")
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: {name}\nversion: '{version}'\nkind: {kind}\nentrypoint: {module}:install\n"
    )
    (root / f"{module}.py").write_text(
        f"def install(params):\n    print('{name} {version} installed', flush=True)\n{extra}"
    )
    return root


def write_experiment(root: Path, plugins: list, registry: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "trainer.py").write_text("print('trainer ran', flush=True)\n")
    (root / "forge.yaml").write_text(
        "schema: forge/job/v1\nname: gap\nentrypoint: python trainer.py\n"
        f"plugins: [{', '.join(plugins)}]\nconfig: {{}}\nregistry: {registry}\n"
    )
    return root


@pytest.fixture
def near(tmp_path) -> Side:
    return Side(tmp_path / "near")


@pytest.fixture
def far(tmp_path) -> Side:
    return Side(tmp_path / "far")


@pytest.fixture
def locked(near, tmp_path):
    """``locked(registry_url, sign=False)`` -> experiment dir locked on two plugins published there."""

    def make(registry: str, sign: bool = False) -> Path:
        if sign:
            near.forge("key", "generate")
        for name in ("opsd-patch", "reward-scale"):
            src = write_plugin(tmp_path / "src" / name, name)
            near.forge("plugin", "publish", src, "--registry", registry, *(["--sign"] if sign else []))
        exp = write_experiment(tmp_path / "exp", ["alice/opsd-patch@1.0.0", "alice/reward-scale@1.0.0"], registry)
        near.forge("lock", exp)
        return exp

    return make


def members(bundle: Path) -> list:
    with tarfile.open(bundle) as tar:
        return [m.name for m in tar.getmembers()]


def read_member(bundle: Path, name: str) -> bytes:
    with tarfile.open(bundle) as tar:
        return tar.extractfile(name).read()


def rewrite(bundle: Path, out: Path, change) -> Path:
    """Copy *bundle* to *out* member by member, with ``change(name, data) -> data | None`` (None drops it)."""
    with tarfile.open(bundle) as src, open(out, "wb") as dst:
        for m in src.getmembers():
            if m.isdir():
                dst.write(layout_header(m.name, 0, directory=True))
                continue
            data = change(m.name, src.extractfile(m).read())
            if data is None:
                continue
            dst.write(layout_header(m.name, len(data)) + data + b"\0" * (-len(data) % 512))
        dst.write(b"\0" * 1024)
    return out


def index_of(bundle: Path) -> dict:
    return json.loads(read_member(bundle, "index.json"))


def layer_member(bundle: Path, ref: str) -> str:
    desc = next(d for d in index_of(bundle)["manifests"]
                if (d.get("annotations") or {}).get("org.opencontainers.image.ref.name") == ref)
    manifest = json.loads(read_member(bundle, "blobs/sha256/" + desc["digest"][7:]))
    return "blobs/sha256/" + manifest["layers"][0]["digest"][7:]


# -- create -------------------------------------------------------------------------------------


def test_bundle_is_an_oci_layout_with_the_registry_manifests_and_byte_identical(near, locked, tmp_path, oci_registry):
    reg_a = str(tmp_path / "registry-a")
    exp = locked(reg_a)
    out = near.forge("bundle", "create", exp, "-o", tmp_path / "one.tar")
    assert "bundled alice/opsd-patch@1.0.0" in out.stdout and "bundled alice/reward-scale@1.0.0" in out.stdout
    near.forge("bundle", "create", exp, "-o", tmp_path / "two.tar")
    one = (tmp_path / "one.tar").read_bytes()
    assert one == (tmp_path / "two.tar").read_bytes()  # same lock, same registry content: same bytes

    names = members(tmp_path / "one.tar")
    assert names[:2] == ["oci-layout", "index.json"]
    blobs = [n for n in names if n.startswith("blobs/sha256/") and n != "blobs/sha256"]
    archives = [layer_member(tmp_path / "one.tar", f"alice/{n}:1.0.0") for n in ("opsd-patch", "reward-scale")]
    small = [n for n in blobs if n not in archives]
    assert blobs == sorted(small) + sorted(archives)  # metadata first, then the archives, each by digest
    with tarfile.open(tmp_path / "one.tar") as tar:
        assert {(m.mtime, m.uid, m.gid, m.uname) for m in tar.getmembers()} == {(0, 0, 0, "")}
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith("blobs/sha256/"):
                assert hashlib.sha256(tar.extractfile(m).read()).hexdigest() == m.name.rsplit("/", 1)[1]
    assert read_member(tmp_path / "one.tar", "oci-layout") == b'{"imageLayoutVersion":"1.0.0"}'
    refs = {(d.get("annotations") or {}).get("org.opencontainers.image.ref.name"): d["digest"]
            for d in index_of(tmp_path / "one.tar")["manifests"]}
    assert set(refs) == {"alice/opsd-patch:1.0.0", "alice/reward-scale:1.0.0", "plugins.lock.json"}
    lock_manifest = json.loads(read_member(tmp_path / "one.tar", "blobs/sha256/" + refs["plugins.lock.json"][7:]))
    lock_blob = read_member(tmp_path / "one.tar", "blobs/sha256/" + lock_manifest["layers"][0]["digest"][7:])
    assert lock_blob == (exp / "plugins.lock.json").read_bytes()

    # The very manifest `forge plugin publish` writes to an OCI registry.
    near.forge("plugin", "publish", tmp_path / "src" / "opsd-patch", "--registry", oci_registry.url)
    from starforge.registry.oci import OciRegistry

    with OciRegistry(oci_registry.url) as reg:
        got = reg.client.get_manifest(reg.repository("alice", "opsd-patch"), "1.0.0")
    assert got.digest == refs["alice/opsd-patch:1.0.0"]


def test_create_refuses_a_stale_lock_and_says_builtins_stay_with_the_recipe(near, locked, tmp_path):
    reg_a = str(tmp_path / "registry-a")
    exp = locked(reg_a)
    write_plugin(exp / "common" / "algorithms" / "clip-adv", "clip-adv")
    text = (exp / "forge.yaml").read_text()
    (exp / "forge.yaml").write_text(text + "recipe:\n  plugins: [clip-adv]\n")
    out = near.forge("bundle", "create", exp, "-o", tmp_path / "b.tar")
    # a note: on stderr, silenced by -q (docs/cli.md); stdout holds the results only
    assert "note: built-in plugins (common/algorithms/) are not in the bundle" in out.stderr and "clip-adv" in out.stderr
    assert "note:" not in out.stdout and f"wrote {tmp_path / 'b.tar'}" in out.stdout
    quiet = near.forge("-q", "bundle", "create", exp, "-o", tmp_path / "q.tar")
    assert "note:" not in quiet.stdout + quiet.stderr and f"wrote {tmp_path / 'q.tar'}" in quiet.stdout
    assert not any("clip" in json.dumps(d) for d in index_of(tmp_path / "b.tar")["manifests"])

    (exp / "forge.yaml").write_text(text.replace("alice/reward-scale@1.0.0", "alice/reward-scale@2.0.0"))
    stale = near.forge("bundle", "create", exp, "-o", tmp_path / "c.tar", ok=False)
    assert stale.returncode != 0 and "stale" in stale.stderr and "Traceback" not in stale.stderr
    assert not (tmp_path / "c.tar").exists()


# -- verify --------------------------------------------------------------------------------------


@pytest.fixture
def bundle(near, locked, tmp_path) -> Path:
    exp = locked(str(tmp_path / "registry-a"))
    near.forge("bundle", "create", exp, "-o", tmp_path / "good.tar")
    return tmp_path / "good.tar"


def test_verify_checks_content_not_member_order(far, bundle, tmp_path):
    out = far.forge("bundle", "verify", bundle)
    assert "ok alice/opsd-patch@1.0.0" in out.stdout and "ok alice/reward-scale@1.0.0" in out.stdout
    # The same members in reverse order, written by an ordinary tar: still the same content.
    extracted = tmp_path / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(extracted)
    names = ["oci-layout", "index.json"] + sorted(os.listdir(extracted / "blobs" / "sha256"), reverse=True)
    files = names[:2] + [f"blobs/sha256/{n}" for n in names[2:]]
    subprocess.run(["tar", "cf", tmp_path / "reordered.tar", "-C", extracted, *reversed(files)], check=True)
    far.forge("bundle", "verify", tmp_path / "reordered.tar")


def test_verify_refuses_an_altered_layer_byte_naming_plugin_and_file(far, bundle, tmp_path):
    target = layer_member(bundle, "alice/reward-scale:1.0.0")

    def flip(name, data):
        if name != target:
            return data
        return data[:100] + bytes([data[100] ^ 1]) + data[101:]

    bad = far.forge("bundle", "verify", rewrite(bundle, tmp_path / "flip.tar", flip), ok=False)
    assert bad.returncode == 5
    assert "alice/reward-scale@1.0.0" in bad.stderr and target in bad.stderr and "altered" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_verify_refuses_a_deleted_blob_an_edited_index_and_a_truncated_file(far, bundle, tmp_path):
    target = layer_member(bundle, "alice/opsd-patch:1.0.0")
    gone = far.forge("bundle", "verify", rewrite(bundle, tmp_path / "gone.tar", lambda n, d: None if n == target else d), ok=False)
    assert gone.returncode == 5 and "alice/opsd-patch@1.0.0" in gone.stderr and target in gone.stderr and "missing" in gone.stderr

    def drop_plugin(name, data):
        if name != "index.json":
            return data
        index = json.loads(data)
        index["manifests"] = [d for d in index["manifests"] if "reward-scale" not in json.dumps(d)]
        return json.dumps(index).encode()

    edited = far.forge("bundle", "verify", rewrite(bundle, tmp_path / "index.tar", drop_plugin), ok=False)
    assert edited.returncode == 5 and "alice/reward-scale@1.0.0 is in the lock but not in index.json" in edited.stderr

    def point_elsewhere(name, data):
        if name != "index.json":
            return data
        return data.replace(b"alice/opsd-patch:1.0.0", b"alice/opsd-patch:9.9.9")

    renamed = far.forge("bundle", "verify", rewrite(bundle, tmp_path / "renamed.tar", point_elsewhere), ok=False)
    assert renamed.returncode == 5 and "alice/opsd-patch@1.0.0" in renamed.stderr

    data = bundle.read_bytes()
    cut = tmp_path / "cut.tar"
    offset = data.index(layer_member(bundle, "alice/reward-scale:1.0.0").encode())
    cut.write_bytes(data[: offset + 512 + 40])  # ends 40 bytes into that archive
    truncated = far.forge("bundle", "verify", cut, ok=False)
    assert truncated.returncode == 5 and "truncated" in truncated.stderr and "alice/reward-scale@1.0.0" in truncated.stderr


def test_signed_bundle_verifies_against_the_trust_file_on_the_far_side(near, far, locked, tmp_path):
    exp = locked(str(tmp_path / "registry-a"), sign=True)
    near.forge("bundle", "create", exp, "-o", tmp_path / "signed.tar")
    sigs = [d for d in index_of(tmp_path / "signed.tar")["manifests"]
            if d.get("artifactType") == "application/vnd.starforge.signature.v1+json"]
    assert len(sigs) == 2

    # No key trusted on the far side yet: --require-signatures refuses.
    refused = far.forge("bundle", "verify", tmp_path / "signed.tar", "--require-signatures", ok=False)
    assert refused.returncode == 9 and "no key is trusted for owner alice" in refused.stderr
    pub = next((near.home).rglob("default.pub"))
    far.forge("trust", "add", "alice", pub)
    out = far.forge("bundle", "verify", tmp_path / "signed.tar", "--require-signatures")
    assert "(signature: verified)" in out.stdout

    # A stripped signature is an error, not a downgrade, once the owner has trusted keys.
    def strip(name, data):
        if name != "index.json":
            return data
        index = json.loads(data)
        index["manifests"] = [d for d in index["manifests"] if d not in sigs[:1]]
        return json.dumps(index).encode()

    stripped = far.forge("bundle", "verify", rewrite(tmp_path / "signed.tar", tmp_path / "stripped.tar", strip), ok=False)
    assert stripped.returncode == 9 and "has no signature" in stripped.stderr

    # The signature crosses through bundle push: the far registry serves it, verified.
    far_reg = str(tmp_path / "far-registry")
    far.forge("bundle", "push", tmp_path / "signed.tar", "--registry", far_reg)
    pulled = far.forge("plugin", "pull", "alice/opsd-patch@1.0.0", "--registry", far_reg, "--require-signatures",
                       "-o", tmp_path / "pulled")
    assert "signature: verified" in pulled.stdout


# -- skopeo as an independent reader -------------------------------------------------------------


def test_skopeo_reads_the_bundle_and_forge_pulls_what_it_copied(near, far, bundle, tmp_path, oci_registry, skopeo):
    dest = f"docker://127.0.0.1:{oci_registry.port}/skopeo-copy/alice/reward-scale:1.0.0"
    subprocess.run([skopeo, "copy", "--dest-tls-verify=false", f"oci-archive:{bundle}:alice/reward-scale:1.0.0", dest],
                   check=True, capture_output=True, timeout=120)
    pulled = far.forge("plugin", "pull", "alice/reward-scale@1.0.0", "--registry",
                       f"oci://127.0.0.1:{oci_registry.port}/skopeo-copy", "-o", tmp_path / "pulled", "--json")
    info = json.loads(pulled.stdout)
    lock = json.loads((tmp_path / "exp" / "plugins.lock.json").read_text())
    entry = next(p for p in lock["plugins"] if p["name"] == "reward-scale")
    assert (info["tree_digest"], info["artifact_digest"]) == (entry["digest"], entry["artifact_digest"])
    assert (tmp_path / "pulled" / "reward_scale.py").is_file()


# -- push ----------------------------------------------------------------------------------------


def test_push_keeps_published_versions_immutable(near, far, bundle, tmp_path):
    far_reg = str(tmp_path / "far-registry")
    first = far.forge("bundle", "push", bundle, "--registry", far_reg)
    assert first.stdout.count("pushed alice/") == 2
    assert f"imported 2 plugins into {far_reg}" in first.stdout
    repeated = far.forge("bundle", "push", bundle, "--registry", far_reg)
    assert f"nothing to import: all 2 plugins are already in {far_reg}" in repeated.stdout and "imported" not in repeated.stdout
    again = json.loads(far.forge("bundle", "push", bundle, "--registry", far_reg, "--json").stdout)
    assert [(p["ref"], p["created"]) for p in again["plugins"]] == [
        ("alice/opsd-patch@1.0.0", False), ("alice/reward-scale@1.0.0", False)]
    assert again["registry"] == far_reg

    # Other content already published under alice/opsd-patch@1.0.0 on the far side: refused, naming both.
    other_reg = str(tmp_path / "other-registry")
    src = write_plugin(tmp_path / "other-src", "opsd-patch", extra="CHANGED = True\n")
    far.forge("plugin", "publish", src, "--registry", other_reg)
    theirs = json.loads(far.forge("plugin", "show", "alice/opsd-patch@1.0.0", "--registry", other_reg, "--json").stdout)
    ours = json.loads((tmp_path / "exp" / "plugins.lock.json").read_text())["plugins"][0]["digest"]
    refused = far.forge("bundle", "push", bundle, "--registry", other_reg, ok=False)
    assert refused.returncode == 8
    assert theirs["tree_digest"] in refused.stderr and ours in refused.stderr


def test_copy_carries_data_prep_plugins_between_laptops(near, tmp_path):
    # data-prep plugins travel between laptops (forge prep runs them there); they only never enter a job
    reg_a, reg_b = str(tmp_path / "a"), str(tmp_path / "b")
    near.forge("plugin", "publish", write_plugin(tmp_path / "prep", "shard-data", kind="data-prep"), "--registry", reg_a)
    near.forge("plugin", "copy", "alice/shard-data", "--from", reg_a, "--to", reg_b)
    shown = json.loads(near.forge("plugin", "show", "alice/shard-data@1.0.0", "--registry", reg_b, "--json").stdout)
    source = json.loads(near.forge("plugin", "show", "alice/shard-data@1.0.0", "--registry", reg_a, "--json").stdout)
    assert shown["tree_digest"] == source["tree_digest"] and shown["manifest"]["kind"] == "data-prep"


# -- the whole flow across the gap ---------------------------------------------------------------


@pytest.mark.parametrize("far_kind", ["directory", pytest.param("oci", marks=pytest.mark.oci)])
def test_publish_lock_bundle_then_push_and_submit_on_the_far_side(near, far, tmp_path, private_registry, far_kind):
    registry_a = private_registry()
    exp = tmp_path / "exp"
    for name in ("opsd-patch", "reward-scale"):
        near.forge("plugin", "publish", write_plugin(tmp_path / "src" / name, name), "--registry", registry_a.url)
    write_experiment(exp, ["alice/opsd-patch@1.0.0", "alice/reward-scale@1.0.0"], registry_a.url)
    near.forge("lock", exp)
    lock_before = (exp / "plugins.lock.json").read_bytes()
    near.forge("bundle", "create", exp, "-o", tmp_path / "exp.bundle.tar")

    # The gap: registry A is gone, and the far side has its own (empty) home and cache.
    registry_a.stop()
    carried = tmp_path / "far" / "exp"
    shutil.copytree(exp, carried)
    far.forge("bundle", "verify", tmp_path / "exp.bundle.tar")
    if far_kind == "oci":
        far_url = private_registry().url
    else:
        far_url = str(tmp_path / "far" / "registry")
    far.forge("bundle", "push", tmp_path / "exp.bundle.tar", "--registry", far_url)

    env = {"FORGE_REGISTRY": far_url}
    far.forge("lock", carried, "--check", env=env)
    run = far.forge("submit", carried, env=env, cwd=carried)
    assert "opsd-patch 1.0.0 installed" in run.stdout and "reward-scale 1.0.0 installed" in run.stdout
    assert "trainer ran" in run.stdout
    assert (carried / "plugins.lock.json").read_bytes() == lock_before  # the lock is unchanged
    spec = json.loads(far.forge("submit", carried, "--dry-run", env=env, cwd=carried).stdout)
    locked = {p["name"]: p["digest"] for p in json.loads(lock_before)["plugins"]}
    assert {p["name"]: p["digest"] for p in spec["plugins"]} == locked


def test_on_the_far_side_the_hint_names_the_far_registry_and_bundle_push(near, far, tmp_path):
    """Without FORGE_REGISTRY the far side uses its own default registry; the lock names the
    near side's directory, which is not on this machine: the hint must not send the user
    back across the gap."""
    near_reg = tmp_path / "near-registry"
    near.forge("plugin", "publish", write_plugin(tmp_path / "src" / "opsd-patch", "opsd-patch"), "--registry", near_reg)
    exp = tmp_path / "exp"
    (exp).mkdir()
    (exp / "trainer.py").write_text("print('trainer ran', flush=True)\n")
    (exp / "forge.yaml").write_text("schema: forge/job/v1\nname: gap\nentrypoint: python trainer.py\n"
                                    "plugins: [alice/opsd-patch@1.0.0]\nconfig: {}\n")
    near.forge("lock", exp, "--registry", near_reg)
    near.forge("bundle", "create", exp, "-o", tmp_path / "exp.bundle.tar", "--registry", near_reg)
    shutil.rmtree(near_reg)  # the gap
    far_default = far.home / "registry"
    far.forge("plugin", "publish", write_plugin(tmp_path / "src" / "other", "other"), cwd=tmp_path)  # it exists

    for args in (("lock", exp, "--check"), ("submit", exp)):
        failed = far.forge(*args, ok=False, cwd=exp)
        assert failed.returncode in (7, 15), failed.stderr
        hint = failed.stderr.split("hint: ", 1)[1]
        assert f"the lock was made with registry {near_reg}, which is not on this machine" in hint
        assert f"forge bundle push FILE --registry {far_default}" in hint
        assert f"--registry {near_reg}" not in hint and f"FORGE_REGISTRY={near_reg}" not in hint

    # following the hint works
    far.forge("bundle", "push", tmp_path / "exp.bundle.tar", "--registry", far_default)
    far.forge("lock", exp, "--check")


def test_on_the_far_side_a_forge_yaml_registry_across_the_gap_gets_the_bundle_push_hint(near, far, locked, tmp_path):
    """forge.yaml carried across names the near side's directory registry, absent here."""
    near_reg = tmp_path / "registry-a"
    exp = locked(str(near_reg))
    near.forge("bundle", "create", exp, "-o", tmp_path / "exp.bundle.tar")
    shutil.rmtree(near_reg)
    for args in (("lock", exp, "--check"), ("submit", exp)):
        failed = far.forge(*args, ok=False, cwd=exp)
        assert failed.returncode == 7, failed.stderr
        hint = failed.stderr.split("hint: ", 1)[1]
        assert f"registry {near_reg} is not on this machine" in hint
        assert "forge bundle push FILE --registry URL, then set FORGE_REGISTRY" in hint
        assert f"--registry {near_reg}" not in hint


# -- plugin copy ---------------------------------------------------------------------------------


def test_copy_mirrors_versions_and_signatures_between_two_oci_registries(near, far, tmp_path, oci_registry, private_registry):
    registry_b = private_registry()
    near.forge("key", "generate")
    for version in ("1.0.0", "1.1.0"):
        src = write_plugin(tmp_path / "src" / version, "opsd-patch", version)
        near.forge("plugin", "publish", src, "--registry", oci_registry.url, "--sign")
    out = near.forge("plugin", "copy", "alice/opsd-patch", "--from", oci_registry.url, "--to", registry_b.url)
    assert "copied alice/opsd-patch@1.0.0" in out.stdout and "copied alice/opsd-patch@1.1.0" in out.stdout
    again = near.forge("plugin", "copy", "alice/opsd-patch@~=1.1", "--from", oci_registry.url, "--to", registry_b.url)
    assert "already there alice/opsd-patch@1.1.0" in again.stdout and "1.0.0" not in again.stdout

    far.forge("trust", "add", "alice", next(near.home.rglob("default.pub")))
    pulled = far.forge("plugin", "pull", "alice/opsd-patch@1.0.0", "--registry", registry_b.url, "--require-signatures",
                       "-o", tmp_path / "pulled")
    assert "signature: verified" in pulled.stdout

    # Into a directory registry, exactly what a lock names.
    exp = write_experiment(tmp_path / "exp", ["alice/opsd-patch@==1.0.0"], oci_registry.url)
    near.forge("lock", exp)
    dir_reg = str(tmp_path / "mirror")
    near.forge("plugin", "copy", "--lock", exp, "--from", oci_registry.url, "--to", dir_reg)
    listed = json.loads(near.forge("plugin", "list", "--registry", dir_reg, "--json").stdout)
    assert "1.1.0" not in json.dumps(listed) and "1.0.0" in json.dumps(listed)
    near.forge("lock", exp, "--check", env={"FORGE_REGISTRY": dir_reg})


def test_a_mirror_made_with_skopeo_keeps_signatures_that_require_signatures_accepts(near, far, tmp_path, private_registry,
                                                                                    skopeo):
    """The docs' skopeo commands: ``sync --all`` of a repository, ``copy --all`` of each tag.
    skopeo rewrites the referrers index (tag ``sha256-<hex>``) without the descriptors'
    ``artifactType``; forge reads it from each referrer's own manifest."""
    source, mirror = private_registry(), private_registry()
    near.forge("key", "generate")
    for name in ("opsd-patch", "reward-scale"):
        near.forge("plugin", "publish", write_plugin(tmp_path / "src" / name, name), "--registry", source.url, "--sign")
    tls = ["--src-tls-verify=false", "--dest-tls-verify=false"]
    subprocess.run([skopeo, "sync", "--all", "--src", "docker", "--dest", "docker", *tls,
                    f"127.0.0.1:{source.port}/forge/alice/opsd-patch", f"127.0.0.1:{mirror.port}/forge/alice"],
                   check=True, capture_output=True, timeout=180)
    repo = "forge/alice/reward-scale"
    tags = json.loads(subprocess.run([skopeo, "list-tags", "--tls-verify=false", f"docker://127.0.0.1:{source.port}/{repo}"],
                                     check=True, capture_output=True, timeout=60).stdout)["Tags"]
    assert any(t.startswith("sha256-") for t in tags) and "1.0.0" in tags
    for tag in tags:
        subprocess.run([skopeo, "copy", "--all", *tls, f"docker://127.0.0.1:{source.port}/{repo}:{tag}",
                        f"docker://127.0.0.1:{mirror.port}/{repo}:{tag}"], check=True, capture_output=True, timeout=180)
    signature_tag = next(t for t in tags if t.startswith("sha256-"))
    index = json.loads(subprocess.run([skopeo, "inspect", "--raw", "--tls-verify=false",
                                       f"docker://127.0.0.1:{mirror.port}/{repo}:{signature_tag}"],
                                      check=True, capture_output=True, timeout=60).stdout)
    assert index["manifests"] and all("artifactType" not in d for d in index["manifests"])  # what skopeo wrote

    # The far side trusts alice's key and requires signatures: the mirror serves them.
    far.forge("trust", "add", "alice", next(near.home.rglob("default.pub")))
    exp = write_experiment(tmp_path / "exp", ["alice/opsd-patch@1.0.0", "alice/reward-scale@1.0.0"], mirror.url)
    far.forge("lock", exp, "--require-signatures")
    assert all(p["signature"]["key_id"] for p in json.loads((exp / "plugins.lock.json").read_text())["plugins"])
    pulled = far.forge("plugin", "pull", "alice/reward-scale@1.0.0", "--registry", mirror.url, "--require-signatures",
                       "-o", tmp_path / "pulled")
    assert "signature: verified" in pulled.stdout

    # The version's tag alone, without the referrers tag: refused as stripped, never used unsigned.
    subprocess.run([skopeo, "copy", "--all", *tls, f"docker://127.0.0.1:{source.port}/{repo}:1.0.0",
                    f"docker://127.0.0.1:{mirror.port}/bare/alice/reward-scale:1.0.0"], check=True, capture_output=True,
                   timeout=180)
    bare = far.forge("plugin", "pull", "alice/reward-scale@1.0.0", "--registry", f"oci://127.0.0.1:{mirror.port}/bare",
                     "-o", tmp_path / "bare", ok=False)
    assert bare.returncode == 9 and "has no signature, but owner alice has trusted keys" in bare.stderr


# -- refusals on the way -------------------------------------------------------------------------


def test_create_refuses_a_damaged_cache_entry_and_fetches_it_again_next_time(near, locked, tmp_path):
    exp = locked(str(tmp_path / "registry-a"))
    near.forge("bundle", "create", exp, "-o", tmp_path / "first.tar")
    entry = json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]
    cached = next(near.home.rglob(entry["artifact_digest"].partition(":")[2]))
    data = bytearray(cached.read_bytes())
    data[50] ^= 1
    cached.write_bytes(bytes(data))
    bad = near.forge("bundle", "create", exp, "-o", tmp_path / "second.tar", ok=False)
    assert bad.returncode == 5 and "damaged" in bad.stderr and not (tmp_path / "second.tar").exists()
    near.forge("bundle", "create", exp, "-o", tmp_path / "second.tar")
    assert (tmp_path / "second.tar").read_bytes() == (tmp_path / "first.tar").read_bytes()


def test_push_refuses_a_tampered_bundle_and_data_prep_plugins_writing_nothing(far, bundle, tmp_path):
    target = layer_member(bundle, "alice/opsd-patch:1.0.0")
    flipped = rewrite(bundle, tmp_path / "flip.tar", lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n == target else d)
    far_reg = tmp_path / "far-registry"
    bad = far.forge("bundle", "push", flipped, "--registry", far_reg, ok=False)
    assert bad.returncode == 5 and "alice/opsd-patch@1.0.0" in bad.stderr and not far_reg.exists()

    # A bundle carrying a data-prep plugin (a lock never names one; this bundle was made by hand).
    from starforge.bundle.create import write_bundle
    from starforge.experiment.lock import entry_from_tree
    from starforge.experiment.lockfile import LockFile
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.store import PluginStore

    prep_reg = DirectoryRegistry(tmp_path / "prep-registry")
    far.forge("plugin", "publish", write_plugin(tmp_path / "prep", "shard-data", kind="data-prep"), "--registry", prep_reg.root)
    info = prep_reg.get(OWNER, "shard-data", "1.0.0")
    archive = prep_reg.root / "blobs" / "sha256" / info.artifact_digest.partition(":")[2]
    lock = LockFile(plugins=(entry_from_tree(info, PluginStore(prep_reg).tree_of(info), "alice/shard-data@1.0.0", None),), registry=str(prep_reg.root))
    write_bundle(tmp_path / "prep.tar", lock.to_json().encode(), [(info, archive, None)])
    far.forge("bundle", "verify", tmp_path / "prep.tar")
    refused = far.forge("bundle", "push", tmp_path / "prep.tar", "--registry", far_reg, ok=False)
    assert refused.returncode == 2 and "alice/shard-data@1.0.0 is a data-prep plugin" in refused.stderr
    assert not far_reg.exists()


def test_create_refuses_a_moved_tag_naming_both_digests(near, locked, tmp_path):
    registry = tmp_path / "registry-a"
    exp = locked(str(registry))
    record = registry / "plugins" / "alice" / "opsd-patch" / "1.0.0.json"
    data = json.loads(record.read_text())
    locked_digest, moved = data["tree_digest"], "sf1:" + "0" * 64
    record.write_text(json.dumps({**data, "tree_digest": moved}))
    refused = near.forge("bundle", "create", exp, "-o", tmp_path / "b.tar", ok=False)
    assert refused.returncode == 15 and "moved tag" in refused.stderr
    assert locked_digest in refused.stderr and moved in refused.stderr
    assert not (tmp_path / "b.tar").exists()


def test_a_version_signed_after_locking_shows_in_the_lock_and_the_bundle(near, locked, tmp_path):
    registry = str(tmp_path / "registry-a")
    exp = locked(registry)
    near.forge("bundle", "create", exp, "-o", tmp_path / "before.tar")
    near.forge("key", "generate")
    near.forge("plugin", "publish", tmp_path / "src" / "opsd-patch", "--registry", registry, "--sign")
    relocked = near.forge("lock", exp)
    assert "alice/opsd-patch@1.0.0: signature recorded (sha256:" in relocked.stdout
    entry = json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]
    near.forge("bundle", "create", exp, "-o", tmp_path / "after.tar")
    assert (tmp_path / "after.tar").read_bytes() != (tmp_path / "before.tar").read_bytes()
    sig = next(d for d in index_of(tmp_path / "after.tar")["manifests"]
               if d.get("artifactType") == "application/vnd.starforge.signature.v1+json")
    envelope_digest = json.loads(read_member(tmp_path / "after.tar", "blobs/sha256/" + sig["digest"][7:]))["layers"][0]["digest"]
    assert envelope_digest == entry["signature"]["envelope_digest"]


def test_progress_bars_on_a_terminal_and_none_off_it(near, locked, tmp_path):
    script = shutil.which("script")
    if script is None:
        pytest.skip("util-linux 'script' is not installed")
    exp = locked(str(tmp_path / "registry-a"))
    forge = f"{sys.executable} -m starforge"
    out = subprocess.run([script, "-qec", f"{forge} bundle create {exp} -o {tmp_path / 'tty.tar'} && "
                                          f"{forge} bundle verify {tmp_path / 'tty.tar'}", "/dev/null"],
                         env=near.env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "bundle tty.tar" in out.stdout and "verify tty.tar" in out.stdout and "━" in out.stdout
    piped = near.forge("bundle", "verify", tmp_path / "tty.tar")
    assert "━" not in piped.stdout + piped.stderr
