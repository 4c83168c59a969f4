"""forge-launch end to end: log lines, exit codes, status.json, the entrypoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from launch_jobs import deferred_plugin, demo_plugin

LOADED = "plugin  : alice/demo-patch@1.0.0 loaded"
REGISTERED = (
    "plugin  : alice/late-offset@1.0.0 registered (needs runtime context, loaded by the training entrypoint)"
)


def test_eager_plugin_loaded_line_and_patch_applies(builder):
    job = builder.job(plugins=[demo_plugin()])
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == [LOADED]
    # (1 + 1) * demo.scale 10
    assert "compute(1) = 20" in result.stdout
    assert "scale = 10" in result.stdout
    assert job.status()["phase"] == "entrypoint" and job.status()["code"] == 0


def test_deferred_plugin_registered_and_installed_by_the_trainer(builder):
    trainer = """
    from app import algo
    from starforge import plugins
    print("registered", plugins.registered())
    plugins.install_deferred("late-offset", offset=100)
    plugins.install_deferred("late-offset", offset=100)   # same ctx again: no second wrap
    print("compute(1) =", algo.compute(1))
    try:
        plugins.install_deferred("late-offset", offset=5)
    except plugins.ContextMismatchError as exc:
        print("mismatch:", exc)
    try:
        plugins.install_deferred("alice/late-offset")
    except plugins.UnknownPluginError as exc:
        print("unknown:", exc)
    """
    job = builder.job(plugins=[demo_plugin(), deferred_plugin()], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == [LOADED, REGISTERED]
    assert "registered ('late-offset',)" in result.stdout
    # (1 + 1) * 10 + 100, the deferred wrap stacked once on the eager one
    assert "compute(1) = 120" in result.stdout
    assert "mismatch: deferred plugin 'late-offset' (alice/late-offset@1.0.0) is already installed" in result.stdout
    assert "unknown: no deferred plugin named 'alice/late-offset' is registered (registered: late-offset)" in result.stdout
    (launcher,) = [r for r in job.records() if r["role"] == "launcher"]
    late = [p for p in launcher["plugins"] if p["name"] == "late-offset"][0]
    assert late["status"] == "registered" and late["installed_later"] is True and late["ctx_keys"] == ["offset"]


def test_deferred_never_installed_is_reported_and_strict_fails_with_14(builder):
    job = builder.job(plugins=[deferred_plugin()])
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert (
        "plugin  : alice/late-offset@1.0.0 not installed (deferred; the training entrypoint never called "
        "install_deferred('late-offset'))" in result.stderr
    )
    strict = builder.job(plugins=[deferred_plugin()], strict_deferred=True)
    result = strict.launch()
    assert result.returncode == 14
    assert strict.status() == {
        "phase": "install",
        "code": 14,
        "plugin": "alice/late-offset@1.0.0",
        "message": "deferred plugin never installed with strict_deferred: alice/late-offset@1.0.0",
        "time": strict.status()["time"],
    }


def test_builtin_shadowed_and_environment_skipped_lines(builder):
    builtin_clip = {"name": "reward-clip", "version": "0.3.0", "files": {"reward_clip.py": "def install(params):\n    print('clip installed')\n"}}
    builtin_shadowed = {"name": "demo-patch", "version": "0.1.0", "files": {"demo_patch_old.py": "raise SystemExit('must not run')\n"},
                        "entrypoint": "demo_patch_old:install"}
    env_plugin = {"name": "sandbox-env", "kind": "environment", "files": {"sandbox_env.py": "raise SystemExit('must not run')\n"}}
    job = builder.job(plugins=[demo_plugin(), env_plugin], builtins=[builtin_shadowed, builtin_clip])
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == [
        LOADED,
        "plugin  : alice/sandbox-env@1.0.0 skipped (kind environment: left to the environment mechanism)",
        "plugin  : recipe:demo-patch@0.1.0 shadowed (built-in replaced by the locked package alice/demo-patch@1.0.0)",
        "plugin  : recipe:reward-clip@0.3.0 loaded (built-in)",
    ]
    assert "clip installed" in result.stdout


def test_trainer_exit_code_passes_through_and_status_says_entrypoint(builder):
    job = builder.job(plugins=[demo_plugin()], trainer="import sys\nsys.exit(13)\n")
    result = job.launch()
    assert result.returncode == 13
    status = job.status()
    assert (status["phase"], status["code"], status["plugin"]) == ("entrypoint", 13, None)


def test_trainer_exception_is_a_traceback_and_exit_1(builder):
    job = builder.job(trainer="def boom():\n    raise ValueError('trainer broke')\nboom()\n")
    result = job.launch()
    assert result.returncode == 1
    assert "ValueError: trainer broke" in result.stderr
    assert 'app/train.py", line 3, in <module>' in result.stderr
    assert "runpy" not in result.stderr  # the launcher's own frames are trimmed
    assert job.status()["phase"] == "entrypoint" and job.status()["code"] == 1


def test_install_raising_is_13_with_traceback_naming_the_plugin(builder, tmp_path):
    marker = tmp_path / "trainer-ran"
    bad = {"name": "bad-install", "files": {"bad_install.py": "def install(params):\n    raise RuntimeError('cannot patch')\n"}}
    job = builder.job(plugins=[demo_plugin(), bad], trainer=f"open({str(marker)!r}, 'w').close()\n")
    result = job.launch()
    assert result.returncode == 13
    assert job.plugin_lines(result) == [LOADED, "plugin  : alice/bad-install@1.0.0 failed (install raised, exit 13)"]
    assert 'bad_install.py", line 2, in install' in result.stderr
    # the frame is in the job's copy: which plugin file that is, after the traceback
    assert (f"source  : {job.plugin_dir('bad-install') / 'bad_install.py'} is bad_install.py of alice/bad-install@1.0.0 "
            "as published (the job's read-only copy: edit the plugin's source and publish a new version)\n"
            "error: alice/bad-install@1.0.0: install raised RuntimeError: cannot patch") in result.stderr
    assert (job.status()["phase"], job.status()["code"], job.status()["plugin"]) == ("install", 13, "alice/bad-install@1.0.0")
    assert not marker.exists()


def test_a_builtins_import_failure_names_its_file_in_the_experiment(builder):
    needs = "def check():\n    raise ImportError('needs flash-attn')\n"
    bad = {"name": "clip", "files": {"clip/__init__.py": "from clip.needs import check\ncheck()\n", "clip/needs.py": needs},
           "entrypoint": "clip:install"}
    job = builder.job(builtins=[bad])
    result = job.launch()
    assert result.returncode == 12, result.stderr
    staged = job.dir / "recipe" / "common" / "algorithms" / "clip"
    sources = [ln for ln in result.stderr.splitlines() if ln.startswith("source  : ")]
    assert sources == [  # each plugin file the traceback passes through, once, in its order
        f"source  : {staged / 'clip' / '__init__.py'} is common/algorithms/clip/clip/__init__.py of the experiment (the job's read-only copy)",
        f"source  : {staged / 'clip' / 'needs.py'} is common/algorithms/clip/clip/needs.py of the experiment (the job's read-only copy)",
    ]


def test_install_deferred_raising_in_the_trainer_is_13(builder):
    bad = {"name": "bad-late", "load": "deferred",
           "files": {"bad_late.py": "def install(params, **ctx):\n    raise KeyError('tokenizer')\n"}}
    trainer = "from starforge.plugins import install_deferred\ninstall_deferred('bad-late', model=1)\n"
    job = builder.job(plugins=[bad], trainer=trainer)
    result = job.launch()
    assert result.returncode == 13
    assert "alice/bad-late@1.0.0: install raised KeyError: 'tokenizer'" in result.stderr
    assert (job.status()["phase"], job.status()["plugin"]) == ("install", "alice/bad-late@1.0.0")


def test_import_failures_are_12(builder):
    broken = {"name": "broken-mod", "files": {"broken_mod.py": "import no_such_module_anywhere\n"}}
    result = (job := builder.job(plugins=[broken])).launch()
    assert result.returncode == 12
    assert job.plugin_lines(result) == ["plugin  : alice/broken-mod@1.0.0 failed (import failed, exit 12)"]
    assert "ModuleNotFoundError: No module named 'no_such_module_anywhere'" in result.stderr
    assert job.status()["phase"] == "import"

    no_func = {"name": "no-func", "files": {"no_func.py": "x = 1\n"}}
    result = (job := builder.job(plugins=[no_func])).launch()
    assert result.returncode == 12
    assert "error: alice/no-func@1.0.0: 'no_func' has no callable 'install'" in result.stderr

    missing = {"name": "missing-mod", "files": {"other.py": "def install(params): pass\n"}, "entrypoint": "missing_mod:install"}
    result = (job := builder.job(plugins=[missing])).launch()
    assert result.returncode == 12
    assert "entrypoint module 'missing_mod' is not in the plugin tree" in result.stderr


def test_unmet_requirements_are_11(builder):
    for requires, expected in (
        ({"core": ">=99"}, "alice/demo-patch@1.0.0 requires starforge-core >=99, found "),
        ({"python": "<3"}, "alice/demo-patch@1.0.0 requires python <3, found 3."),
        ({"packages": {"surely-not-installed-dist": ">=1"}}, "requires surely-not-installed-dist >=1, not installed"),
        ({"packages": {"packaging": "<1"}}, "alice/demo-patch@1.0.0 requires packaging <1, found "),
    ):
        job = builder.job(plugins=[demo_plugin(requires=requires)])
        result = job.launch()
        assert result.returncode == 11, (requires, result.stderr)
        assert expected in result.stderr
        assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 failed (requirement not met, exit 11)"]
        assert (job.status()["phase"], job.status()["code"]) == ("requires", 11)
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1,<1", "python": ">=3.10", "packages": {"packaging": ">=20"}})])
    assert job.launch().returncode == 0


def test_bad_spec_is_2(builder, tmp_path):
    def bad_name(data):
        data["plugins"][0]["name"] = "../../etc"

    job = builder.job(plugins=[demo_plugin()], raw_spec_edit=bad_name)
    result = job.launch()
    assert result.returncode == 2
    assert "error: jobspec.plugins[0].name: '../../etc' is not a valid plugin name" in result.stderr
    assert job.status()["phase"] == "spec" and job.status()["code"] == 2

    job = builder.job(plugins=[demo_plugin()])
    job.spec_path.write_text("{not json")
    result = job.launch()
    assert result.returncode == 2 and "not a readable JSON JobSpec" in result.stderr

    prep = {"name": "tokenize-data", "kind": "data-prep", "files": {"tokenize_data.py": "raise SystemExit(99)\n"}}
    job = builder.job(plugins=[prep])
    result = job.launch()
    assert result.returncode == 2
    assert "alice/tokenize-data@1.0.0 is a data-prep plugin; data-prep plugins never enter a job (they run on the laptop, with forge prep)" in result.stderr

    for where, value, message in ((("plugins", 0, "requires"), "x", "jobspec.plugins[0].requires: expected an object"),
                                  (("extra",), [], "jobspec.extra: expected an object"),
                                  (("plugins", 0), [1], "jobspec.plugins[0]: expected an object")):
        def edit(data, where=where, value=value):
            target = data
            for key in where[:-1]:
                target = target[key]
            target[where[-1]] = value

        job = builder.job(plugins=[demo_plugin()], raw_spec_edit=edit)
        result = job.launch()
        assert result.returncode == 2, result.stderr
        assert f"error: {job.spec_path}: {message}" in result.stderr or f"error: {message}" in result.stderr
        assert "Traceback" not in result.stderr
        assert (job.status()["phase"], job.status()["code"]) == ("spec", 2)

    usage = subprocess.run([sys.executable, "-m", "starforge.launch"], capture_output=True, text=True)
    assert usage.returncode == 2 and "--spec JOBSPEC is required" in usage.stderr
    helped = subprocess.run([sys.executable, "-m", "starforge.launch", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "forge-launch --spec" in helped.stdout


def test_cmd_overrides_entrypoint_script_form_and_argv(builder):
    job = builder.job(plugins=[demo_plugin()], recipe={"run.py": "import sys, os\nfrom app import algo\nprint(sys.argv, os.path.basename(os.getcwd()), algo.compute(2))\n"})
    result = job.launch("python", "run.py", "--steps", "3")
    assert result.returncode == 0, result.stderr
    assert "['run.py', '--steps', '3'] recipe 30" in result.stdout


def test_non_python_entrypoint_is_execd_with_the_bootstrap_env(builder):
    job = builder.job(plugins=[demo_plugin()], recipe={"run.sh": "#!/bin/sh\nexec python3 -c 'from app import algo; print(\"shell child\", algo.compute(1))'\n"})
    (job.dir / "recipe" / "run.sh").chmod(0o755)
    result = job.launch("./run.sh", env={"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "shell child 20" in result.stdout
    assert job.plugin_lines(result) == [LOADED]  # printed by the launcher only


def test_hyperparams_file_and_read_only_mapping(builder):
    trainer = """
    import json, os
    from starforge.plugins import hyperparams
    hp = hyperparams()
    try:
        hp["demo.scale"] = 1
    except TypeError:
        print("read-only")
    with open(os.environ["FORGE_HYPERPARAMS"]) as f:
        print("file", json.load(f))
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer, hyperparams={"demo.scale": 3, "grpo.lr": 1e-6})
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "read-only" in result.stdout
    assert "file {'demo.scale': 3, 'grpo.lr': 1e-06}" in result.stdout


