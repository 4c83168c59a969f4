"""``forge catalog build`` (SPEC §19) without a browser: what the files say, honest verdicts on a
damaged registry, byte-identical rebuilds that verify only what they have not seen, directory,
OCI and bundle-pushed registries, and bad input."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest
from support.catalog import NORM, YANK_REASON, build_world, publish_hostile, write_tree
from support.oci import new_server
from support.registry_world import User

from starforge.catalog.escape import href


def build(user: User, registry, out: Path, ok: bool = True) -> dict:
    proc = user.forge("catalog", "build", "--registry", registry, "-o", out, "--json", ok=ok)
    return json.loads(proc.stdout) if ok else proc


def files_of(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def version(doc: dict, ref: str) -> dict:
    return next(v for p in doc["plugins"] for v in p["versions"] if v["ref"] == ref)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalog-world")
    return build_world(root)


def test_catalog_json_and_pages_hold_every_version_with_what_was_verified(world, tmp_path):
    user, registry = world
    result = build(user, registry, tmp_path / "site")
    assert (result["plugins"], result["versions"], result["verified"], result["problems"]) == (3, 4, 4, [])
    doc = json.loads((tmp_path / "site" / "catalog.json").read_text())
    v2 = version(doc, "alice/dr-grpo@0.2.0")
    assert v2["integrity"] == {"ok": True, "error": None}
    assert v2["signature"]["status"] == "verified"
    assert v2["signature"]["keys"] == [{"key_id": doc["trust"]["keys"][0]["key_id"], "key_type": "ed25519", "trusted": True}]
    assert v2["manifest"]["params"]["dr_grpo.norm"]["choices"] == ["token", "sequence"]
    assert v2["change"]["from"] == "0.1.0" and v2["change"]["fields"]["files"]["added"] == ["norm.py"]
    assert v2["add"] == "forge plugin add alice/dr-grpo@0.2.0"
    assert version(doc, "carol/adv-scale@1.0.0")["signature"]["status"] == "unsigned"
    assert doc["registry_state"].startswith("sha256:") and doc["trust"]["keys"][0]["owner"] == "alice"
    # a web server running as another user can read it: the folder made beside DIR is not left 0700
    assert (tmp_path / "site").stat().st_mode & 0o777 == 0o755
    page = (tmp_path / "site" / "plugins" / "alice" / "dr-grpo.html").read_text()
    assert 'id="v0.2.0"' in page and 'id="v0.1.0"' in page and doc["registry_state"] in page
    # every page carries the policy and its own script only, and names the registry's state and the keys
    for html in (tmp_path / "site").rglob("*.html"):
        text = html.read_text()
        assert text.count('http-equiv="Content-Security-Policy" content="default-src \'none\';') == 1, html
        assert text.count("<script") == 1 and "<script src" not in text and "<link" not in text, html
        assert doc["registry_state"] in text and doc["trust"]["keys_digest"] in text, html


def test_rebuilding_an_unchanged_registry_gives_the_same_bytes_and_verifies_only_new_versions(world, tmp_path):
    user, registry = world
    site = tmp_path / "site"
    first = build(user, registry, site)
    before = files_of(site)
    again = build(user, registry, site)
    assert (again["verified"], again["reused"]) == (0, 4)
    assert files_of(site) == before

    write_tree(tmp_path / "src", "adv-scale", "1.1.0", description="Scale advantages by a constant, clipped",
               targets=("toy_grpo.advantages",))
    user.forge("plugin", "publish", tmp_path / "src", "--registry", registry, "--owner", "carol")
    try:
        newer = build(user, registry, site)
        assert (newer["verified"], newer["reused"]) == (1, 4)
        assert newer["registry_state"] != first["registry_state"]
        index = (site / "index.html").read_text()
        assert newer["registry_state"] in index and first["registry_state"] not in index
        change = version(json.loads((site / "catalog.json").read_text()), "carol/adv-scale@1.1.0")["change"]
        assert change["from"] == "1.0.0" and change["fields"]["files"]["changed"] == ["plugin.yaml"]
    finally:  # the module's registry again as the other tests expect it
        for p in (Path(registry) / "plugins" / "carol" / "adv-scale").glob("1.1.0*"):
            p.unlink()


def test_under_other_trust_a_rebuild_verifies_again_and_says_so(world, tmp_path):
    user, registry = world
    site = tmp_path / "site"
    build(user, registry, site)
    stranger = User(tmp_path / "stranger")  # trusts no key
    result = build(stranger, registry, site)
    assert (result["verified"], result["reused"]) == (2, 2)  # alice's two versions; no key was trusted for the others
    doc = json.loads((site / "catalog.json").read_text())
    sig = version(doc, "alice/dr-grpo@0.2.0")["signature"]
    assert sig["status"] == "unverified" and sig["keys"][0]["trusted"] is False
    assert "under a trust file that trusts no key" in (site / "index.html").read_text()


def test_damaged_bytes_a_disagreeing_record_and_a_bad_signature_are_shown_as_such(tmp_path):
    user, registry = build_world(tmp_path / "w")
    plugin_dir = registry / "plugins" / "alice" / "dr-grpo"
    # 0.1.0: other bytes under its archive digest
    record = json.loads((plugin_dir / "0.1.0.json").read_text())
    blob = registry / "blobs" / "sha256" / record["artifact_digest"].split(":")[1]
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes()[:-20] + b"\0" * 20)
    # 0.2.0: a signature that no longer matches what it signed
    envelope = json.loads((plugin_dir / "0.2.0.dsse.json").read_text())
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[0] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (plugin_dir / "0.2.0.dsse.json").write_text(json.dumps(envelope))
    # bob's environment: a record whose description differs from its verified plugin.yaml
    env_record = registry / "plugins" / "bob" / "env-math" / "0.1.0.json"
    data = json.loads(env_record.read_text())
    data["manifest"]["params"] = {"env.evil": {"type": "int", "default": 1}}
    env_record.write_text(json.dumps(data))

    fresh = User(tmp_path / "fresh")  # an empty pull cache: every archive is fetched and checked
    fresh.forge("trust", "add", "alice", next(user.home.rglob("default.pub")))
    result = build(fresh, registry, tmp_path / "site")
    assert sorted(result["problems"]) == ["alice/dr-grpo@0.1.0", "alice/dr-grpo@0.2.0", "bob/env-math@0.1.0"]
    doc = json.loads((tmp_path / "site" / "catalog.json").read_text())
    damaged = version(doc, "alice/dr-grpo@0.1.0")
    assert damaged["integrity"]["ok"] is False and damaged["manifest"] is None
    assert version(doc, "alice/dr-grpo@0.2.0")["signature"]["status"] == "refused"
    assert "does not verify" in version(doc, "alice/dr-grpo@0.2.0")["signature"]["error"]
    env = version(doc, "bob/env-math@0.1.0")
    assert env["integrity"]["ok"] is False and "params" in env["integrity"]["error"] and env["manifest"] is None
    # a web server running as another user can read it: the folder made beside DIR is not left 0700
    assert (tmp_path / "site").stat().st_mode & 0o777 == 0o755
    page = (tmp_path / "site" / "plugins" / "alice" / "dr-grpo.html").read_text()
    assert page.count("failed verification") == 1 and "Not verified: " in page and ">refused<" in page
    index = (tmp_path / "site" / "index.html").read_text()
    assert "2 failed verification" in index and "1 failed verification" in index


def test_hostile_text_is_escaped_in_the_html_and_catalog_json(tmp_path):
    user, registry = build_world(tmp_path / "w")
    publish_hostile(registry, tmp_path / "w")
    build(user, registry, tmp_path / "site")
    for page in (tmp_path / "site").rglob("*.html"):
        raw = page.read_text()
        assert raw.count("<script") == 1 and "onfocus=\"" not in raw and "<img" not in raw, page
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069\u2028\u2029]", raw), page
    data = (tmp_path / "site" / "catalog.json").read_bytes()
    # the index offers what a bare reference would lock: not the yanked 0.2.0
    hostile = next(p for p in json.loads(data)["plugins"] if p["ref"] == "mallory/hostile")
    assert (hostile["latest"], hostile["yanked"]) == ("0.1.0", ["0.2.0"])
    assert data.isascii() and b"</script" in data  # ASCII: every control, bidi and separator as a \u escape


def test_href_lets_only_the_catalogues_own_relative_paths_through():
    assert href("javascript:alert(1)") == "#"
    assert href("JavaScript:alert(1)") == "#"
    assert href("data:text/html,x") == "#"
    assert href("//evil.example/x") == "#"
    assert href("plugins/../../../etc/passwd") == "#"
    assert href("plugins/a b/c.html") == "#"
    assert href("plugins/a%b/c.html#v1.0") == "plugins/a%25b/c.html#v1.0"
    assert href("../../index.html") == "../../index.html"


def test_a_folder_that_is_not_a_catalogue_is_refused_and_left_alone(world, tmp_path):
    user, registry = world
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me")
    proc = build(user, registry, mine, ok=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {mine} is not empty and is not a catalogue") and "hint:" in proc.stderr
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]


def test_a_failed_build_leaves_the_previous_catalogue_as_it_was(world, tmp_path):
    user, registry = world
    site = tmp_path / "site"
    build(user, registry, site)
    before = files_of(site)
    proc = user.forge("catalog", "build", "--registry", tmp_path / "empty-registry", "-o", site, ok=False)
    assert proc.returncode == 7 and "no registry" in proc.stderr and "hint:" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "forge-registry.json").write_text('{"schema": "forge/registry/v1"}')
    proc = user.forge("catalog", "build", "--registry", empty, "-o", site, ok=False)
    assert proc.returncode == 2 and "holds no plugins: there is nothing to catalogue" in proc.stderr and "hint:" in proc.stderr
    assert files_of(site) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site")) == []  # no temp folder left


def test_a_build_killed_midway_leaves_a_folder_the_next_build_removes(world, tmp_path):
    import subprocess

    from starforge.cluster.atomic import writer_tag

    user, registry = world
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".site.{dead.pid}-0@{writer_tag()}.new"  # as a build killed while writing names it
    (left / "plugins").mkdir(parents=True)
    (left / "index.html").write_text("half")
    running = tmp_path / f".site.{os.getpid()}-0@{writer_tag()}.new"  # a build still writing: left alone
    running.mkdir()
    build(user, registry, tmp_path / "site")
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name, "site"]


def test_serve_refuses_a_folder_without_a_catalogue(tmp_path):
    user = User(tmp_path / "u")
    proc = user.forge("catalog", "serve", tmp_path, "--port", "0", ok=False)
    assert proc.returncode == 2 and "holds no catalogue" in proc.stderr and "forge catalog build -o" in proc.stderr


def test_serve_on_a_port_in_use_says_so(world, tmp_path):
    import socket

    user, registry = world
    build(user, registry, tmp_path / "site")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = user.forge("catalog", "serve", tmp_path / "site", "--port", str(taken.getsockname()[1]), ok=False)
    assert proc.returncode == 2 and "error: cannot listen on 127.0.0.1:" in proc.stderr and "--port" in proc.stderr


def test_a_registry_filled_by_bundle_push_shows_its_carried_signatures(world, tmp_path):
    from support.registry_world import write_experiment

    user, registry = world
    exp = write_experiment(tmp_path / "exp", str(registry), plugins=("alice/dr-grpo@0.2.0",))
    user.forge("lock", exp)
    user.forge("bundle", "create", exp, "-o", tmp_path / "exp.bundle.tar")
    far = tmp_path / "far-registry"
    user.forge("bundle", "push", tmp_path / "exp.bundle.tar", "--registry", far)
    build(user, far, tmp_path / "site")
    doc = json.loads((tmp_path / "site" / "catalog.json").read_text())
    assert [p["ref"] for p in doc["plugins"]] == ["alice/dr-grpo"]
    assert version(doc, "alice/dr-grpo@0.2.0")["signature"]["status"] == "verified"


@pytest.fixture(scope="module")
def oci_registry(tmp_path_factory):
    server = new_server(tmp_path_factory.mktemp("catalog-oci"))
    yield server
    server.stop()


@pytest.mark.oci
def test_an_oci_registry_is_catalogued_as_a_directory_one_is(tmp_path, oci_registry):
    user = User(tmp_path / "user")
    user.forge("key", "generate")
    user.forge("trust", "add", "alice", next(user.home.rglob("default.pub")))
    for v in ("0.1.0", "0.2.0"):
        src = write_tree(tmp_path / "src" / v, "dr-grpo", v, description="Dr. GRPO advantages",
                         params={"dr_grpo.norm": NORM})
        user.forge("plugin", "publish", src, "--registry", oci_registry.url, "--sign")
    user.forge("plugin", "yank", "alice/dr-grpo@0.1.0", "--reason", YANK_REASON, "--sign", "--registry", oci_registry.url)
    first = build(user, oci_registry.url, tmp_path / "site")
    assert (first["plugins"], first["versions"], first["problems"]) == (1, 2, [])
    doc = json.loads((tmp_path / "site" / "catalog.json").read_text())
    assert doc["registry"] == oci_registry.url
    assert version(doc, "alice/dr-grpo@0.1.0")["yank"]["reason"] == YANK_REASON
    assert version(doc, "alice/dr-grpo@0.2.0")["signature"]["status"] == "verified"
    assert version(doc, "alice/dr-grpo@0.2.0")["manifest"]["params"]["dr_grpo.norm"]["choices"] == ["token", "sequence"]
    before = files_of(tmp_path / "site")
    again = build(user, oci_registry.url, tmp_path / "site")
    assert again["reused"] == 2 and files_of(tmp_path / "site") == before

    # a registry that stops serving the yank is shown as refusing its yank facts, never as "not yanked"
    user.forge("plugin", "unyank", "alice/dr-grpo@0.1.0", "--sign", "--registry", oci_registry.url)
    unyanked = build(user, oci_registry.url, tmp_path / "site")
    assert unyanked["verified"] == 1 and unyanked["registry_state"] != first["registry_state"]  # 0.1.0 only
    doc = json.loads((tmp_path / "site" / "catalog.json").read_text())
    assert version(doc, "alice/dr-grpo@0.1.0")["yank"]["yanked"] is False
    assert version(doc, "alice/dr-grpo@0.1.0")["yank"]["summary"].startswith("not yanked (unyanked #2, verified")
