"""examples/verl-main-ppo: verl's own entrypoint, ``python -m verl.trainer.main_ppo`` with Hydra
overrides, through `forge plugin publish` -> `forge lock` -> `forge submit` on the local backend.

As committed the example ends with Hydra's ``--cfg job --resolve``: verl's Hydra composes its
``ppo_trainer`` config with the overrides and prints it, and nothing trains. Hydra writes its
run directory (``outputs/<date>/<time>``, relative) only when it runs verl's ``main``; a
second submit does, with a ``loss_scale_factor`` the plugin refuses in verl's own config
validation, in the driver, before Ray starts: that run's ``outputs/`` lands in the job's
working directory ``work/``, never in the staged ``recipe/``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from frameworks_env import REPO
from support.examples import copy_example
from test_examples_submit import Forge

pytestmark = pytest.mark.frameworks

DRIVER_ONLY = "\n  --cfg job --resolve\n"  # the entrypoint's last line in forge.yaml
REFUSED = "actor_rollout_ref.actor.loss_scale_factor=100"


def _submit(forge: Forge, exp: Path) -> tuple:
    """``forge submit --json``: (the job record, the job's output lines); forge exits with the job's code."""
    proc = forge.run("submit", str(exp), "--json", timeout=300)
    record = json.loads(proc.stdout)
    assert record["exit_code"] == proc.returncode, (proc.stdout, proc.stderr[-4000:])
    return record, proc.stderr.splitlines()


def _printed_config(lines: list) -> dict:
    """The YAML Hydra printed: the lines after the launcher's, without verl's log and warnings."""
    start = max(i for i, ln in enumerate(lines) if ln.startswith("plugin  : ")) + 1
    body = [ln for ln in lines[start:] if not ln.startswith(("WARNING:", "job ", "  warnings.warn"))
            and ": UserWarning: " not in ln]
    return yaml.safe_load("\n".join(body))


def test_verl_main_ppo_prints_its_config_and_a_hydra_run_writes_outputs_in_work(tmp_path):
    forge = Forge("verl", "VERL_PYTHON", tmp_path)
    exp = tmp_path / "verl-main-ppo"
    copy_example("verl-main-ppo", exp)
    assert (exp / "forge.yaml").read_text().count(DRIVER_ONLY) == 1
    forge("plugin", "publish", str(REPO / "forge_plugins" / "verl-dr-grpo"))
    forge("lock", str(exp))

    record, lines = _submit(forge, exp)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), "\n".join(lines[-40:])
    forge.assert_ran_in_job_python(lines)
    assert "plugin  : starforge/verl-dr-grpo@1.1.0 loaded" in lines
    config = _printed_config(lines)
    actor = config["actor_rollout_ref"]["actor"]
    assert config["algorithm"]["adv_estimator"] == "dr_grpo"  # the plugin's names, selected by the overrides
    assert actor["policy_loss"]["loss_mode"] == "dr_grpo"
    assert actor["loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert config["actor_rollout_ref"]["rollout"]["response_length"] == 512  # resolved from data.max_response_length
    assert config["trainer"]["experiment_name"] == "verl-main-ppo"
    assert actor["loss_scale_factor"] is None  # --cfg job stops before verl's validation (where the plugin fills it)
    job = Path(record["dir"])
    # the plugin's patches, in the process that ran verl's entrypoint: its registry entries created
    [prov] = [json.loads(p.read_text()) for p in (job / "provenance").glob("*.json")]
    assert [(p["target"], p["status"], p["created"]) for p in prov["patches"]] == [
        ("verl.trainer.ppo.core_algos:ADV_ESTIMATOR_REGISTRY[dr_grpo]", "applied", True),
        ("verl.trainer.ppo.core_algos:POLICY_LOSS_REGISTRY[dr_grpo]", "applied", True),
        ("verl.workers.utils.losses:ppo_loss", "applied", False),
        ("verl.utils.config:validate_config", "applied", False),
    ]
    assert not (job / "work" / "outputs").exists()  # Hydra's --cfg composes and prints; it writes no run directory

    # Hydra's run mode: verl's main() runs its config validation in the driver, where the plugin
    # refuses a divisor other than the generation bound; Hydra has written its run directory by then
    run = tmp_path / "verl-main-ppo-run"
    shutil.copytree(exp, run, ignore=shutil.ignore_patterns(".forge"))
    spec = run / "forge.yaml"
    spec.write_text(spec.read_text().replace(DRIVER_ONLY, f"\n  {REFUSED}\n"))
    record, lines = _submit(forge, run)
    assert (record["status"], record["exit_code"], record["exit_source"]) == ("failed", 1, "job"), "\n".join(lines[-40:])
    assert ("ValueError: verl-dr-grpo: actor loss_scale_factor=100 differs from rollout.response_length=512; "
            "Dr-GRPO divides by the generation bound: leave loss_scale_factor unset or equal to it") in lines
    job = Path(record["dir"])
    [hydra_run] = (job / "work" / "outputs").glob("*/*")  # outputs/<date>/<time>, relative to the job's work/
    overrides = yaml.safe_load((hydra_run / ".hydra" / "overrides.yaml").read_text())
    assert overrides[0] == "algorithm.adv_estimator=dr_grpo" and overrides[-1] == REFUSED
    assert (hydra_run / ".hydra" / "config.yaml").is_file() and (hydra_run / "main_ppo.log").is_file()
    _, shown = forge("jobs", "show", record["id"])  # what the user is told: Hydra's 4 files, in work/
    assert f"outputs  : {job / 'work'} (4 files, " in shown, shown
    assert sorted(p.name for p in (job / "recipe").iterdir()) == [".gitignore", "forge.yaml", "plugins.lock.json"]
