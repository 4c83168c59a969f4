"""The recall story of docs/recall.md, its yank and job steps (1-7), as users run them.

A Dr-GRPO patch (forge_plugins/dr-grpo) is published with a divisor bug and locked by the
quickstart experiment, and two experiments run it; its publisher yanks it, signed; `jobs list
--yanked` finds the two runs (one of them removed since); the fixed version is locked and runs
on the local backend; a bundle of the old lock carries the yank across the gap, and the far
side's `lock --check` refuses the yanked version (exit 18) until it takes the fixed one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.registry_world import OWNER, User

REPO = Path(__file__).resolve().parents[1]
REASON = "advantages divided by the group size a second time (sign and scale of every update wrong)"


def _dr_grpo(dest: Path, version: str, *, buggy: bool) -> Path:
    shutil.copytree(REPO / "forge_plugins" / "dr-grpo", dest)
    manifest = dest / "plugin.yaml"
    manifest.write_text(manifest.read_text().replace("version: 2.0.0", f"version: {version}"))
    if buggy:
        code = dest / "dr_grpo.py"
        text = code.read_text()
        assert "out.extend(r - mean for r in group)" in text
        code.write_text(text.replace("out.extend(r - mean for r in group)",
                                     "out.extend((r - mean) / group_size for r in group)"))
    return dest


def _experiment(dest: Path, registry: str) -> Path:
    shutil.copytree(REPO / "examples" / "quickstart", dest, ignore=shutil.ignore_patterns(".forge", "plugins.lock.json"))
    config = dest / "forge.yaml"
    text = config.read_text().replace("plugins: [starforge/opsd-patch@~=1.2]", f"plugins: [{OWNER}/dr-grpo@~=2.0]")
    config.write_text(text + f"registry: {registry}\n")
    return dest


def test_a_yanked_patch_is_refused_here_and_across_the_gap(tmp_path):
    near, far = User(tmp_path / "near"), User(tmp_path / "far")
    near_reg, far_reg = str(tmp_path / "near-registry"), str(tmp_path / "far-registry")
    near.forge("key", "generate")
    public = near.home / "keys" / "default.pub"
    for side in (near, far):
        side.forge("trust", "add", OWNER, public)

    # 1. the buggy patch is published, signed, and locked by the experiment
    near.forge("plugin", "publish", _dr_grpo(tmp_path / "buggy", "2.0.1", buggy=True), "--registry", near_reg, "--sign")
    exp = _experiment(tmp_path / "exp", near_reg)
    near.forge("lock", exp)
    assert json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]["version"] == "2.0.1"
    last_week = tmp_path / "last-week"  # the experiment as a far team received it before the bug was found
    shutil.copytree(exp, last_week)

    # 2. two experiments run it
    ran = []
    for where, scale in ((exp, "0.5"), (last_week, "2.0")):
        out = near.forge("submit", where, "--set", "grpo.steps=2", "--set", "grpo.report_steps=1",
                         "--set", f"opsd.scale={scale}", "--json")
        ran.append(json.loads(out.stdout)["id"])
    near.forge("jobs", "rm", ran[1])  # its files go; what it ran stays known

    # 3. its publisher yanks it, signed
    out = near.forge("plugin", "yank", f"{OWNER}/dr-grpo@2.0.1", "--reason", REASON, "--sign", "--registry", near_reg)
    assert "signed with key" in out.stdout
    assert near.forge("lock", exp, "--check", ok=False).returncode == 18

    # 5. which jobs ran it: both, the removed one included, with the reason
    listed = json.loads(near.forge("jobs", "list", "--yanked", "--registry", near_reg, "--json").stdout)
    assert {j["id"]: j["removed"] for j in listed} == {ran[0]: False, ran[1]: True}  # both may share one second
    assert all(REASON in line for j in listed for line in j["ran"])
    text = near.forge("jobs", "list", "--yanked", "--param", "opsd.scale=2", "--registry", near_reg).stdout
    assert ran[1] in text and ran[0] not in text

    # 4. the fixed version is published and locked; the job runs it
    near.forge("plugin", "publish", _dr_grpo(tmp_path / "fixed", "2.0.2", buggy=False), "--registry", near_reg, "--sign")
    out = near.forge("lock", exp)
    assert f"alice/dr-grpo 2.0.1 -> 2.0.2 (2.0.1 is yanked: {REASON})" in out.stdout
    near.forge("lock", exp, "--check")
    job = near.forge("submit", exp, "--set", "grpo.steps=2", "--set", "grpo.report_steps=1", "--json")
    record = json.loads(job.stdout)
    assert record["status"] == "succeeded" and record["ran_yanked"] == []
    assert "alice/dr-grpo@2.0.2" in job.stderr
    yanked_runs = json.loads(near.forge("jobs", "list", "--yanked", "--registry", near_reg, "--json").stdout)
    assert record["id"] not in [j["id"] for j in yanked_runs]

    # 6. a bundle of last week's lock carries the version and its yank to the far side
    near.forge("bundle", "create", last_week, "-o", tmp_path / "last-week.tar")
    far.forge("bundle", "push", tmp_path / "last-week.tar", "--registry", far_reg)

    # 7. there, lock --check refuses the yanked version, with the reason; submit too
    for command in (("lock", last_week, "--check", "--registry", far_reg),
                    ("submit", last_week, "--registry", far_reg)):
        out = far.forge(*command, ok=False)
        assert out.returncode == 18, out.stderr
        assert "alice/dr-grpo@2.0.1 is yanked (as of " in out.stderr and REASON in out.stderr

    # and once the fixed version crosses the gap too, the far lock moves to it
    near.forge("bundle", "create", exp, "-o", tmp_path / "fixed.tar")
    far.forge("bundle", "push", tmp_path / "fixed.tar", "--registry", far_reg)
    out = far.forge("lock", last_week, "--registry", far_reg)
    assert "alice/dr-grpo 2.0.1 -> 2.0.2" in out.stdout
    far.forge("lock", last_week, "--check", "--registry", far_reg)


SAVE_CHECKPOINT = """\
import json, os
from starforge.plugins import hyperparams
from toy_grpo import train

