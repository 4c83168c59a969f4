"""Every algorithm template of `forge plugin init`, as generated, changes the quickstart's
numbers: init -> publish -> lock -> submit on the local backend, against the same job
without the plugin."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from support.cli import forge
from support.examples import copy_example

REPO = Path(__file__).resolve().parents[2]


def _forge(env, *args, cwd):
    proc = forge(*args, env=env, cwd=cwd, timeout=300)
    assert proc.returncode == 0, f"forge {' '.join(args)}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _value(out: str, prefix: str):
    line = next(ln for ln in out.splitlines() if ln.startswith(prefix))
    return ast.literal_eval(line.split(" = ", 1)[1])


def _quickstart(tmp_path: Path) -> tuple:
    exp = tmp_path / "quickstart"
    copy_example("quickstart", exp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="starforge", PYTHONDONTWRITEBYTECODE="1")
    _forge(env, "plugin", "publish", str(REPO / "forge_plugins" / "opsd-patch"), cwd=tmp_path)
    # A short run: the templates must move the numbers of these 6 steps.
    text = (exp / "forge.yaml").read_text().replace("steps: 40", "steps: 6")
    (exp / "forge.yaml").write_text(text)
    return tmp_path, exp, env


@pytest.fixture
def quickstart(tmp_path):
    return _quickstart(tmp_path)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    """The output of the short quickstart job without a template's plugin: what each template
    must move (the same job for every test here, run once)."""
    tmp, exp, env = _quickstart(tmp_path_factory.mktemp("plain"))
    _forge(env, "lock", str(exp), cwd=tmp)
    return _forge(env, "submit", str(exp), cwd=tmp)


@pytest.mark.parametrize("load, plugin_line", [
    ("eager", "plugin  : starforge/my-tweak@0.1.0 loaded"),
    ("deferred", "plugin  : starforge/my-tweak@0.1.0 registered (needs runtime context, loaded by the training entrypoint)"),
])
def test_generated_algorithm_plugin_changes_the_quickstart_numbers(quickstart, plain, load, plugin_line):
    tmp, exp, env = quickstart
    _forge(env, "plugin", "init", "my-tweak", "--kind", "algorithm", "--load", load, cwd=tmp)
    _forge(env, "plugin", "publish", str(tmp / "my-tweak"), cwd=tmp)
    yaml_text = (exp / "forge.yaml").read_text()
    (exp / "forge.yaml").write_text(yaml_text.replace("plugins: [starforge/opsd-patch@~=1.2]",
                                                      "plugins: [starforge/opsd-patch@~=1.2, starforge/my-tweak@0.1.0]"))
    _forge(env, "lock", str(exp), cwd=tmp)
    tweaked = _forge(env, "submit", str(exp), cwd=tmp)

    assert plugin_line in tweaked.splitlines()
    rewards = _value(plain, "rewards[step 0] = ")
    assert _value(tweaked, "rewards[step 0] = ") == rewards  # same seed, same first rollout
    if load == "eager":
        # the wrap reached the estimator the trainer dispatches through: advantages halved
        assert "patched : toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo] (wrap) by starforge/my-tweak@0.1.0" in tweaked
        assert _value(tweaked, "advantages[step 0] = ") == [a * 0.5 for a in _value(plain, "advantages[step 0] = ")]
    else:
        assert "deferred: my-tweak installed" in tweaked.splitlines()
        patched = [ln for ln in tweaked.splitlines() if ln.startswith("patched : ") and "my-tweak" in ln]
        assert patched == ["patched : __main__:TabularPolicy.step (wrap) by starforge/my-tweak@0.1.0"]  # shown like eager ones
        assert _value(tweaked, "advantages[step 0] = ") == _value(plain, "advantages[step 0] = ")
    # the learning changed: a different policy after step 0
    assert _value(tweaked, "mean_reward = ") != _value(plain, "mean_reward = ")


def test_generated_environment_plugin_changes_the_quickstart_numbers(quickstart, plain):
    tmp, exp, env = quickstart
    _forge(env, "plugin", "init", "my-env", "--kind", "environment", cwd=tmp)
    _forge(env, "plugin", "publish", str(tmp / "my-env"), cwd=tmp)
    yaml_text = (exp / "forge.yaml").read_text()
    (exp / "forge.yaml").write_text(yaml_text.replace("plugins: [starforge/opsd-patch@~=1.2]",
                                                      "plugins: [starforge/opsd-patch@~=1.2, starforge/my-env@0.1.0]"))
    _forge(env, "lock", str(exp), cwd=tmp)
    skipped = "plugin  : starforge/my-env@0.1.0 skipped (kind environment: left to the environment mechanism)"

    # Shipped but not named by the config: the launcher leaves it alone, the numbers are the plain run's.
    unused = _forge(env, "submit", str(exp), cwd=tmp)
    assert skipped in unused.splitlines()
    assert _value(unused, "mean_reward = ") == _value(plain, "mean_reward = ")

    # Named by the config: the trainer loads it through load_environment and its episodes score the responses.
    used = _forge(env, "submit", str(exp), "--set", "task.environment=my-env", cwd=tmp)
    assert skipped in used.splitlines()
    assert "environment: my-env (each response is one episode of a fresh environment)" in used.splitlines()
    rewards = _value(used, "rewards[step 0] = ")
    assert rewards != _value(plain, "rewards[step 0] = ")
    assert set(rewards) <= {0.0, 1.0} and 1.0 in rewards  # CountingEnv: 1.0 when the running total hits 6
    assert _value(used, "mean_reward = ") != _value(plain, "mean_reward = ")
    # its declared param reaches it: another target, other rewards
    other = _forge(env, "submit", str(exp), "--set", "task.environment=my-env", "--set", "my_env.target=3", cwd=tmp)
    assert _value(other, "rewards[step 0] = ") != rewards

    # recorded in provenance and shown by forge jobs show
    job_id = next(ln.split()[2] for ln in used.splitlines() if ln.startswith("job     : "))
    shown = _forge(env, "jobs", "show", job_id, cwd=tmp)
    line = next(ln for ln in shown.splitlines() if ln.strip().startswith("plugin  :") and "starforge/my-env@0.1.0" in ln)
    assert "(package, environment) verified 1, loaded 1" in line, shown
