"""What a user copies from examples/: the lock is committed with forge.yaml, and the toy
trainer's own keys are listed in the quickstart's config (so --set needs no '+')."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.examples import copy_example

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("quickstart", "trl", "verl")


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_copied_experiment_commits_its_lock(tmp_path, example):
    copy = tmp_path / example
    copy_example(example, copy)
    (copy / "plugins.lock.json").write_text("{}\n")  # what forge lock writes
    (copy / ".forge" / "jobs").mkdir(parents=True)
    (copy / ".forge" / "jobs" / "job.json").write_text("{}\n")  # what forge submit writes
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-C", str(copy)]
    subprocess.run(git[:-2] + ["init", "-q", str(copy)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    staged = subprocess.run(git + ["diff", "--cached", "--name-only"], check=True, capture_output=True, text=True).stdout.split()
    assert "plugins.lock.json" in staged and "forge.yaml" in staged
    assert not any(name.startswith(".forge/") for name in staged)


def test_the_quickstart_config_lists_every_key_the_toy_trainer_reads():
    sys.path.insert(0, str(REPO / "examples" / "quickstart"))
    try:
        from toy_grpo.train import DEFAULTS
    finally:
        sys.path.remove(str(REPO / "examples" / "quickstart"))
    from starforge.experiment.config import load_experiment

    config = load_experiment(REPO / "examples" / "quickstart").flat_config()
    assert set(DEFAULTS) <= set(config), sorted(set(DEFAULTS) - set(config))
    assert {k: config[k] for k in DEFAULTS} == DEFAULTS  # the listed values are the trainer's defaults
