"""forge.yaml: what is accepted, and how a mistake is reported (file, line, closest key)."""

import pytest

from starforge.errors import ManifestError
from starforge.experiment.config import flatten, load_experiment

GOOD = """\
schema: forge/job/v1
name: qwen3b-grpo-opsd
entrypoint: python -m toy_grpo.train --steps 3
plugins: [alice/opsd-patch@~=1.2, bob/gspo]
recipe:
  plugins: [reward-clip]
config:
  opsd: {scale: 1.0}
  grpo: {group_size: 8, lr: 1.0e-6}
  task.target: [1, 2]
backend: slurm
slurm: {launch: per-node}
"""


def write(tmp_path, text):
    (tmp_path / "forge.yaml").write_text(text)
    return tmp_path


def test_a_full_forge_yaml(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD))
    assert exp.name == "qwen3b-grpo-opsd"
    assert exp.entrypoint == ("python", "-m", "toy_grpo.train", "--steps", "3")
    assert [(p.owner, p.name, p.specifier) for p in exp.plugins] == [("alice", "opsd-patch", "~=1.2"), ("bob", "gspo", None)]
    assert exp.recipe_plugins == ("reward-clip",)
    assert exp.flat_config() == {"opsd.scale": 1.0, "grpo.group_size": 8, "grpo.lr": 1e-6, "task.target": [1, 2]}
    assert exp.backend == "slurm" and exp.backend_settings("slurm") == {"launch": "per-node"}
    assert exp.plugins[0].line == 4


def test_defaults(tmp_path):
    exp = load_experiment(write(tmp_path, "schema: forge/job/v1\nname: x\nentrypoint: [python, train.py]\n"))
    assert (exp.plugins, exp.recipe_plugins, exp.config, exp.backend, exp.strict_deferred) == ((), (), {}, "local", False)
    assert exp.entrypoint == ("python", "train.py")


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD.replace("plugins: [alice", "plugin: [alice"), r"forge.yaml:4: unknown key 'plugin' \(did you mean 'plugins'\?\)"),
        (GOOD.replace("  plugins: [reward", "  plugin: [reward"), r"forge.yaml:6: unknown key 'recipe.plugin' \(did you mean 'plugins'\?\)"),
        (GOOD.replace("backend: slurm", "backend: slrum"), r"forge.yaml:11: backend: expected one of local, ray, slurm, got 'slrum' \(did you mean 'slurm'\?\)$"),
        (GOOD.replace("backend: slurm", "backend: lcoal"), r"forge.yaml:11: backend: expected one of local, ray, slurm, got 'lcoal' \(did you mean 'local'\?\)$"),
        (GOOD.replace("schema: forge/job/v1", "schema: forge/job/v2"), r"forge.yaml:1: schema: expected 'forge/job/v1', got 'forge/job/v2'$"),
        (GOOD.replace("slurm: {launch", "strict_deferred: yes\nslurm: {launch"), r"forge.yaml:12: strict_deferred: expected true or false, got a string 'yes'$"),
        (GOOD.replace("slurm: {launch: per-node}", "slurm: per-node"), r"forge.yaml:12: slurm: expected a mapping of slurm backend settings, got a string$"),
        (GOOD.replace("recipe:\n  plugins: [reward-clip]", "recipe: [reward-clip]"), r"forge.yaml:5: recipe: expected a mapping with 'plugins', got a list$"),
        (GOOD.replace("  grpo: {group_size: 8, lr: 1.0e-6}", "  grpo: {group_size: 8, lr: .nan}"), r"forge.yaml:9: config.grpo.lr: \.nan is not a finite number"),
        (GOOD.replace("  task.target: [1, 2]", "  task.target: [1, -.inf]"), r"forge.yaml:10: config.task.target: -\.inf is not a finite number"),
        (GOOD.replace("lr: 1.0e-6", "lr: 1e400"), r"forge.yaml:9: 1e400 is beyond the float range \(it would read as infinity\)$"),
        (GOOD.replace("bob/gspo", "bob/opsd-patch"), r"forge.yaml:4: plugins\[1\]: plugin 'opsd-patch' is already requested"),
        (GOOD.replace("bob/gspo", "gspo"), r"forge.yaml:4: plugins\[1\]: 'gspo' is not a plugin reference"),
        (GOOD.replace("  task.target: [1, 2]", "  opsd.scale: 2.0"), r"config key 'opsd.scale' is written twice"),
        (GOOD.replace("name: qwen3b-grpo-opsd", "name: 'a b'"), r"forge.yaml:2: 'a b' is not a valid job name"),
        ("schema: forge/job/v1\nname: x\n", r"missing required key 'entrypoint'"),
    ],
)
def test_mistakes_are_located(tmp_path, text, message):
    with pytest.raises(ManifestError, match=message):
        load_experiment(write(tmp_path, text))


def test_missing_forge_yaml_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="no forge.yaml here"):
        load_experiment(tmp_path)


def test_flatten_keeps_lists_and_empty_mappings_as_leaves():
    assert flatten({"a": {"b": {"c": 1}, "d": []}, "e": {}}) == {"a.b.c": 1, "a.d": [], "e": {}}


def test_a_plugin_requested_twice_says_how_to_keep_one(tmp_path):
    with pytest.raises(ManifestError) as exc:
        load_experiment(write(tmp_path, GOOD.replace("bob/gspo", "bob/opsd-patch@2.0")))
    assert exc.value.message == "forge.yaml:4: plugins[1]: plugin 'opsd-patch' is already requested as 'alice/opsd-patch@~=1.2'".replace(
        "forge.yaml", str(tmp_path / "forge.yaml"))
    assert exc.value.hint == "a plugin name is loaded once (one forge_plugins/opsd-patch/ per job): delete one of the two requests from plugins:"


def test_non_finite_config_values_say_why(tmp_path):
    with pytest.raises(ManifestError) as exc:
        load_experiment(write(tmp_path, GOOD.replace("lr: 1.0e-6", "lr: .inf")))
    assert "JSON" in exc.value.hint


def test_outputs_are_declared_directories_absolute_or_from_a_variable(tmp_path):
    base = "schema: forge/job/v1\nname: x\nentrypoint: python t.py\n"
    exp = load_experiment(write(tmp_path, base + "outputs: [/lustre/ckpt/$FORGE_JOB_ID, '${SCRATCH}/x']\n"))
    assert exp.outputs == ("/lustre/ckpt/$FORGE_JOB_ID", "${SCRATCH}/x") and exp.sample_above is None
    exp = load_experiment(write(tmp_path, base + "outputs: {dirs: [/ckpt], sample_above: 1048576}\n"))
    assert (exp.outputs, exp.sample_above) == (("/ckpt",), 1048576)
    with pytest.raises(ManifestError) as err:
        load_experiment(write(tmp_path, base + "outputs: [ckpt/run]\n"))
    assert "forge.yaml:4: outputs[0]: expected an absolute path or one starting with $VAR" in err.value.message
    assert "FORGE_JOB_ID" in err.value.hint
    with pytest.raises(ManifestError) as err:
        load_experiment(write(tmp_path, base + "outputs: {dirs: [/c], sample_abov: 3}\n"))
    assert "did you mean 'sample_above'" in err.value.message
