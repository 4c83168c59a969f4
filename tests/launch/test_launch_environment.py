"""Environment plugins (SPEC §17): shipped and verified with the job, left alone by the
launcher, loaded by ``starforge.plugins.load_environment`` in whichever process builds
environments — the trainer, a worker, or another interpreter without starforge-core."""

from __future__ import annotations

from launch_jobs import demo_plugin

COUNTER_ENV = """
import os

CALLS = []

class Env:
    def __init__(self, target):
        self.target = target

def make_environment(params, **ctx):
    CALLS.append(sorted(ctx))
    print("entrypoint called in", os.getpid(), "with", sorted(ctx), "target", params["env.target"], flush=True)
    def make():
        return Env(params["env.target"] + ctx.get("bonus", 0))
    return make
"""


def env_plugin(name: str = "count-env", source: str = COUNTER_ENV, **kw) -> dict:
    module = name.replace("-", "_")
    return {"name": name, "kind": "environment", "entrypoint": f"{module}:make_environment",
            "files": {f"{module}.py": source}, **kw}


def records_by_role(job) -> dict:
    out: dict = {}
    for rec in job.records():
        out.setdefault(rec["role"], []).append(rec)
    return out


def test_trainer_loads_the_environment_once_per_process(builder):
    trainer = """
    from starforge.plugins import load_environment, UnknownPluginError
    make = load_environment("count-env", bonus=2, tokenizer=object())
    again = load_environment("count-env", bonus=99)   # ctx not compared: the same object back
    print("same factory:", make is again, "target:", make().target)
    import count_env
    print("entrypoint calls:", count_env.CALLS)
    for name in ("no-such-env", "demo-patch"):
        try:
            load_environment(name)
        except UnknownPluginError as exc:
            print("refused:", exc, "|", exc.hint)
    """
    job = builder.job(plugins=[demo_plugin(), env_plugin()], trainer=trainer,
                      hyperparams={"demo.scale": 10, "env.target": 5})
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "plugin  : alice/count-env@1.0.0 skipped (kind environment: left to the environment mechanism)" in job.plugin_lines(result)
    out = result.stdout
    assert "same factory: True target: 7" in out
    assert "entrypoint calls: [['bonus', 'tokenizer']]" in out
    assert ("refused: no environment plugin named 'no-such-env' in this job (environment plugins: count-env)" in out)
    assert "refused: no environment plugin named 'demo-patch'" in out
    assert "'demo-patch' is an algorithm plugin (alice/demo-patch@1.0.0); load_environment loads kind: environment only" in out
    (launcher,) = records_by_role(job)["launcher"]
    rec = next(p for p in launcher["plugins"] if p["name"] == "count-env")
    assert (rec["status"], rec["trigger"], rec["verified"], rec["check"]) == ("loaded", "load_environment", True, "tree")
    assert rec["ctx_keys"] == ["bonus", "tokenizer"] and rec["loaded_at"]


def test_a_worker_and_another_interpreter_load_it_from_verified_bytes(builder, bare_python):
    # A reward actor is often another process, sometimes another venv without starforge-core.
    code = ("from starforge.plugins import load_environment; "
            "print('worker target', load_environment('count-env', bonus=1)().target)")
    trainer = f"""
    import subprocess, sys
    subprocess.run([sys.executable, "-c", {code!r}], check=True)
    subprocess.run([sys.argv[1], "-c", {code!r}], check=True)
    """
    job = builder.job(plugins=[env_plugin()], trainer=trainer, hyperparams={"env.target": 5})
    result = job.launch("python", "-m", "app.train", bare_python)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("worker target 6") == 2
    workers = records_by_role(job)["worker"]
    assert sorted(r["mode"] for r in workers) == ["bootstrap", "other-interpreter"]
    for rec in workers:
        (env,) = rec["plugins"]
        # the listing checked and each file hashed as it was read, as every worker does
        assert (env["status"], env["check"], env["hashed_files"]) == ("loaded", "files", ["count_env.py"])
    # the launcher verified the whole tree but never called it
    (launcher,) = records_by_role(job)["launcher"]
    assert (launcher["plugins"][0]["status"], launcher["plugins"][0]["verified"]) == ("skipped", True)


def test_environment_file_changed_under_a_worker_stops_that_worker(builder):
    trainer = """
    import os, stat, subprocess, sys
    path = os.path.join(os.environ["FORGE_JOB_DIR"], "forge_plugins", "count-env", "count_env.py")
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    with open(path, "a") as f:
        f.write("print('tampered code runs')\\n")
    done = subprocess.run([sys.executable, "-c", "from starforge.plugins import load_environment; load_environment('count-env')"])
    print("worker exit", done.returncode)
    """
    job = builder.job(plugins=[env_plugin()], trainer=trainer, hyperparams={"env.target": 5})
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "worker exit 10" in result.stdout
    assert "tampered code runs" not in result.stdout
    assert "alice/count-env@1.0.0: verification failed in forge_plugins/count-env" in result.stderr


def test_tampered_environment_plugin_stops_the_job_before_training(builder):
    job = builder.job(plugins=[env_plugin()], trainer="print('training ran')\n", hyperparams={"env.target": 5})
    job.tamper("forge_plugins/count-env/count_env.py", "print('tampered')\n")
    result = job.launch()
    assert result.returncode == 10
    assert "training ran" not in result.stdout
    assert job.status()["plugin"] == "alice/count-env@1.0.0"


def test_environment_entrypoint_that_raises_names_the_plugin(builder):
    broken = "def make_environment(params, **ctx):\n    raise RuntimeError('no sandbox here')\n"
    trainer = "from starforge.plugins import load_environment\nload_environment('count-env')\n"
    job = builder.job(plugins=[env_plugin(source=broken)], trainer=trainer, hyperparams={})
    result = job.launch()
    assert result.returncode == 13, result.stderr
    status = job.status()
    assert (status["phase"], status["plugin"]) == ("install", "alice/count-env@1.0.0")
    assert "environment entrypoint raised RuntimeError: no sandbox here" in status["message"]


def test_outside_a_job_load_environment_says_so(tmp_path):
    import subprocess
    import sys

    code = ("from starforge.plugins import load_environment\n"
            "try:\n    load_environment('count-env')\nexcept LookupError as exc:\n    print(exc)\n")
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert out.stdout.strip() == ("no environment plugin named 'count-env' in this job "
                                  "(environment plugins: none: this process is not part of a forge job)")