# The first plugin tries to change nested hyperparams in place (its own tweak of a shared
# schedule); the second, and the trainer, must still read what the job was submitted with.
MUTATING_PLUGIN = """
def install(params):
    tries = {
        "append": "params['sched.milestones'].append(99)",
        "item": "params['sched.milestones'][0] = 99",
        "iadd": "m = params['sched.milestones']; m += [99]",
        "nested key": "params['sched.warmup']['steps'] = 0",
        "inner list": "params['sched.warmup']['ranges'][0].extend([7])",
        "top key": "params['sched.milestones'] = []",
    }
    for what, statement in tries.items():
        try:
            exec(statement, {"params": params})
            print("MUTATED", what, flush=True)
        except TypeError as exc:
            print("refused", what, "-", exc, flush=True)
    mine = dict(params["sched.warmup"])  # a copy is the plugin's own to change
    mine["steps"] = 1
    print("copy", mine["steps"], flush=True)
"""

READING_PLUGIN = """
import json

def install(params):
    print("second plugin sees", json.dumps(dict(params), sort_keys=True), flush=True)
"""


def test_a_plugin_cannot_change_nested_hyperparams_for_the_others(builder):
    trainer = """
    import json
    from starforge.plugins import hyperparams
    print("trainer sees", json.dumps(dict(hyperparams()), sort_keys=True))
    """
    plugins = [
        {"name": "mutator", "files": {"mutator.py": MUTATING_PLUGIN}},
        {"name": "reader", "files": {"reader.py": READING_PLUGIN}},
    ]
    hp = {"sched.milestones": [10, 20], "sched.warmup": {"steps": 5, "ranges": [[1, 2]]}}
    job = builder.job(plugins=plugins, trainer=trainer, hyperparams=hp)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert not [line for line in out if line.startswith("MUTATED")], result.stdout
    refused = [line for line in out if line.startswith("refused ")]
    assert len(refused) == 6 and all("hyperparams are read-only" in line for line in refused[:5]), refused
    assert "copy 1" in out
    unchanged = json.dumps(hp, sort_keys=True)
    assert f"second plugin sees {unchanged}" in out and f"trainer sees {unchanged}" in out, result.stdout


