"""A yank travels with its version (SPEC §18): `forge plugin copy`, `bundle create`,
`bundle verify` and `bundle push` carry every yank and unyank statement, between directory
and real OCI registries; a bundle whose statement answers for another version is refused."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from support.registry_world import OWNER, User, write_experiment, write_plugin

NAME = "opsd-patch"
REASON = "clip sign flipped"


def _url(kind: str, request, tmp_path: Path, label: str) -> str:
    if kind == "directory":
        return str(tmp_path / f"{label}-registry")
    server = request.getfixturevalue("oci_registry")
    return f"oci://127.0.0.1:{server.port}/{label}-{tmp_path.name.replace('_', '-').lower()[-36:]}"


@pytest.fixture(params=[("directory", "directory"),
                        pytest.param(("directory", "oci"), marks=pytest.mark.oci, id="dir-to-oci"),
                        pytest.param(("oci", "directory"), marks=pytest.mark.oci, id="oci-to-dir")])
def pair(request, tmp_path):
    src, dst = request.param
    return _url(src, request, tmp_path, "src"), _url(dst, request, tmp_path, "dst")


def _yank_of(user: User, registry: str, version: str = "1.0.0") -> dict:
    out = user.forge("plugin", "show", f"{OWNER}/{NAME}@{version}", "--registry", registry, "--json")
    return json.loads(out.stdout)["yank"]


def test_copy_carries_the_yank_and_the_unyank(user, pair, tmp_path):
    src, dst = pair
    user.forge("plugin", "publish", write_plugin(tmp_path / "p"), "--registry", src)
    user.forge("plugin", "yank", f"{OWNER}/{NAME}@1.0.0", "--registry", src, "--reason", REASON)
    out = user.forge("plugin", "copy", f"{OWNER}/{NAME}", "--from", src, "--to", dst)
    assert "with its 1 yank statement" in out.stdout
    reader = User(tmp_path / "reader")  # another machine: what the target registry itself says
    facts = _yank_of(reader, dst)
    assert facts["yanked"] and facts["reason"] == REASON and facts["statement"]["sequence"] == 1

    user.forge("plugin", "unyank", f"{OWNER}/{NAME}@1.0.0", "--registry", src)
    copied = json.loads(user.forge("plugin", "copy", f"{OWNER}/{NAME}", "--from", src, "--to", dst, "--json").stdout)
    assert copied["copied"][0]["yank_statements"] == 2
    facts = _yank_of(reader, dst)
    assert not facts["yanked"] and facts["statement"]["action"] == "unyank"


def test_a_bundle_carries_the_yank_to_the_far_registry(tmp_path):
    near, far = User(tmp_path / "near"), User(tmp_path / "far")
    near_reg, far_reg = str(tmp_path / "near-registry"), str(tmp_path / "far-registry")
    near.forge("plugin", "publish", write_plugin(tmp_path / "p"), "--registry", near_reg)
    exp = write_experiment(tmp_path / "exp", near_reg)
    near.forge("lock", exp)
    near.forge("plugin", "yank", f"{OWNER}/{NAME}@1.0.0", "--registry", near_reg, "--reason", REASON)
    bundle = tmp_path / "b.tar"
    near.forge("bundle", "create", exp, "-o", bundle)
    with tarfile.open(bundle) as tar:
        index = json.load(tar.extractfile("index.json"))
    assert [d["artifactType"] for d in index["manifests"]].count("application/vnd.starforge.yank.v1+json") == 1

    far.forge("bundle", "push", bundle, "--registry", far_reg)
    assert _yank_of(far, far_reg)["reason"] == REASON
    out = far.forge("lock", exp, "--check", "--registry", far_reg, ok=False)
    assert out.returncode == 18 and REASON in out.stderr


def test_a_bundled_statement_for_another_version_is_refused(tmp_path):
    near = User(tmp_path / "near")
    reg = str(tmp_path / "registry")
    near.forge("plugin", "publish", write_plugin(tmp_path / "p"), "--registry", reg)
    near.forge("plugin", "publish", write_plugin(tmp_path / "q", version="1.1.0"), "--registry", reg)
    near.forge("plugin", "yank", f"{OWNER}/{NAME}@1.1.0", "--registry", reg, "--reason", REASON)
    exp = write_experiment(tmp_path / "exp", reg)
    near.forge("lock", exp)
    # the 1.1.0 statement moved onto 1.0.0 in the registry directory: found when bundling
    yanks = Path(reg) / "plugins" / OWNER / NAME
    (yanks / "1.0.0.yanks").mkdir()
    for one in (yanks / "1.1.0.yanks").iterdir():
        (yanks / "1.0.0.yanks" / one.name).write_bytes(one.read_bytes())
    out = near.forge("bundle", "create", exp, "-o", tmp_path / "b.tar", ok=False)
    assert out.returncode == 6 and "answers for alice/opsd-patch@1.1.0" in out.stderr
    assert not (tmp_path / "b.tar").exists()