result = train.run(hyperparams())
ckpt = os.path.join(os.environ["FORGE_OUTPUT_DIR"], "checkpoint-final")
os.makedirs(ckpt, exist_ok=True)
with open(os.path.join(ckpt, "policy.json"), "w") as f:
    json.dump(result["history"], f)
with open(os.path.join(ckpt, "tokenizer.json"), "w") as f:
    json.dump({"vocab": 4, "eos": 0}, f)
"""


def _checkpointing(exp: Path, lustre: Path) -> Path:
    (exp / "save_checkpoint.py").write_text(SAVE_CHECKPOINT)
    config = exp / "forge.yaml"
    text = config.read_text().replace("entrypoint: python -m toy_grpo.train", "entrypoint: python save_checkpoint.py")
    config.write_text(text + f"outputs: [{lustre}/$FORGE_JOB_ID]\n")
    return exp


def test_the_checkpoints_of_a_yanked_patch_are_traced_and_audit_gates_ci(tmp_path):
    """Steps 8-10 of docs/recall.md on the local backend: which checkpoints came out of it."""
    near, teammate = User(tmp_path / "near"), User(tmp_path / "teammate")
    registry, lustre = str(tmp_path / "registry"), tmp_path / "lustre" / "ckpt"
    near.forge("plugin", "publish", _dr_grpo(tmp_path / "buggy", "2.0.1", buggy=True), "--registry", registry)
    exp = _checkpointing(_experiment(tmp_path / "exp", registry), lustre)
    near.forge("lock", exp)
    ran = [json.loads(near.forge("submit", exp, "--set", "grpo.steps=3", "--set", "grpo.report_steps=1",
                                 "--set", f"grpo.seed={seed}", "--set", f"opsd.scale={scale}", "--json").stdout)["id"]
           for seed, scale in ((1, "0.5"), (2, "2.0"))]
    # each checkpoint directory carries its lineage: the pins with their yank facts at submit, the parameters
    sidecar, = json.loads((lustre / ran[0] / ".forge-provenance.json").read_text())["jobs"]
    assert {p["ref"]: p["yank"] for p in sidecar["plugins"]} == {f"{OWNER}/dr-grpo@2.0.1": {"yanked": False},
                                                                "recipe:reward-clip@0.1.0": None}
    assert (sidecar["job_id"], sidecar["params"]["opsd.scale"]) == (ran[0], 0.5)
    team_store = near.home / "jobs"  # the team's shared job records, as a teammate names them
    ci = teammate.forge("audit", "--store", team_store, "--json",
                        env={"FORGE_REGISTRY": registry})
    assert json.loads(ci.stdout)["found"] is False  # the CI gate passes: nothing yanked yet

    near.forge("plugin", "yank", f"{OWNER}/dr-grpo@2.0.1", "--reason", REASON, "--registry", registry)
    near.forge("jobs", "rm", ran[1])  # its job directory goes; its tombstone keeps what it wrote

    # 8. audit: both jobs, grouped under the yanked version with its reason, with their checkpoints
    out = near.forge("audit", "--json", ok=False, env={"FORGE_REGISTRY": registry})
    assert out.returncode == 22
    version, = json.loads(out.stdout)["versions"]
    assert (version["ref"], version["reason"]) == (f"{OWNER}/dr-grpo@2.0.1", REASON)
    assert [(j["id"], j["removed"]) for j in version["jobs"]] == sorted([(ran[0], False), (ran[1], True)])
    for job in version["jobs"]:
        assert job["sidecars"] == [str(lustre / job["id"])]
    text = near.forge("audit", ok=False, env={"FORGE_REGISTRY": registry}).stdout
    assert f"{OWNER}/dr-grpo@2.0.1" in text and REASON in text and str(lustre / ran[0]) in text

    # 9. a checkpoint copied to another disk (without its sidecar) is traced by content
    elsewhere = tmp_path / "scratch" / "best-model"
    shutil.copytree(lustre / ran[0] / "checkpoint-final", elsewhere)
    traced = json.loads(near.forge("trace", elsewhere, "--json", env={"FORGE_REGISTRY": registry}).stdout)
    job, = traced["jobs"]  # the other job wrote the same tokenizer: it does not decide
    assert (job["job_id"], job["source"], job["matched"], job["shared"]) == (ran[0], "content", 1, 1)
    plugins = {p["ref"]: p for p in job["plugins"]}
    assert (plugins[f"{OWNER}/dr-grpo@2.0.1"]["yanked"], plugins[f"{OWNER}/dr-grpo@2.0.1"]["reason"]) == (True, REASON)
    assert plugins["recipe:reward-clip@0.1.0"]["yanked"] is False
    assert job["params"]["opsd.scale"] == 0.5

    # 10. a teammate with an empty FORGE_HOME finds the removed job's checkpoint through its sidecar
    found = teammate.forge("trace", lustre / ran[1] / "checkpoint-final" / "policy.json",
                           env={"FORGE_REGISTRY": registry})
    assert f"written by job {ran[1]}, by the sidecar" in found.stdout
    assert "no job record of it is readable here" in found.stdout
    assert "YANKED now" in found.stdout and REASON in found.stdout
    # and the CI gate over the team's store now fails, exit 22
    gate = teammate.forge("audit", "--store", team_store, ok=False, env={"FORGE_REGISTRY": registry})
    assert gate.returncode == 22 and ran[0] in gate.stdout and ran[1] in gate.stdout
    # a run of the yanked version made knowingly: its sidecar says it was yanked at submit, and why
    again = json.loads(near.forge("submit", exp, "--allow-yanked", "--set", "grpo.steps=1", "--set", "grpo.report_steps=1",
                                  "--json").stdout)["id"]
    pins = {p["ref"]: p["yank"] for p in json.loads((lustre / again / ".forge-provenance.json").read_text())["jobs"][0]["plugins"]}
    assert pins[f"{OWNER}/dr-grpo@2.0.1"]["yanked"] is True and pins[f"{OWNER}/dr-grpo@2.0.1"]["reason"] == REASON
    assert pins[f"{OWNER}/dr-grpo@2.0.1"]["allowed_by"] == "--allow-yanked"
