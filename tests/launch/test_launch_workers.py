"""Every Python process of the job carries the plugins: spawn children, grandchildren,
workers without starforge-core, lazy targets, FORGE_DISABLE, the hidden sitecustomize."""

from __future__ import annotations

import os
import subprocess
import sys

from launch_jobs import deferred_plugin, demo_plugin

LAUNCHER_ONLY = ["plugin  : alice/demo-patch@1.0.0 loaded"]

# A trainer that appends a line to demo-patch's verified file, then starts a worker process
# and reports its exit code, its stdout and (on stderr) its stderr.
TAMPER_THEN_START_WORKER = """
import os, subprocess, sys
path = os.path.join(os.environ["FORGE_JOB_DIR"], "forge_plugins", "demo-patch", "demo_patch.py")
os.chmod(os.path.dirname(path), 0o755)
os.chmod(path, 0o644)
with open(path, "a") as f:
    f.write("# tampered\\n")
child = subprocess.run([sys.executable, "-c", "print('worker code ran')"], capture_output=True, text=True)
print("child exit", child.returncode)
print("child out", repr(child.stdout))
sys.stderr.write(child.stderr)
"""

# A file planted in the tree after the launcher verified it: the worker's listing check.
PLANT_THEN_START_WORKER = TAMPER_THEN_START_WORKER.replace(
    'with open(path, "a") as f:', 'with open(os.path.join(os.path.dirname(path), "extra.py"), "w") as f:'
)


def workers(job) -> list:
    return [r for r in job.records() if r["role"] == "worker"]


def test_spawn_pool_children_and_grandchild_see_the_patch(builder):
    trainer = """
    import multiprocessing as mp, subprocess, sys
    from app import algo

    def work(x):
        from app import algo
        return algo.compute(x)

    if __name__ == "__main__":
        with mp.get_context("spawn").Pool(2) as pool:
            print("pool", pool.map(work, [1, 2, 3]))
        grandchild = "from app import algo; print('grandchild', algo.compute(1))"
        subprocess.run([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"], check=True)
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "pool [20, 30, 40]" in result.stdout
    assert "grandchild 20" in result.stdout
    assert job.plugin_lines(result) == LAUNCHER_ONLY  # workers print no plugin lines
    recs = workers(job)
    assert len(recs) >= 3  # two pool workers, the child, the grandchild (pool workers may be killed early)
    for rec in recs:
        (plugin,) = rec["plugins"]
        assert plugin["status"] == "loaded" and plugin["verified"] and plugin["trigger"] == "start-up"


def test_worker_started_after_tampering_exits_10(builder):
    job = builder.job(plugins=[demo_plugin()], trainer=TAMPER_THEN_START_WORKER)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "child exit 10" in result.stdout
    assert "child out ''" in result.stdout
    assert "stops the job: alice/demo-patch@1.0.0: verification failed in forge_plugins/demo-patch" in result.stderr
    assert "changed: demo_patch.py" in result.stderr
    (rec,) = workers(job)
    assert rec["failure"]["phase"] == "verify" and rec["failure"]["code"] == 10


def test_worker_without_starforge_core_gets_the_plugins(builder, bare_python):
    # Another interpreter than the job's Python (a per-actor venv without starforge-core)
    # carries the plugins of the targets it imports, from the job's runtime zip.
    trainer = """
    import subprocess, sys
    code = ("import importlib.util, starforge, sys; from app import algo; "
            "print('bare', algo.compute(1), starforge.__file__.split('.forge-runtime')[1], "
            "'starforge.cluster._vendor.packaging.version' in sys.modules, importlib.util.find_spec('packaging'))")
    subprocess.run([sys.argv[1], "-c", code], check=True)
    """
    # `~=0.1` is not a plain specifier: packaging decides it, from the zip
    job = builder.job(plugins=[demo_plugin(requires={"core": "~=0.1"}, targets=["app.algo"])], trainer=trainer)
    result = job.launch("python", "-m", "app.train", bare_python)
    assert result.returncode == 0, result.stderr
    # requires checked with the vendored packaging; the worker's own namespace has none
    assert "bare 20 /starforge-runtime.zip/starforge/__init__.py True None" in result.stdout
    (rec,) = workers(job)
    assert rec["plugins"][0]["status"] == "loaded" and rec["mode"] == "other-interpreter"
    assert rec["executable"] == bare_python


def test_another_interpreter_is_left_alone_and_recorded(builder, bare_python):
    # A tool of another interpreter inheriting the job's environment (a system python3)
    # is never killed and loads nothing it did not ask for; its record says so.
    trainer = """
    import subprocess, sys
    subprocess.run([sys.argv[1], "-c", "from app import algo; print('tool', algo.compute(1))"], check=True)
    from app import algo
    print('trainer', algo.compute(1))
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    result = job.launch("python", "-m", "app.train", bare_python)
    assert result.returncode == 0, result.stderr
    assert "tool 2" in result.stdout and "trainer 20" in result.stdout
    (rec,) = workers(job)
    assert rec["mode"] == "other-interpreter" and rec["executable"] == bare_python
    assert rec["plugins"][0]["status"] == "left-alone"


