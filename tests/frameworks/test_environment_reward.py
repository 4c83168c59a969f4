"""An environment plugin providing TRL's reward function (SPEC §17, docs/frameworks.md):
examples/environments/yes-reward, published, locked with examples/trl and loaded by
train_grpo.py through ``load_environment`` in the trainer venv (no starforge-core there: the
job's runtime zip carries the API), its result handed to ``GRPOTrainer(reward_funcs=[...])``."""

from __future__ import annotations

import pytest
from frameworks_env import REPO
from test_examples_submit import Forge, _experiment, _values

pytestmark = pytest.mark.frameworks


def test_trl_reward_function_from_an_environment_plugin(tmp_path):
    forge = Forge("trl", "TRL_PYTHON", tmp_path)
    exp = _experiment(tmp_path, "trl")
    forge("plugin", "publish", str(REPO / "forge_plugins" / "trl-dr-grpo"))
    forge("plugin", "publish", str(REPO / "examples" / "environments" / "yes-reward"))
    text = (exp / "forge.yaml").read_text()
    (exp / "forge.yaml").write_text(text.replace("plugins: [starforge/trl-dr-grpo@~=1.0]",
                                                 "plugins: [starforge/trl-dr-grpo@~=1.0, starforge/yes-reward@~=1.0]"))
    forge("lock", str(exp))
    skipped = "plugin  : starforge/yes-reward@1.0.0 skipped (kind environment: left to the environment mechanism)"

    _, builtin = forge("submit", str(exp))
    assert skipped in builtin.splitlines()
    assert not any(ln.startswith("reward: ") for ln in builtin.splitlines())

    _, plugin = forge("submit", str(exp), "--set", "train.reward_environment=yes-reward")
    lines = plugin.splitlines()
    forge.assert_ran_in_job_python(lines)
    assert skipped in lines
    assert "reward: yes-reward (environment plugin) provides yes_reward" in lines
    # the plugin's function with its default word is the built-in reward: the same run
    assert _values(plugin, "rewards = ") == _values(builtin, "rewards = ")
    assert _values(plugin, "weights checksum = ") == _values(builtin, "weights checksum = ")

    # its declared param reaches it through the job's hyperparams: another word, other rewards
    _, other = forge("submit", str(exp), "--set", "train.reward_environment=yes-reward", "--set", "yes_reward.word=no")
    assert "reward: yes-reward (environment plugin) provides yes_reward" in other.splitlines()
    assert _values(other, "rewards = ") != _values(builtin, "rewards = ")
