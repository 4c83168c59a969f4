"""An environment plugin loaded in a Ray actor (a reward actor) of a job on a real Ray head:
``load_environment`` in a process the launcher never saw, bootstrapped from the job's
environment by Ray's setup hook, the plugin imported from verified bytes and recorded in
that worker's provenance."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ray import _node_job_dir, _provenance, _results, _submit

pytestmark = pytest.mark.ray


def write_tree(root: Path, files: dict) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

REWARD_PLUGIN = {
    "plugin.yaml": """\
schema: forge/plugin/v1
name: length-reward
version: 1.0.0
kind: environment
entrypoint: length_reward:make_reward
params:
  length_reward.per_word: {type: float, default: 1.0}
""",
    "length_reward.py": """\
import os

def make_reward(params, **ctx):
    per_word = params["length_reward.per_word"] * ctx["scale"]
    built_in = os.getpid()

    def reward(text):
        return {"score": per_word * len(text.split()), "built_in": built_in}

    return reward
""",
}

RECIPE = {
    "rewards/__init__.py": "",
    "rewards/train.py": """\
import json
import os

import ray


@ray.remote
class RewardActor:
    def __init__(self):
        from starforge.plugins import load_environment

        self.reward = load_environment("length-reward", scale=2.0)

    def score(self, texts):
        return {"pid": os.getpid(), "scores": [self.reward(t) for t in texts]}


def main():
    ray.init()
    out = ray.get(RewardActor.remote().score.remote(["a b", "a b c"]))
    print("RESULTS " + json.dumps([out, {"driver": os.getpid()}]), flush=True)


if __name__ == "__main__":
    main()
""",
}


def test_a_ray_reward_actor_loads_the_environment_plugin(ray_client, forge_home, tmp_path: Path):
    import yaml

    from starforge.experiment.config import load_experiment
    from starforge.experiment.lock import lock_experiment
    from starforge.registry.factory import open_registry
    from starforge.registry.publish import publish_plugin

    registry = str(tmp_path / "registry")
    write_tree(tmp_path / "src" / "length-reward", REWARD_PLUGIN)
    publish_plugin(tmp_path / "src" / "length-reward", open_registry(registry), "tester")
    exp = tmp_path / "exp"
    write_tree(exp, RECIPE)
    (exp / "forge.yaml").write_text(yaml.safe_dump({
        "schema": "forge/job/v1", "name": "ray-reward", "entrypoint": "python -m rewards.train",
        "plugins": ["tester/length-reward@1.0.0"], "config": {"length_reward": {"per_word": 1.5}},
        "backend": "ray", "registry": registry,
    }, sort_keys=False))
    lock_experiment(load_experiment(exp), open_registry(registry))

    sub, record, log = _submit(exp, tmp_path)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert "plugin  : tester/length-reward@1.0.0 skipped (kind environment: left to the environment mechanism)" in log
    actor, driver = _results(log)
    # per_word 1.5 from the job's config, scale 2.0 from the actor's ctx; built once, in the actor
    assert [s["score"] for s in actor["scores"]] == [6.0, 9.0]
    assert {s["built_in"] for s in actor["scores"]} == {actor["pid"]} and actor["pid"] != driver["driver"]

    records = {r["pid"]: r for r in _provenance(_node_job_dir(ray_client, record))}
    (plugin,) = records[actor["pid"]]["plugins"]
    assert (plugin["status"], plugin["trigger"], plugin["check"], plugin["ctx_keys"]) == (
        "loaded", "load_environment", "files", ["scale"])
    assert plugin["hashed_files"] == ["length_reward.py"]
    launcher = next(r for r in records.values() if r["role"] == "launcher")
    assert (launcher["plugins"][0]["status"], launcher["plugins"][0]["verified"]) == ("skipped", True)
