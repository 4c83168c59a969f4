"""Plugin metadata comes from the digest-verified tree (SPEC §5), attacked as a registry writer would.

Whoever can write the registry edits a version's record — a parameter default, ``kind``,
``top_level``, ``entrypoint``, ``load``, ``requires``, ``targets`` — in a directory registry
(the JSON record) and in a real OCI registry (a new config blob under the same tag, the
signature re-attached to the new manifest: the envelope signs the tree digest, so it still
verifies). The tree's ``plugin.yaml`` is covered by the digest, so every command that acts on
the metadata refuses the edited record as tampered (exit 6), naming the field.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.registry_world import OWNER, User, write_experiment, write_plugin

FIXTURE = Path(__file__).resolve().parent.parent / "experiment" / "fixtures" / "lock-before-tree-rule"


# -- editing a version's record, as whoever can write the registry ----------------------------


def edit_record(registry: str, name: str, version: str, edit) -> None:
    """Apply ``edit(manifest, top_level) -> top_level`` to the stored record of alice/NAME@VERSION."""
    if registry.startswith("oci://"):
        _edit_oci(registry, name, version, edit)
        return
    path = Path(registry) / "plugins" / OWNER / name / f"{version}.json"
    record = json.loads(path.read_text())
    record["top_level"] = edit(record["manifest"], list(record["top_level"]))
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _edit_oci(url: str, name: str, version: str, edit) -> None:
    """A new config blob under the same tag (annotations kept consistent with it), the old
    signature envelope re-attached to the new manifest."""
    from starforge.registry.artifact import ANN_TOP_LEVEL, CONFIG_TYPE, canonical_json, descriptor
    from starforge.registry.oci import OciRegistry
    from starforge.registry.oci_client import OCI_MANIFEST

    with OciRegistry(url) as reg:
        repo = reg.repository(OWNER, name)
        info = reg.get(OWNER, name, version)
        envelope = reg.signature(info)
        got = reg.client.get_manifest(repo, version)
        data = got.json()
        config = json.loads(reg.client.read_blob(repo, data["config"]["digest"], data["config"]["size"], 1 << 20))
        config["top_level"] = edit(config["manifest"], list(config["top_level"]))
        raw = canonical_json(config)
        reg.client.push_blob(repo, raw, descriptor(CONFIG_TYPE, raw)["digest"], len(raw))
        data["config"] = descriptor(CONFIG_TYPE, raw)
        data["annotations"][ANN_TOP_LEVEL] = ",".join(config["top_level"])
        body = canonical_json(data)
        reg.client.put_manifest(repo, version, body, OCI_MANIFEST)
        if envelope is not None:
            subject = {"mediaType": OCI_MANIFEST, "digest": descriptor(OCI_MANIFEST, body)["digest"], "size": len(body)}
            reg._attach_signature(repo, subject, envelope, f"{OWNER}/{name}@{version}")


def set_default(value):
    def edit(manifest, top_level):
        manifest["params"]["opsd.scale"]["default"] = value
        return top_level
    return edit


def set_field(key, value):
    def edit(manifest, top_level):
        manifest[key] = value
        return top_level
    return edit


def add_top_level(*names):
    def edit(manifest, top_level):
        return sorted(top_level + list(names))
    return edit


def _published(user: User, registry: str, tmp_path: Path, *, sign: bool = False) -> Path:
    if sign:
        user.forge("key", "generate")
        user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, *(["--sign"] if sign else []))
    return write_experiment(tmp_path / "exp", registry)


def _tampered(proc, *fields) -> str:
    assert proc.returncode == 6, proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: registry ") and " is tampered: the registry record of alice/opsd-patch@1.0.0 " in first
    assert "disagrees with plugin.yaml in its verified tree (sf1:" in first
    assert first.endswith(" in " + ", ".join(fields)), first
    return first


# -- the attacks ------------------------------------------------------------------------------


def test_an_injected_param_default_is_refused_by_lock_and_never_reaches_a_job(user, registry, tmp_path):
    exp = _published(user, registry, tmp_path)
    edit_record(registry, "opsd-patch", "1.0.0", set_default(1000.0))
    _tampered(user.forge("lock", exp, ok=False), "params")
    assert not (exp / "plugins.lock.json").exists()


def test_kind_switched_to_environment_on_a_signed_trusted_plugin_is_refused(user, registry, tmp_path):
    exp = _published(user, registry, tmp_path, sign=True)
    edit_record(registry, "opsd-patch", "1.0.0", set_field("kind", "environment"))
    proc = user.forge("lock", exp, ok=False)
    _tampered(proc, "kind")
    assert "signature verified" not in proc.stdout
    assert not (exp / "plugins.lock.json").exists()


def test_extra_top_level_names_are_refused(user, registry, tmp_path):
    exp = _published(user, registry, tmp_path)
    edit_record(registry, "opsd-patch", "1.0.0", add_top_level("trainer", "json"))
    _tampered(user.forge("lock", exp, ok=False), "top_level")


@pytest.mark.parametrize("field,value", [
    ("entrypoint", "opsd_patch:other"),
    ("load", "deferred"),
    ("requires", {"python": ">=3.10", "packages": {"evil": ">=0"}}),
    ("targets", ["trainer", "torch.optim"]),
])
def test_an_edited_entrypoint_load_requires_or_targets_is_refused(user, registry, tmp_path, field, value):
    exp = _published(user, registry, tmp_path)
    edit_record(registry, "opsd-patch", "1.0.0", set_field(field, value))
    _tampered(user.forge("lock", exp, ok=False), field)


def test_lock_check_refuses_drift_instead_of_hinting_to_accept_it(user, registry, tmp_path):
    exp = _published(user, registry, tmp_path)
    user.forge("lock", exp)
    before = (exp / "plugins.lock.json").read_bytes()
    edit_record(registry, "opsd-patch", "1.0.0", set_default(1000.0))
    check = user.forge("lock", "--check", exp, ok=False)
    _tampered(check, "params")
    assert "hint: run: forge lock" not in check.stderr
    # and the suggested fix of old, forge lock, does not take the edited values either
    _tampered(user.forge("lock", exp, ok=False), "params")
    assert (exp / "plugins.lock.json").read_bytes() == before
    run = user.forge("submit", exp)  # the lock still holds what the tree says
    assert "trainer sees opsd.scale=1.0" in run.stdout


def test_a_hand_edited_lock_entry_is_refused_by_check_and_by_submit(user, tmp_path):
    exp = _published(user, str(tmp_path / "registry"), tmp_path)
    user.forge("lock", exp)
    lock = exp / "plugins.lock.json"
    data = json.loads(lock.read_text())
    data["plugins"][0]["params"]["opsd.scale"]["default"] = 1000.0
    lock.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    check = user.forge("lock", "--check", exp, ok=False)
    assert check.returncode == 6
    assert ("error: plugins.lock.json is tampered: the lock entry of alice/opsd-patch@1.0.0 disagrees with plugin.yaml "
            "in its verified tree (sf1:") in check.stderr and check.stderr.splitlines()[0].endswith(" in params")
    submit = user.forge("submit", exp, ok=False)
    assert submit.returncode == 6 and "the lock entry of alice/opsd-patch@1.0.0" in submit.stderr
    assert "opsd.scale=1000" not in submit.stdout


def test_bundle_create_refuses_an_edited_record(user, registry, tmp_path):
    exp = _published(user, registry, tmp_path)
    user.forge("lock", exp)
    edit_record(registry, "opsd-patch", "1.0.0", set_default(1000.0))
    _tampered(user.forge("bundle", "create", exp, "-o", tmp_path / "b.tar", ok=False), "params")
    assert not (tmp_path / "b.tar").exists()


def test_plugin_copy_refuses_an_edited_record(user, registry, tmp_path):
    _published(user, registry, tmp_path)
    edit_record(registry, "opsd-patch", "1.0.0", set_field("kind", "environment"))
    target = tmp_path / "mirror"
    _tampered(user.forge("plugin", "copy", "alice/opsd-patch", "--from", registry, "--to", target, ok=False), "kind")
    assert not (target / "plugins").exists()


def recraft(bundle: Path, out: Path, edit) -> Path:
    """A consistent forgery of *bundle*: ``edit(blob_json) -> blob_json | None`` changes the
    JSON blobs it wants; every manifest, signature subject and index entry naming a changed
    blob is rewritten with the new digest and size, so every blob digest checks out."""
    import hashlib
    import tarfile

    from starforge.bundle.layout import layout_header
    from starforge.registry.artifact import canonical_json

    with tarfile.open(bundle) as tar:
        members = [(m.name, m.isdir(), None if m.isdir() else tar.extractfile(m).read()) for m in tar.getmembers()]
    blobs = {n: d for n, isdir, d in members if not isdir}

    def as_json(data):
        try:
            return json.loads(data)
        except ValueError:
            return None

    changed: dict = {}
    for name, data in list(blobs.items()):
        doc = as_json(data) if name.startswith("blobs/") else None
        if isinstance(doc, dict):
            new = edit(doc)
            if new is not None:
                is_lock = str(new.get("schema", "")).startswith("forge/lock/")
                raw = (json.dumps(new, indent=2, sort_keys=True) + "\n").encode() if is_lock else canonical_json(new)
                changed["sha256:" + name.rsplit("/", 1)[1]] = raw

    def walk(node):
        if isinstance(node, dict):
            d = node.get("digest")
            node = {k: walk(v) for k, v in node.items()}
            if isinstance(d, str) and d in renamed:
                node["digest"], node["size"] = renamed[d]
            return node
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    renamed: dict = {}
    while changed:
        for old, raw in changed.items():
            new_digest = "sha256:" + hashlib.sha256(raw).hexdigest()
            del blobs["blobs/sha256/" + old[7:]]
            blobs["blobs/sha256/" + new_digest[7:]] = raw
            renamed[old] = (new_digest, len(raw))
        changed = {}
        for name, data in list(blobs.items()):
            doc = as_json(data) if name.startswith("blobs/") else None
            if isinstance(doc, dict) and ("layers" in doc or "manifests" in doc):
                raw = canonical_json(walk(doc))
                if raw != data:
                    changed["sha256:" + name.rsplit("/", 1)[1]] = raw
    blobs["index.json"] = canonical_json(walk(json.loads(blobs["index.json"])))
    with open(out, "wb") as dst:
        for name, isdir, _ in members:
            if isdir:
                dst.write(layout_header(name, 0, directory=True))
        for name in ["oci-layout", "index.json"] + sorted(n for n in blobs if n.startswith("blobs/")):
            data = blobs[name]
            dst.write(layout_header(name, len(data)) + data + b"\0" * (-len(data) % 512))
        dst.write(b"\0" * 1024)
    return out


def _bundled(user: User, tmp_path: Path) -> Path:
    exp = _published(user, str(tmp_path / "registry"), tmp_path, sign=True)
    user.forge("lock", exp)
    user.forge("bundle", "create", exp, "-o", tmp_path / "good.tar")
    return tmp_path / "good.tar"


def test_bundle_verify_and_push_refuse_a_forged_config(user, tmp_path):
    good = _bundled(user, tmp_path)

    def inject(doc):
        if doc.get("schema") == "forge/oci-config/v1":
            doc["manifest"]["params"]["opsd.scale"]["default"] = 1000.0
            return doc
        return None

    bad = recraft(good, tmp_path / "bad.tar", inject)
    far = User(tmp_path / "far")
    far.env["FORGE_HOME"] = str(user.home)  # the same trust file: the signature still verifies
    for args in (("bundle", "verify", bad), ("bundle", "push", bad, "--registry", tmp_path / "far-registry")):
        proc = far.forge(*args, ok=False)
        assert proc.returncode == 6, proc.stderr
        first = proc.stderr.splitlines()[0]
        assert first.startswith(f"error: bundle {bad} is tampered: the config of alice/opsd-patch@1.0.0 disagrees")
        assert first.endswith(" in params")
    assert not (tmp_path / "far-registry").exists()


def test_bundle_verify_refuses_a_forged_lock_entry_in_the_bundle(user, tmp_path):
    good = _bundled(user, tmp_path)

    def retarget(doc):
        if doc.get("schema") == "forge/lock/v2":
            doc["plugins"][0]["kind"] = "environment"
            return doc
        return None

    bad = recraft(good, tmp_path / "bad.tar", retarget)
    proc = user.forge("bundle", "verify", bad, ok=False)
    assert proc.returncode == 6, proc.stderr
    assert f"bundle {bad}: plugins.lock.json is tampered: the lock entry of alice/opsd-patch@1.0.0" in proc.stderr
    assert proc.stderr.splitlines()[0].endswith(" in kind")


def test_a_lock_written_by_the_previous_release_stays_valid(user, tmp_path):
    """The fixture's lock was written before the tree rule, against an honest registry: an int
    default for a float, a specifier set in another order, a distribution name not canonical,
    targets in their written order, a nested default mapping."""
    registry = tmp_path / "registry"
    user.forge("plugin", "publish", FIXTURE / "plugin", "--registry", registry)
    exp = tmp_path / "exp"
    shutil.copytree(FIXTURE, exp, ignore=shutil.ignore_patterns("plugin"))
    before = (exp / "plugins.lock.json").read_bytes()
    user.forge("lock", "--check", exp, "--registry", registry)
    out = user.forge("lock", exp, "--registry", registry)
    assert "unchanged" in out.stdout
    assert (exp / "plugins.lock.json").read_bytes() == before
    run = user.forge("submit", exp, "--registry", registry)
    assert "plugin  : alice/mixed-patch@2.1 registered" in run.stdout

    # the same lock in the v1 format (which recorded a verdict) is still read and rewritten
    data = json.loads(before)
    data["schema"] = "forge/lock/v1"
    data["plugins"][0]["signature"] = {"status": "unsigned"}
    (exp / "plugins.lock.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    assert "rewrote plugins.lock.json from forge/lock/v1" in user.forge("lock", exp, "--registry", registry).stdout
    assert json.loads((exp / "plugins.lock.json").read_text())["plugins"] == json.loads(before)["plugins"]