def test_status_json_is_complete_json(builder):
    job = builder.job(plugins=[demo_plugin()])
    job.launch()
    status = json.loads((job.dir / "status.json").read_text())
    assert set(status) == {"phase", "code", "plugin", "message", "time"}
    assert not [p for p in job.dir.iterdir() if p.name.startswith(".status-")]


def test_verify_only_verifies_everything_and_runs_nothing(builder, tmp_path):
    marker = tmp_path / "ran"
    marking = f"open({str(marker)!r}, 'a').write('module\\n')\ndef install(params, **ctx):\n    open({str(marker)!r}, 'a').write('install\\n')\n"
    plugins = [
        {"name": "eager-one", "files": {"eager_one.py": marking}},
        {"name": "late-one", "files": {"late_one.py": marking}, "load": "deferred", "requires": {"python": ">=3.8"}},
    ]
    builtins = [{"name": "reward-clip", "files": {"reward_clip.py": marking}}]
    job = builder.job(plugins=plugins, builtins=builtins, trainer=f"open({str(marker)!r}, 'a').write('trainer\\n')\n",
                      strict_deferred=True)
    argv = [sys.executable, "-m", "starforge.launch", "--spec", str(job.spec_path), "--verify-only"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    env["FORGE_HOME"] = str(tmp_path / "forge-home")
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == [
        "plugin  : alice/eager-one@1.0.0 verified",
        "plugin  : alice/late-one@1.0.0 verified",
        "plugin  : recipe:reward-clip@1.0.0 verified (built-in)",
    ]
    assert not marker.exists(), "verify-only imported, installed or ran something"
    assert not (job.dir / ".forge-runtime" / "bootstrap").exists()
    status = job.status()
    assert (status["phase"], status["code"], status["plugin"]) == ("verify", 0, None)
    (rec,) = job.records()
    assert rec["role"] == "launcher" and rec["mode"] == "verify-only"
    assert [(p["status"], p["verified"]) for p in rec["plugins"]] == [("verified", True)] * 3

    # A tampered built-in: exit 10, status phase verify, still nothing ran.
    path = job.dir / "recipe" / "common" / "algorithms" / "reward-clip" / "reward_clip.py"
    os.chmod(path.parent, 0o755)
    os.chmod(path, 0o644)
    path.write_text("def install(params):\n    pass\n")
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert result.returncode == 10, result.stderr
    assert job.plugin_lines(result) == ["plugin  : recipe:reward-clip@1.0.0 failed (verification failed, exit 10)"]
    assert (job.status()["phase"], job.status()["code"]) == ("verify", 10)
    assert not marker.exists()


def test_verify_only_refuses_a_command(builder):
    job = builder.job()
    argv = [sys.executable, "-m", "starforge.launch", "--spec", str(job.spec_path), "--verify-only", "--", "true"]
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 2
    assert "error: --verify-only runs no command" in result.stderr


def test_a_when_imported_patch_without_its_target_is_13_naming_the_plugin(builder):
    # the patch waits for app.algo; when the trainer imports it, the target is not there
    late = {"name": "late-typo", "files": {"late_typo.py": (
        "from starforge import patching\n\n"
        "def install(params):\n"
        "    patching.wrap('app.algo:comptue', lambda original, x: original(x), when_imported=True)\n")}}
    job = builder.job(plugins=[late])
    result = job.launch()
    assert result.returncode == 13, result.stderr
    assert "alice/late-typo@1.0.0" in result.stderr and "'comptue'" in result.stderr and "did you mean 'compute'" in result.stderr
    assert (job.status()["phase"], job.status()["code"], job.status()["plugin"]) == ("install", 13, "alice/late-typo@1.0.0")
