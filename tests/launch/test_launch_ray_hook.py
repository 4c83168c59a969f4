"""The Ray setup hook: bootstraps a worker from the job directory and chains the
entrypoint's own hook. (The Ray backend tests run it inside real Ray workers.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from launch_jobs import demo_plugin

from starforge.cluster.ray_init import CHAINED_HOOK_ENV, RAY_HOOK_ENV, RAY_JOB_CONFIG_ENV, chain_runtime_env
from starforge.launch import RAY_SETUP_HOOK, bootstrap_env

USER_HOOK = "import os\ndef setup():\n    os.environ['USER_HOOK_RAN'] = 'yes'\n"


def test_hook_name_is_dotted_and_importable():
    module, _, func = RAY_SETUP_HOOK.rpartition(".")
    assert ":" not in RAY_SETUP_HOOK
    assert callable(getattr(__import__(module, fromlist=[func]), func))


def test_setup_bootstraps_from_the_working_directory_and_chains(builder):
    """A Ray worker: cwd is the unpacked job directory, FORGE_* paths are relative."""
    job = builder.job(plugins=[demo_plugin()], recipe={"app/userhook.py": USER_HOOK})
    env = bootstrap_env(job.dir, relative=True)
    del env["PYTHONPATH"]  # no sitecustomize: the hook alone must do the work
    full = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    full.update(env)
    full["PYTHONPATH"] = "recipe"
    full[CHAINED_HOOK_ENV] = "app.userhook.setup"
    code = (
        "import os; from starforge.cluster import ray_hook; ray_hook.setup(); "
        "from app import algo; print(algo.compute(1), os.environ['USER_HOOK_RAN'])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, cwd=str(job.dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["20", "yes"]
    (rec,) = job.records()
    assert rec["role"] == "worker" and rec["plugins"][0]["trigger"] == "ray-setup-hook"


def ray_worker(job, code: str) -> subprocess.CompletedProcess:
    """A process started as Ray starts a worker: cwd the job directory, the hook alone."""
    env = bootstrap_env(job.dir, relative=True)
    del env["PYTHONPATH"]
    full = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    full.update(env)
    full["PYTHONPATH"] = "recipe"
    code = "from starforge.cluster import ray_hook; ray_hook.setup(); " + code
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, cwd=str(job.dir))


def test_setup_hook_checks_listing_and_hashes_what_the_worker_runs(builder):
    plugin = demo_plugin()
    plugin["files"] = dict(plugin["files"], **{"demo_extra.py": "X = 1\n", "weights.bin": "w" * (1 << 20)})
    job = builder.job(plugins=[plugin])
    out = ray_worker(job, "from app import algo; print(algo.compute(1))")
    assert out.returncode == 0, out.stderr
    (rec,) = job.records()
    assert rec["plugins"][0]["check"] == "files"
    assert rec["plugins"][0]["hashed_files"] == ["demo_patch.py"]  # not weights.bin, not demo_extra.py


@pytest.mark.parametrize(
    "rel, text, needle",
    [
        ("forge_plugins/demo-patch/demo_patch.py", "def install(params):\n    print('evil')\n", "changed: demo_patch.py"),
        ("forge_plugins/demo-patch/__pycache__/demo_patch.cpython-311.pyc", "planted", "added: __pycache__/demo_patch.cpython-311.pyc"),
    ],
)
def test_setup_hook_stops_a_ray_worker_on_a_changed_tree(builder, rel, text, needle):
    job = builder.job(plugins=[demo_plugin()])
    job.tamper(rel, text)
    out = ray_worker(job, "print('worker ran')")
    assert out.returncode == 10
    assert "worker ran" not in out.stdout and "evil" not in out.stdout
    assert needle in out.stderr
    (rec,) = job.records()
    assert rec["failure"]["phase"] == "verify" and rec["failure"]["plugin"] == "alice/demo-patch@1.0.0"


def test_chain_runtime_env_moves_the_entrypoint_hook_behind_ours():
    environ = {"FORGE_JOBSPEC": "/j/jobspec.json", "PYTHONPATH": "/j/.forge-runtime/bootstrap", "HOME": "/root"}
    chained = chain_runtime_env({"worker_process_setup_hook": "mylib.setup", "env_vars": {"A": "1"}}, environ)
    assert chained == {
        "worker_process_setup_hook": RAY_SETUP_HOOK,
        "env_vars": {
            "A": "1",
            CHAINED_HOOK_ENV: "mylib.setup",
            "FORGE_JOBSPEC": "/j/jobspec.json",
            "PYTHONPATH": "/j/.forge-runtime/bootstrap",
        },
    }
    # The job was submitted with our hook: the driver must not repeat the field (Ray
    # refuses a driver runtime_env that overlaps the job's). In the driver, Ray's job
    # supervisor gives the job's runtime_env as JSON; the worker-only variable is not set.
    job_config = {"runtime_env": {"worker_process_setup_hook": RAY_SETUP_HOOK,
                                  "env_vars": {"FORGE_JOB_DIR": "."}}, "metadata": {}}
    submitted = {**environ, RAY_JOB_CONFIG_ENV: json.dumps(job_config)}
    assert chain_runtime_env({"worker_process_setup_hook": "mylib.setup"}, submitted) == {
        "env_vars": {CHAINED_HOOK_ENV: "mylib.setup"}
    }
    assert chain_runtime_env(None, submitted) == {}
    # Ray may keep only the internal hook variable among the job's env_vars.
    job_config["runtime_env"] = {"env_vars": {RAY_HOOK_ENV: RAY_SETUP_HOOK}}
    assert chain_runtime_env(None, {**environ, RAY_JOB_CONFIG_ENV: json.dumps(job_config)}) == {}
    # A job submitted without our hook: the driver's runtime_env carries it.
    other = {**environ, RAY_JOB_CONFIG_ENV: json.dumps({"runtime_env": {"env_vars": {"A": "1"}}})}
    assert chain_runtime_env(None, other)["worker_process_setup_hook"] == RAY_SETUP_HOOK
    # Inside a Ray worker process Ray sets the hook variable itself.
    assert chain_runtime_env(None, {**environ, RAY_HOOK_ENV: RAY_SETUP_HOOK}) == {}
    with pytest.raises(TypeError):
        chain_runtime_env({"worker_process_setup_hook": 3}, environ)


def test_the_ray_backends_worker_environment_reaches_the_workers_through_the_driver():
    from starforge.cluster.ray_init import WORKER_ENV

    # What the Ray backend submits: the binding, and the workers' environment dormant as
    # JSON (Ray's job supervisor starts with these env_vars and must not bootstrap).
    workers = {"FORGE_JOBSPEC": "jobspec.json", "FORGE_JOB_DIR": ".", "PYTHONPATH": ".forge-runtime/bootstrap:recipe"}
    job_vars = {"FORGE_SPEC_SHA256": "a" * 64, WORKER_ENV: json.dumps(workers)}
    driver = {  # the launcher's own environment: absolute paths on this node
        "FORGE_JOBSPEC": "/tmp/ray/wd/jobspec.json", "PYTHONPATH": "/tmp/ray/wd/.forge-runtime/bootstrap",
        "FORGE_SPEC_SHA256": "a" * 64, **job_vars,
        RAY_JOB_CONFIG_ENV: json.dumps({"runtime_env": {"working_dir": "gcs://x.zip", "env_vars": job_vars}}),
    }
    chained = chain_runtime_env({"worker_process_setup_hook": "mylib.setup"}, driver)
    # the submitted (relative) values, not the driver's; nothing the job carries is repeated
    assert chained == {"worker_process_setup_hook": RAY_SETUP_HOOK, "env_vars": {**workers, CHAINED_HOOK_ENV: "mylib.setup"}}
    # A driver starting its own Ray forwards its own environment, the binding included.
    own = {k: v for k, v in driver.items() if k != RAY_JOB_CONFIG_ENV and k != WORKER_ENV}
    assert chain_runtime_env(None, own)["env_vars"] == {
        "FORGE_JOBSPEC": "/tmp/ray/wd/jobspec.json", "PYTHONPATH": "/tmp/ray/wd/.forge-runtime/bootstrap", "FORGE_SPEC_SHA256": "a" * 64,
    }


def test_relative_job_environment_survives_a_child_in_another_directory(builder, tmp_path):
    """Ray form: env vars relative to the unpacked job dir, worker started inside it."""
    job = builder.job(plugins=[demo_plugin()])
    full = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    full.update(bootstrap_env(job.dir, relative=True))
    node_tmp = tmp_path / "node-tmp"  # this emulated node's own: the worker makes the job's code directory there
    node_tmp.mkdir()
    full["TMPDIR"] = str(node_tmp)
    code = (
        "import subprocess, sys; from app import algo; print('worker', algo.compute(1)); "
        "subprocess.run([sys.executable, '-c', 'from app import algo; print(\"elsewhere\", algo.compute(1))'], "
        f"cwd={str(tmp_path)!r}, check=True)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, cwd=str(job.dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["worker", "20", "elsewhere", "20"]
    assert len(job.records()) == 2
    assert [p.name[:11] for p in node_tmp.iterdir()] == ["forge-code-"]  # one, shared by both processes
