"""`forge plugin yank` / `unyank` (SPEC §18): a statement stored beside the version in
directory and real OCI registries, the newest enforced one winning, shown by `plugin show`
and `plugin list`; whose word counts; a remembered yank that disappears is tampering."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.registry_world import OWNER, User, write_plugin
from support.users import system_user

NAME, VERSION = "opsd-patch", "1.0.0"
REF = f"{OWNER}/{NAME}@{VERSION}"


def _publish(user: User, registry: str, tmp_path: Path, version: str = VERSION, *extra) -> None:
    user.forge("plugin", "publish", write_plugin(tmp_path / f"src-{version}", version=version), "--registry", registry,
               *extra)


def _show(user: User, registry: str, ref: str = REF, ok=True):
    return user.forge("plugin", "show", ref, "--registry", registry, "--json", ok=ok)


def _yank_json(user: User, registry: str, ref: str = REF) -> dict:
    return json.loads(_show(user, registry, ref).stdout)["yank"]


def test_a_yank_is_stored_beside_the_version_and_shown_until_unyanked(user, registry, tmp_path):
    _publish(user, registry, tmp_path)
    _publish(user, registry, tmp_path, "1.1.0")
    out = user.forge("plugin", "yank", f"{OWNER}/{NAME}@1.1.0", "--registry", registry,
                     "--reason", "advantage sign flipped in the clip")
    assert out.stdout.startswith("yanked alice/opsd-patch@1.1.0 (#1, unsigned): advantage sign flipped")
    facts = _yank_json(user, registry, f"{OWNER}/{NAME}@1.1.0")
    assert facts["yanked"] and facts["reason"] == "advantage sign flipped in the clip"
    assert facts["statement"]["sequence"] == 1 and facts["statement"]["standing"] == "unsigned"
    assert not _yank_json(user, registry)["yanked"]  # the other version is untouched

    shown = user.forge("plugin", "show", f"{OWNER}/{NAME}@1.1.0", "--registry", registry).stdout
    assert "yank:            yanked (#1, unsigned" in shown and "advantage sign flipped" in shown
    listed = user.forge("plugin", "list", "--registry", registry)
    assert "1.0.0, 1.1.0 (yanked)" in listed.stdout
    assert "alice/opsd-patch@1.1.0 yanked: advantage sign flipped in the clip" in listed.stdout
    rows = json.loads(user.forge("plugin", "list", "--registry", registry, "--json").stdout)
    assert rows[0]["latest"] == "1.0.0" and list(rows[0]["yanked"]) == ["1.1.0"]

    # the version itself stays: pullable, same files
    user.forge("plugin", "pull", f"{OWNER}/{NAME}@1.1.0", "--registry", registry, "-o", tmp_path / "pulled")
    assert (tmp_path / "pulled" / "plugin.yaml").exists()

    out = user.forge("plugin", "unyank", f"{OWNER}/{NAME}@1.1.0", "--registry", registry)
    assert out.stdout.startswith("unyanked alice/opsd-patch@1.1.0 (#2, unsigned)")
    facts = _yank_json(user, registry, f"{OWNER}/{NAME}@1.1.0")
    assert not facts["yanked"] and facts["statement"]["action"] == "unyank" and facts["statement"]["sequence"] == 2
    rows = json.loads(user.forge("plugin", "list", "--registry", registry, "--json").stdout)
    assert rows[0]["latest"] == "1.1.0" and rows[0]["yanked"] == {}


def test_for_an_owner_with_trusted_keys_only_a_signed_yank_counts(user, registry, tmp_path):
    user.forge("key", "generate")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    _publish(user, registry, tmp_path, VERSION, "--sign")
    out = user.forge("plugin", "yank", REF, "--registry", registry, "--reason", "anyone with write access")
    assert "shown as unverified and changes nothing" in out.stderr
    facts = _yank_json(user, registry)
    assert not facts["yanked"] and facts["unverified"][0]["reason"] == "anyone with write access"
    assert "unverified yank #1 (anyone with write access): changes nothing" in \
        user.forge("plugin", "show", REF, "--registry", registry).stdout

    out = user.forge("plugin", "yank", REF, "--registry", registry, "--reason", "divisor off by the group size", "--sign")
    assert "(#2, signed with key " in out.stdout
    facts = _yank_json(user, registry)
    assert facts["yanked"] and facts["statement"]["standing"] == "verified"
    assert facts["reason"] == "divisor off by the group size"

    # an unsigned unyank is shown, and the signed yank still holds
    user.forge("plugin", "unyank", REF, "--registry", registry)
    facts = _yank_json(user, registry)
    assert facts["yanked"] and [s["action"] for s in facts["unverified"]] == ["yank", "unyank"]

    # a user who does not trust the owner's key takes the newest statement on the registry's word
    other = User(tmp_path / "other")
    facts = _yank_json(other, registry)
    assert not facts["yanked"] and facts["statement"]["sequence"] == 3


def test_bad_yank_requests_are_refused_cleanly(user, registry, tmp_path):
    _publish(user, registry, tmp_path)
    missing = user.forge("plugin", "yank", f"{OWNER}/{NAME}@9.9.9", "--registry", registry, "--reason", "x", ok=False)
    assert missing.returncode == 7 and "9.9.9" in missing.stderr
    no_reason = user.forge("plugin", "yank", REF, "--registry", registry, ok=False)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    ranged = user.forge("plugin", "yank", f"{OWNER}/{NAME}@>=1.0", "--registry", registry, "--reason", "x", ok=False)
    assert ranged.returncode == 2 and "names no exact version" in ranged.stderr
    not_yanked = user.forge("plugin", "unyank", REF, "--registry", registry, ok=False)
    assert not_yanked.returncode == 2 and "is not yanked" in not_yanked.stderr
    assert not _yank_json(user, registry)["yanked"]


def _statements_dir(registry: str) -> Path:
    return Path(registry) / "plugins" / OWNER / NAME / f"{VERSION}.yanks"


def test_a_remembered_yank_that_disappears_is_tampering(user, tmp_path):
    registry = str(tmp_path / "registry")
    user.forge("key", "generate")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    _publish(user, registry, tmp_path, VERSION, "--sign")
    user.forge("plugin", "yank", REF, "--registry", registry, "--reason", "sign flip", "--sign")
    kept = tmp_path / "kept"
    shutil.copytree(_statements_dir(registry), kept)
    user.forge("plugin", "unyank", REF, "--registry", registry, "--sign")
    user.forge("plugin", "yank", REF, "--registry", registry, "--reason", "still wrong", "--sign")
    assert _yank_json(user, registry)["statement"]["sequence"] == 3

    # the newest yank removed: the older unyank would bring the version back
    newest = [p for p in _statements_dir(registry).iterdir() if p.name not in {q.name for q in kept.iterdir()}]
    by_seq = {json.loads(__import__("base64").b64decode(json.loads(p.read_bytes())["payload"]))["sequence"]: p
              for p in newest}
    by_seq[3].unlink()
    out = _show(user, registry, ok=False)
    assert out.returncode == 6
    assert "was yanked (#3" in out.stderr and "older unyank #2" in out.stderr and "still wrong" in out.stderr

    # an unyank numbered like the removed yank, signed by the owner's own key, does not take its place
    from starforge.registry.factory import open_registry
    from starforge.registry.yank import canonical_payload, make_envelope
    from starforge.signatures.signing import load_private_key

    info = open_registry(registry).get(OWNER, NAME, VERSION)
    key = load_private_key(user.home / "keys" / "default.key")
    twin = make_envelope(canonical_payload("unyank", OWNER, NAME, VERSION, info.tree_digest, "", "2026-01-01T00:00:00Z",
                                           3), key)
    open_registry(registry).attach_yank_statement(OWNER, NAME, VERSION, info.tree_digest, twin)
    out = _show(user, registry, ok=False)
    assert out.returncode == 6 and "serves the unyank #3 instead" in out.stderr

    # every statement removed
    shutil.rmtree(_statements_dir(registry))
    out = _show(user, registry, ok=False)
    assert out.returncode == 6 and "serves no yank of it" in out.stderr


def test_a_statement_for_another_version_is_tampering(user, tmp_path):
    registry = str(tmp_path / "registry")
    _publish(user, registry, tmp_path)
    _publish(user, registry, tmp_path, "1.1.0")
    user.forge("plugin", "yank", f"{OWNER}/{NAME}@1.1.0", "--registry", registry, "--reason", "bad")
    moved = Path(registry) / "plugins" / OWNER / NAME / "1.1.0.yanks"
    shutil.copytree(moved, _statements_dir(registry))
    out = _show(user, registry, ok=False)
    assert out.returncode == 6 and "answers for alice/opsd-patch@1.1.0" in out.stderr


@pytest.mark.oci
def test_on_oci_a_yank_is_a_referrer_of_the_version_and_one_request_reads_it(user, oci_registry, tmp_path):
    import httpx

    from starforge.registry.factory import open_registry

    registry = f"oci://127.0.0.1:{oci_registry.port}/yank-{tmp_path.name.replace('_', '-').lower()[-30:]}"
    _publish(user, registry, tmp_path)
    user.forge("plugin", "yank", REF, "--registry", registry, "--reason", "sign flip")
    repo = f"{registry.split('/', 3)[3]}/{OWNER}/{NAME}"
    base = f"http://127.0.0.1:{oci_registry.port}/v2/{repo}"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    digest = httpx.head(f"{base}/manifests/{VERSION}", headers=accept).headers["docker-content-digest"]
    index = httpx.get(f"{base}/manifests/sha256-{digest.split(':')[1]}",
                      headers={"Accept": "application/vnd.oci.image.index.v1+json"}).json()
    kinds = [d["artifactType"] for d in index["manifests"]]
    assert kinds == ["application/vnd.starforge.yank.v1+json"]
    assert _yank_json(user, registry)["reason"] == "sign flip"

    # the warm path's question, answered with one request by the tree digest alone
    reg = open_registry(registry)
    info = reg.get(OWNER, NAME, VERSION)
    asked = []
    reg.client.request = (lambda original: lambda *a, **k: asked.append(a[:2]) or original(*a, **k))(reg.client.request)
    assert len(reg.yank_statements(OWNER, NAME, VERSION, info.tree_digest)) == 1
    assert len(asked) == 1 and asked[0][0] == "GET"
    asked.clear()
    assert reg.yank_statements(OWNER, NAME, "1.0.0", "sf1:" + "0" * 64) == [] and len(asked) == 1


def test_a_teammate_who_cannot_write_the_registry_reads_its_yanks_but_cannot_add_one(user, tmp_path):
    # As root every file is writable: an ordinary user shows what the registry's modes allow.
    import os
    import site
    import subprocess
    import sys
    import tempfile

    other = "forge-other"
    system_user(other, "to act as another user")
    path = os.pathsep.join([str(Path(__file__).resolve().parents[2]), *site.getsitepackages()])
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"  # this one may sit in root's home
    python = next((c for c in (os.path.realpath(sys.executable), shutil.which(version, path="/usr/local/bin:/usr/bin"))
                   if c and subprocess.run(["runuser", "-u", other, "--", "env", f"PYTHONPATH={path}", c, "-c",
                                            "import starforge.cli.main, click, yaml, cryptography"],
                                           capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip("the second user can reach no interpreter of this version with this checkout and its packages")
    work = Path(tempfile.mkdtemp(prefix="forge-yank-", dir="/tmp"))
    try:
        work.chmod(0o755)
        registry = str(work / "registry")
        old = os.umask(0o022)
        try:
            _publish(user, registry, tmp_path)
            user.forge("plugin", "yank", REF, "--registry", registry, "--reason", "sign flip")
        finally:
            os.umask(old)
        home = work / "other-home"
        home.mkdir()
        subprocess.run(["chown", other, str(home)], check=True)

        def as_other(*args):
            env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "FORGE_HOME": str(home), "HOME": str(home)}
            return subprocess.run(["runuser", "-u", other, "--", "env", *[f"{k}={v}" for k, v in env.items()],
                                   python, "-m", "starforge", *args], cwd=home, capture_output=True, text=True,
                                  timeout=300)

        shown = as_other("plugin", "show", REF, "--registry", registry, "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["yank"]["reason"] == "sign flip"
        assert (home / "yanks" / OWNER / NAME).is_dir()  # remembered in the teammate's own home

        before = sorted(p.name for p in _statements_dir(registry).iterdir())
        refused = as_other("plugin", "unyank", REF, "--registry", registry)
        assert refused.returncode == 6 and "Traceback" not in refused.stderr, refused.stderr
        assert "permission denied" in refused.stderr.lower() and "hint:" in refused.stderr
        assert sorted(p.name for p in _statements_dir(registry).iterdir()) == before
    finally:
        shutil.rmtree(work)
