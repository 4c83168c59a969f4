"""`forge plan` against examples/trl, examples/verl, examples/verl-main-ppo and examples/cosmos: the load phase under
the trainer venv named by `python:` (the framework really imported), the ledger naming the
framework targets the reference plugins patch, and nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from frameworks_env import COSMOS_CPU, REPO, clean_env, trainer_python
from support.cli import forge as run_forge
from support.examples import copy_example

from starforge.cli.plan import render

pytestmark = pytest.mark.frameworks


def _plan(tmp: Path, example: str, plugin: str | tuple, variable: str, venv: str, text: bool = True, **extra_env) -> tuple:
    exp = tmp / example
    copy_example(example, exp)
    scratch = tmp / "scratch"
    scratch.mkdir()
    job_python = str(trainer_python(venv))
    env = clean_env(FORGE_HOME=str(tmp / "home"), FORGE_OWNER="starforge", TMPDIR=str(scratch), **{variable: job_python},
                    **extra_env)

    def forge(*args):
        # in this process (no interpreter start, no imports); the load phase is a process of its own either way
        proc = run_forge(*args, cwd=tmp, env=env, timeout=300)
        assert proc.returncode == 0, f"forge {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    for name in (plugin,) if isinstance(plugin, str) else plugin:
        forge("plugin", "publish", str(REPO / "forge_plugins" / name))
    forge("lock", str(exp))
    doc = json.loads(forge("plan", str(exp), "--json"))
    assert doc["python"]["executable"] == job_python
    assert not (exp / ".forge").exists() and list(scratch.iterdir()) == []
    # the text form is forge plan's rendering of this very ledger (one load phase, not a second)
    return doc, "\n".join(render(doc)) if text else None


def test_plan_of_the_trl_example(tmp_path):
    doc, text = _plan(tmp_path, "trl", "trl-dr-grpo", "TRL_PYTHON", "trl")
    assert doc["clean"] is True
    [plugin] = doc["plugins"]
    assert (plugin["ref"], plugin["status"]) == ("starforge/trl-dr-grpo@1.1.0", "loaded")
    assert [(p["how"], p["target"], p["status"]) for p in plugin["patches"]] == [
        ("wrap", "trl.trainer.grpo_trainer:GRPOTrainer.__init__", "applied"),
    ]
    assert {"module": "trl.trainer.grpo_trainer", "ok": True, "error": None} in doc["imports"]
    assert "    wrap                     trl.trainer.grpo_trainer:GRPOTrainer.__init__" in text.splitlines()


def test_plan_of_the_verl_example(tmp_path):
    doc, _ = _plan(tmp_path, "verl", "verl-dr-grpo", "VERL_PYTHON", "verl", text=False)
    assert doc["clean"] is True
    [plugin] = doc["plugins"]
    assert [(p["how"], p["mode"], p["target"]) for p in plugin["patches"]] == [
        ("created", "replace", "verl.trainer.ppo.core_algos:ADV_ESTIMATOR_REGISTRY[dr_grpo]"),
        ("created", "replace", "verl.trainer.ppo.core_algos:POLICY_LOSS_REGISTRY[dr_grpo]"),
        ("wrap", "wrap", "verl.workers.utils.losses:ppo_loss"),
        ("wrap", "wrap", "verl.utils.config:validate_config"),
    ]  # (and no wrap of verl's default-trainer grouping: TransferQueue, which that trainer needs, is not installed)


def test_plan_of_the_verl_main_ppo_example(tmp_path):
    # verl's own entrypoint (python -m verl.trainer.main_ppo): the plan never runs it, and shows the
    # plugin's entries in verl's registries that the example's Hydra overrides select (one plan, JSON)
    doc, _ = _plan(tmp_path, "verl-main-ppo", "verl-dr-grpo", "VERL_PYTHON", "verl", text=False)
    assert doc["clean"] is True
    [plugin] = doc["plugins"]
    assert (plugin["ref"], plugin["status"]) == ("starforge/verl-dr-grpo@1.1.0", "loaded")
    assert [(p["how"], p["target"], p["status"]) for p in plugin["patches"]] == [
        ("created", "verl.trainer.ppo.core_algos:ADV_ESTIMATOR_REGISTRY[dr_grpo]", "applied"),
        ("created", "verl.trainer.ppo.core_algos:POLICY_LOSS_REGISTRY[dr_grpo]", "applied"),
        ("wrap", "verl.workers.utils.losses:ppo_loss", "applied"),
        ("wrap", "verl.utils.config:validate_config", "applied"),
    ]
    assert {"module": "verl.trainer.ppo.core_algos", "ok": True, "error": None} in doc["imports"]


def test_plan_of_the_cosmos_example(tmp_path):
    # the CPU import shims of the test setup reach the load phase through the caller's PYTHONPATH; one plan
    # (JSON) only: each imports cosmos_rl, seconds of CPU
    doc, _ = _plan(tmp_path, "cosmos", ("cosmos-dr-grpo", "cosmos-gspo"), "COSMOS_PYTHON", "cosmos", text=False,
                   PYTHONPATH=str(COSMOS_CPU))
    assert doc["clean"] is True
    assert [(p["ref"], p["status"]) for p in doc["plugins"]] == [
        ("starforge/cosmos-dr-grpo@1.1.0", "loaded"), ("starforge/cosmos-gspo@1.0.0", "loaded")]
    dr_grpo, gspo = ([(p["how"], p["mode"], p["target"], p["status"]) for p in plugin["patches"]]
                     for plugin in doc["plugins"])
    assert dr_grpo == [
        ("created", "replace", "cosmos_rl.dispatcher.algo.base:REGISTERED_ALGOs[dr_grpo]", "applied"),
        ("wrap", "wrap", "cosmos_rl.policy.config:Config.from_dict", "applied"),
        ("wrap", "wrap", "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:compute_loss", "applied"),
        ("wrap", "wrap", "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:GRPOTrainer.step_training", "applied"),
    ]
    assert gspo == [
        ("wrap", "wrap", "cosmos_rl.policy.config:Config.from_dict", "applied"),
        ("wrap", "wrap", "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:compute_loss", "applied"),
    ]
    assert {"module": "cosmos_rl", "ok": True, "error": None} in doc["imports"]