TARGETED = """
open({marker!r}, "a").write("module\\n")

def install(params):
    from starforge import patching
    open({marker!r}, "a").write("install\\n")
    patching.wrap("app.algo:compute", lambda original, x: original(x) * 7)
"""


def test_helper_that_never_imports_a_target_never_installs(builder, tmp_path):
    marker = tmp_path / "targeted"
    plugin = {"name": "targeted", "targets": ["app.algo"], "files": {"targeted.py": TARGETED.format(marker=str(marker))}}
    trainer = """
    import subprocess, sys
    marker = sys.argv[1]
    open(marker, "w").close()   # forget the launcher's own install
    subprocess.run([sys.executable, "-c", "import json; print('helper done')"], check=True)
    print("after helper:", repr(open(marker).read()))
    subprocess.run([sys.executable, "-c", "from app import algo; print('user', algo.compute(1))"], check=True)
    print("after user:", repr(open(marker).read()))
    """
    job = builder.job(plugins=[plugin], trainer=trainer)
    result = job.launch("python", "-m", "app.train", str(marker))
    assert result.returncode == 0, result.stderr
    assert "after helper: ''" in result.stdout
    assert "user 14" in result.stdout
    assert "after user: 'module\\ninstall\\n'" in result.stdout
    helper, user = sorted(workers(job), key=lambda r: r["pid"])
    assert helper["plugins"][0]["status"] == "pending" and not helper["plugins"][0]["verified"]
    assert user["plugins"][0]["status"] == "loaded" and user["plugins"][0]["trigger"] == "target:app.algo"
    assert [p["target"] for p in user["patches"]] == ["app.algo:compute"]


def test_forge_disable_opts_a_process_out_visibly(builder):
    trainer = """
    import os, subprocess, sys
    env = dict(os.environ, FORGE_DISABLE="1")
    subprocess.run([sys.executable, "-c", "from app import algo; print('disabled', algo.compute(1))"], env=env, check=True)
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "disabled 2" in result.stdout
    (rec,) = workers(job)
    assert rec["disabled"] is True
    assert rec["plugins"][0]["status"] == "disabled"


def test_install_deferred_in_a_worker_bootstraps_first(builder):
    trainer = """
    import subprocess, sys
    code = ("from starforge import plugins; from app import algo; "
            "plugins.install_deferred('late-offset', offset=3); print('worker', plugins.registered(), algo.compute(1))")
    subprocess.run([sys.executable, "-c", code], check=True)
    """
    job = builder.job(plugins=[demo_plugin(), deferred_plugin()], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "worker ('late-offset',) 23" in result.stdout
    (rec,) = workers(job)
    late = [p for p in rec["plugins"] if p["name"] == "late-offset"][0]
    assert late["installed_later"] is True


def test_hidden_sitecustomize_still_runs(builder, tmp_path):
    own = tmp_path / "own-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITECUSTOMIZE = 'ran'\n")
    trainer = """
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "from app import algo; print('child', OWN_SITECUSTOMIZE, algo.compute(1))"], check=True)
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    result = job.launch(env={"PYTHONPATH": str(own)})
    assert result.returncode == 0, result.stderr
    assert "child ran 20" in result.stdout


def test_import_budget_of_launcher_and_workers(builder):
    trainer = """
    import subprocess, sys
    laptop = ("click", "rich", "httpx", "yaml", "cryptography")
    def loaded(mods):
        return sorted(m for m in mods if m.split(".")[0] in laptop)
    print("launcher", loaded(sys.modules))
    code = "import sys; from app import algo; print('worker', sorted(m for m in sys.modules if m.split('.')[0] in %r))" % (laptop,)
    subprocess.run([sys.executable, "-c", code], check=True)
    """
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1"})], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "launcher []" in result.stdout
    assert "worker []" in result.stdout


