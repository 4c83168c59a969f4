"""The environment fingerprint: which installed distribution provides each declared target,
the installed list's hash, the image, and what differs between two fingerprints."""

from __future__ import annotations

from starforge.cluster.fingerprint import compare, fingerprint


def _dist(site, name, version, top_level=None, record=None, package=None):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level + "\n")
    if record is not None:
        (info / "RECORD").write_text(record)
    if package:
        (site / package).mkdir(exist_ok=True)
        (site / package / "__init__.py").write_text("")


def test_providers_of_targets(tmp_path):
    site, recipe = tmp_path / "site-packages", tmp_path / "recipe"
    _dist(site, "trl", "0.19.1", package="trl")
    _dist(site, "PyYAML", "6.0.2", top_level="_yaml\nyaml", package="yaml")
    _dist(site, "protobuf", "5.29.0", record="google/protobuf/__init__.py,sha256=x,1\n", package="google")
    (recipe / "toy_grpo").mkdir(parents=True)
    (recipe / "toy_grpo" / "__init__.py").write_text("")
    fp = fingerprint(["trl.trainer.grpo_trainer", "yaml", "google.protobuf", "toy_grpo.algorithms", "vllm.engine"],
                     path=[str(recipe), str(site)], environ={"FORGE_CONTAINER_IMAGE": "sha256:abc"})
    assert fp["targets"] == {
        "trl.trainer.grpo_trainer": {"distribution": "trl", "version": "0.19.1"},
        "yaml": {"distribution": "pyyaml", "version": "6.0.2"},
        "google.protobuf": {"distribution": "protobuf", "version": "5.29.0"},
        "toy_grpo.algorithms": None,  # the recipe's own module
        "vllm.engine": None,  # not installed
    }
    assert fp["distributions"]["count"] == 3 and fp["image"] == "sha256:abc"


def test_compare_names_each_difference(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "trl", "0.19.1", package="trl")
    before = fingerprint(["trl.trainer"], path=[str(site)], environ={})
    (site / "trl-0.19.1.dist-info").rename(site / "trl-0.20.0.dist-info")
    after = fingerprint(["trl.trainer"], path=[str(site)], environ={"APPTAINER_CONTAINER": "/images/rl.sif"})
    assert compare(before, before) == []
    assert compare(before, after) == [
        "trl.trainer: trl 0.19.1 -> trl 0.20.0",
        "installed distributions differ (1 -> 1 distributions)",
        "container image: None -> /images/rl.sif",
    ]
    assert compare(None, after) == []