def test_bootstrap_env_lets_a_backend_start_workers(builder):
    """What a backend does for a process it starts itself (not a child of the launcher)."""
    job = builder.job(plugins=[demo_plugin()])
    from starforge.launch import bootstrap_env

    env = bootstrap_env(job.dir)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(job.dir / ".forge-runtime" / "bootstrap")
    assert env["FORGE_JOBSPEC"] == str(job.spec_path)
    full = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", "from app import algo; print(algo.compute(1))"], env=full,
                         capture_output=True, text=True, cwd=str(job.dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "20"
    rel = bootstrap_env(job.dir, relative=True)
    assert rel["FORGE_JOB_DIR"] == "." and rel["PYTHONPATH"].startswith(".forge-runtime/bootstrap")


def test_launcher_started_inside_the_job_environment_loads_once(builder):
    """A backend exports bootstrap_env to every process, the launcher included."""
    job = builder.job(plugins=[demo_plugin()])
    from starforge.launch import bootstrap_env

    env = bootstrap_env(job.dir)
    result = job.launch(env=env)
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == LAUNCHER_ONLY
    assert "compute(1) = 20" in result.stdout  # installed once, not wrapped twice
    (rec,) = job.records()
    assert rec["role"] == "launcher" and rec["plugins"][0]["status"] == "loaded"


def test_deferred_plugin_waiting_for_its_target_is_listed_and_installable_in_a_worker(builder, tmp_path):
    marker = tmp_path / "late-targeted"
    plugin = deferred_plugin("late-targeted", targets=["app.algo"])
    plugin["files"]["late_targeted.py"] = (
        f"open({str(marker)!r}, 'a').write('module\\n')\n" + plugin["files"]["late_targeted.py"]
    )
    trainer = """
    import subprocess, sys
    open(sys.argv[1], "w").close()   # forget the launcher's import
    code = ("from starforge import plugins; import sys; "
            "print('listed', plugins.registered(), 'app.algo' in sys.modules); "
            "plugins.install_deferred('late-targeted', offset=5); "
            "from app import algo; print('worker', algo.compute(1))")
    subprocess.run([sys.executable, "-c", code], check=True)
    """
    job = builder.job(plugins=[plugin], trainer=trainer)
    result = job.launch("python", "-m", "app.train", str(marker))
    assert result.returncode == 0, result.stderr
    assert "listed ('late-targeted',) False" in result.stdout
    assert "worker 7" in result.stdout
    assert marker.read_text() == "module\n"
    (rec,) = workers(job)
    assert rec["plugins"][0]["trigger"] == "install_deferred" and rec["plugins"][0]["installed_later"] is True


def test_two_forge_bootstraps_on_the_path_do_not_chain_forever(builder):
    """A job started from inside another job's environment."""
    from starforge.launch import bootstrap_env

    outer = builder.job(plugins=[demo_plugin()])
    outer_bootstrap = bootstrap_env(outer.dir)["PYTHONPATH"].split(os.pathsep)[0]
    trainer = """
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "from app import algo; print('child', algo.compute(1))"], check=True)
    """
    inner = builder.job(plugins=[demo_plugin()], trainer=trainer)
    result = inner.launch(env={"PYTHONPATH": outer_bootstrap})
    assert result.returncode == 0, result.stderr
    assert "child 20" in result.stdout


def test_worker_verifies_every_plugin_before_installing_any(builder, tmp_path):
    marker = tmp_path / "worker-install"
    first = {
        "name": "first",
        "files": {"first.py": f"def install(params):\n    open({str(marker)!r}, 'a').write('installed\\n')\n"},
    }
    # demo-patch waits for its target: the worker still checks its listing before
    # installing 'first' (a file's bytes are hashed when the file is imported or read).
    job = builder.job(plugins=[first, demo_plugin(targets=["app.algo"])], trainer=PLANT_THEN_START_WORKER)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "child exit 10" in result.stdout
    # Only the launcher's own install wrote the marker; the worker installed nothing.
    assert marker.read_text() == "installed\n"
    (rec,) = workers(job)
    assert rec["failure"]["code"] == 10 and rec["failure"]["plugin"] == "alice/demo-patch@1.0.0"


def test_launcher_started_inside_the_job_environment_still_verifies_whole_trees(builder):
    """Booted as a worker first (listing only), the launcher still reads every byte."""
    plugin = demo_plugin()
    plugin["files"] = dict(plugin["files"], **{"table.txt": "rows\n"})
    job = builder.job(plugins=[plugin])
    from starforge.launch import bootstrap_env

    env = bootstrap_env(job.dir)
    job.tamper("forge_plugins/demo-patch/table.txt", "other rows\n")  # never imported or read
    result = job.launch(env=env)
    assert result.returncode == 10, result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 failed (verification failed, exit 10)"]
    assert "changed: table.txt" in result.stderr
    assert job.status()["phase"] == "verify"
    (rec,) = job.records()
    assert rec["role"] == "launcher" and rec["plugins"][0]["check"] == "tree"
