"""A staged job (starforge.jobs.staged): one owner, its working directory, its binding.

The job runs in ``work/`` (copies of the recipe's files, writable), never in the staged
``recipe/`` that replay proves: relative writes succeed as root and as an ordinary user,
on every backend; what a job writes survives in its job directory (local, Slurm) and
``forge jobs show`` says where; a file the job writes under a recipe module's name never
shadows the staged one; nothing, not even bytecode, is written into ``recipe/``. Staging
returns the binding as a value: two jobs staged in one process are each bound to their
own hashes, and a replay's newly staged files changed before the backend starts it stop
the job (exit 10). Real local supervisor, real one-node Slurm, real loopback Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import test_binding
from support.cli import forge as forge_in_process
from support.wheel import starforge_wheel
from test_binding import BACKENDS, BIN, backends

from starforge.backends.base import node_entry, wait
from starforge.cluster.digest import tree_digest
from starforge.experiment.lock import open_experiment_registry
from starforge.experiment.stage import resolve_job_in, stage_job
from starforge.jobs.staged import remove_tree
from starforge.jobs.store import JobStore

on_backend = test_binding.on_backend  # the fixture that starts and configures the backend's engine


# A trainer as real ones are: it writes relative paths (TRL's output_dir, Hydra's outputs/)
# and reads the recipe's own files relatively.
WRITES = '''\
import json
import os

from workload import algo

os.makedirs("outputs/ckpt", exist_ok=True)
with open("outputs/ckpt/step-1.txt", "w") as f:
    f.write(algo.tag())
with open("configs/x.yaml") as f:
    config = f.read().strip()
print("WROTE " + json.dumps({"cwd": os.getcwd(), "config": config, "tag": algo.tag(), "algo": algo.__file__}), flush=True)
'''

# A trainer that, as root can, overwrites recipe files in its working directory and then
# starts a new Python process of the job with -m, as a torchrun rank would.
SPAWNS = '''\
import os
import subprocess
import sys

with open("workload/child.py", "w") as f:
    f.write("print('CHILD ran the working directory copy', flush=True)\\n")
with open("configs/x.yaml", "w") as f:
    f.write("rewritten by the job\\n")
child = subprocess.run([sys.executable, "-m", "workload.child"], capture_output=True, text=True)
print(child.stdout + child.stderr, flush=True)
'''
CHILD = '''\
import workload.child as me

print("CHILD ran the staged module " + me.__file__, flush=True)
'''
# A trainer that nests 1,200 folders in its working directory (deeper than Python's recursion limit).
DEEP = '''\
import os

for _ in range(1200):
    os.mkdir("d")
    os.chdir("d")
with open("bottom.txt", "w") as f:
    f.write("deep")
'''
FILES = {"workload/writes.py": WRITES, "workload/spawns.py": SPAWNS, "workload/child.py": CHILD, "workload/deep.py": DEEP,
         "configs/x.yaml": "lr: 0.5\n"}


def _experiment(make_experiment, backend_name: str, tmp_path: Path, entrypoint: str) -> Path:
    settings = {"staging": str(tmp_path / "shared")} if backend_name == "slurm" else None
    exp = make_experiment(entrypoint, backend_name, settings)
    for rel, text in FILES.items():
        (exp / rel).parent.mkdir(parents=True, exist_ok=True)
        (exp / rel).write_text(text)
    return exp


def _stage(exp: Path, backend_name: str, store: JobStore):
    plan = resolve_job_in(exp, backend=backend_name)
    backend = BACKENDS[backend_name](plan.experiment.backend_settings(backend_name), store)
    staged = stage_job(plan, backend.staging_dir(exp, plan.spec.id), open_experiment_registry(plan.experiment))
    return backend, staged


def _run(backend, staged):
    chunks: list[str] = []
    record = wait(backend, backend.submit(staged, detach=False), chunks.append)
    return record, "".join(chunks)


def _ran_locally(make_experiment, tmp_path: Path):
    """A job of the writing workload staged into a store under *tmp_path* and run to its end
    on the local backend (asserted to exit 0): ``(store, staged job, record)``."""
    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.writes")
    store = JobStore(tmp_path / "jobs")
    backend, staged = _stage(exp, "local", store)
    record, log = _run(backend, staged)
    assert record.exit_code == 0, log
    return store, staged, record


def _wrote(log: str) -> dict:
    return json.loads(next(line for line in log.splitlines() if line.startswith("WROTE "))[len("WROTE "):])


def _pycache_in(tree: Path) -> list:
    return [str(p) for p in tree.rglob("__pycache__")]


ALL = backends("local", "slurm", "ray")


@ALL
def test_relative_writes_land_in_the_jobs_working_directory_and_the_recipe_stays_as_staged(on_backend, make_experiment,
                                                                                            tmp_path):
    exp = _experiment(make_experiment, on_backend, tmp_path, "python -m workload.writes")
    store = JobStore(tmp_path / "jobs")
    backend, staged = _stage(exp, on_backend, store)
    record, log = _run(backend, staged)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    wrote = _wrote(log)
    assert wrote["config"] == "lr: 0.5"  # a relative read of the recipe's own file
    assert wrote["tag"].startswith("patched:")  # the plugin patched the recipe's module
    assert Path(wrote["cwd"]).name == "work"
    assert Path(wrote["algo"]).parent.parent.name == "recipe"  # imported from the staged recipe
    recipe = staged.layout.recipe
    assert tree_digest(recipe) == staged.spec.recipe_digest  # nothing written there ...
    assert not _pycache_in(recipe) and not (recipe / "outputs").exists()  # ... not even bytecode
    if on_backend == "ray":  # Ray runs each node in its own copy of the package: nothing comes back here
        assert not (staged.layout.work / "outputs").exists()
        return
    # local and Slurm: on the shared file system, in the job directory (not Slurm's node-local copy)
    assert Path(wrote["cwd"]) == staged.layout.work.resolve()
    assert (staged.layout.work / "outputs" / "ckpt" / "step-1.txt").read_text().startswith("patched:")
    from starforge.experiment.jobinfo import job_details

    outputs = job_details(store.get(record.id))["outputs"]
    assert outputs["dir"] == str(staged.layout.work.resolve()) and outputs["files"] == 1, outputs
    # ... and the job replays, strictly: its recipe, runtime, JobSpec and environment all proved
    from starforge.experiment.replay import replay_job

    again = replay_job(record.id, strict=True, store=store)
    chunks: list[str] = []
    final = wait(again.backend, again.record, chunks.append)
    assert (final.status, final.exit_code) == ("succeeded", 0), "".join(chunks)
    assert _wrote("".join(chunks))["tag"].startswith("patched:")


def test_a_job_running_as_an_ordinary_user_writes_its_working_directory(make_experiment, tmp_path, other_user):
    # The job's processes as an ordinary user (root hides permission bugs): the node entry
    # under the system's python3, on a job directory that user owns, as a node would run it.
    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.writes")
    root = Path(tempfile.mkdtemp(prefix="sfjobs", dir="/tmp"))
    try:
        root.chmod(0o755)
        plan = resolve_job_in(exp)
        staged = stage_job(plan, root / plan.spec.id, open_experiment_registry(plan.experiment))
        subprocess.run(["chown", "-R", other_user.name, str(staged.dir)], check=True)
        argv = node_entry("/usr/bin/python3", str(staged.dir), staged.binding.spec_sha256)
        env = "env -i PATH=/usr/bin:/bin HOME=/tmp"
        proc = other_user.run("sh", "-c", f"cd {staged.dir} && {env} " + " ".join(argv), check=False)
        log = proc.stdout + proc.stderr
        assert proc.returncode == 0, log
        wrote = _wrote(log)
        assert wrote["config"] == "lr: 0.5" and wrote["tag"].startswith("patched:"), wrote
        assert (staged.layout.work / "outputs" / "ckpt" / "step-1.txt").stat().st_uid == other_user.uid
        assert tree_digest(staged.layout.recipe) == staged.spec.recipe_digest
    finally:
        remove_tree(root)


@pytest.fixture(scope="module")
def user_venv(other_user, tmp_path_factory):
    """A venv the ordinary user can run: the system's ``python3`` with this checkout's
    starforge-core installed (the run's one wheel of it, copied in, not linked to the
    checkout or uv's cache), in a folder everyone can read. (This test's own Python may sit
    in root's home, which that user cannot enter.)"""
    wheel, _output, _src = starforge_wheel(tmp_path_factory)
    uv = shutil.which("uv") or (str(BIN / "uv") if (BIN / "uv").exists() else None)
    python3 = shutil.which("python3", path="/usr/bin:/bin")
    if uv is None or python3 is None:
        pytest.fail("the ordinary user's venv is made by uv (on PATH or beside this Python, as .ci/setup installs it) "
                    "from the system's python3")
    base = Path(tempfile.mkdtemp(prefix="sfvenv", dir="/tmp"))
    try:
        base.chmod(0o755)
        venv = base / "venv"
        for argv in ([uv, "venv", "-q", "--python", python3, str(venv)],
                     [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--link-mode", "copy", str(wheel)]):
            made = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            assert made.returncode == 0, made.stderr
        yield venv
    finally:
        shutil.rmtree(base, ignore_errors=True)


@backends("slurm", "ray")
def test_an_ordinary_user_submits_with_a_python_of_their_own_and_the_job_replays(
        on_backend, other_user, user_venv, make_experiment, plugin_registry, tmp_path):
    # As a user of a cluster does it: their own forge (a venv of the system's python3),
    # their own experiment, registry copy and forge home. Slurm runs the job as that user,
    # in the job directory on the shared staging folder; Ray runs it as the cluster's user,
    # from the package that user's forge uploaded. The relative-write trainer's outputs land
    # where the docs say (docs/launcher.md, "The job's working directory"), jobs show says
    # so, and the job replays (--strict on Slurm).
    import yaml

    made = _experiment(make_experiment, on_backend, tmp_path, "python -m workload.writes")
    base = Path(tempfile.mkdtemp(prefix="sfuser", dir="/tmp"))
    try:
        base.chmod(0o755)
        exp, registry, shared = base / "exp", base / "registry", base / "shared"
        shutil.copytree(made, exp, ignore=shutil.ignore_patterns(".forge", "plugins.lock.json"))
        shutil.copytree(plugin_registry, registry)
        doc = yaml.safe_load((exp / "forge.yaml").read_text())
        doc["registry"] = str(registry)
        if on_backend == "slurm":
            doc["slurm"] = {"staging": str(shared)}
        (exp / "forge.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        (base / "home").mkdir()
        subprocess.run(["chown", "-R", other_user.name, str(base)], check=True)
        # the user's environment: their venv first on PATH, this test's cluster (and nothing of root's)
        env = {"HOME": str(base / "home"), "LANG": "C.UTF-8",
               **{k: os.environ[k] for k in ("SLURM_CONF", "FORGE_RAY_ADDRESS", "FORGE_RAY_TOKEN") if k in os.environ}}

        runuser = shutil.which("runuser") or "/usr/sbin/runuser"

        def forge(*args: str) -> subprocess.CompletedProcess:
            # runuser sets HOME (and the login names) itself: set again after it
            argv = [runuser, "-u", other_user.name, "--", "env", f"HOME={env['HOME']}",
                    f"PATH={user_venv / 'bin'}:/usr/bin:/bin", "forge", *args]
            return subprocess.run(argv, cwd=exp, env=env, capture_output=True, text=True, timeout=600)

        locked = forge("lock")
        assert locked.returncode == 0, locked.stderr
        sub = forge("submit", "--json")
        assert sub.returncode == 0, sub.stdout + sub.stderr
        record = json.loads(sub.stdout)
        job_dir = Path(record["dir"])
        assert (record["status"], record["backend"]) == ("succeeded", on_backend)
        wrote = _wrote(sub.stderr)
        assert wrote["config"] == "lr: 0.5" and wrote["tag"].startswith("patched:"), wrote
        assert Path(wrote["cwd"]).name == "work" and Path(wrote["algo"]).parent.parent.name == "recipe"
        spec = json.loads((job_dir / "jobspec.json").read_text())
        assert tree_digest(job_dir / "recipe") == spec["recipe"]["digest"] and not _pycache_in(job_dir / "recipe")
        shown = forge("jobs", "show", record["id"]).stdout
        if on_backend == "slurm":  # in the shared job directory, not the node's copy, as that user's
            assert job_dir.parent == shared and Path(wrote["cwd"]) == (job_dir / "work").resolve()
            written = job_dir / "work" / "outputs" / "ckpt" / "step-1.txt"
            assert written.read_text() == wrote["tag"] and written.stat().st_uid == other_user.uid
            assert f"outputs  : {job_dir / 'work'} (1 file," in shown, shown
        else:  # in the node's copy of the package Ray unpacked: nothing comes back to the laptop
            assert not (job_dir / "work" / "outputs").exists()
            assert "outputs  : work/ in each Ray node's copy of the job package" in shown, shown

        again = forge("jobs", "replay", record["id"], *(["--strict"] if on_backend == "slurm" else []))
        replayed = again.stdout + again.stderr
        assert again.returncode == 0, replayed
        assert f"replay  : of job {record['id']}" in replayed.splitlines(), replayed
        assert _wrote(replayed)["tag"].startswith("patched:")  # the same plugin patched the same recipe again
    finally:
        remove_tree(base)


def test_an_ordinary_user_removes_and_prunes_their_jobs_entirely_or_says_what_is_left(
        make_experiment, tmp_path, other_user, user_venv):
    # The staged jobspec.json, forge_plugins/ and recipe/ are read-only (root deletes them
    # anyway): jobs rm and prune as the ordinary user who owns the job directories.
    from starforge.jobs.jobrecord import JobRecord

    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.writes")
    base = Path(tempfile.mkdtemp(prefix="sfrm", dir="/tmp"))
    try:
        base.chmod(0o755)
        store = JobStore(base / "jobs")
        ids = []
        for _ in range(3):
            plan = resolve_job_in(exp, backend="local")
            staged = stage_job(plan, base / "staging" / plan.spec.id, open_experiment_registry(plan.experiment))
            assert not os.access(staged.layout.recipe, os.W_OK) or os.geteuid() == 0
            store.save(JobRecord(id=plan.spec.id, name=plan.spec.name, backend="local", status="succeeded",
                                 dir=str(staged.dir), created="2026-01-01T00:00:00Z", exit_code=0))
            ids.append(plan.spec.id)
        removed, pruned, blocked = ids
        (base / "home").mkdir()
        subprocess.run(["chown", "-R", other_user.name, str(base)], check=True)
        theirs = base / "staging" / blocked / "work" / "theirs"  # a folder of another user (root) in one of them
        theirs.mkdir()
        (theirs / "f").write_text("root's\n")
        env = {"HOME": str(base / "home"), "LANG": "C.UTF-8", "FORGE_HOME": str(base / "home"), "FORGE_JOBS_DIR": str(base / "jobs")}
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"

        def forge(*args: str) -> subprocess.CompletedProcess:
            argv = [runuser, "-u", other_user.name, "--", "env", *(f"{k}={v}" for k, v in env.items()),
                    f"PATH={user_venv / 'bin'}:/usr/bin:/bin", "forge", *args]
            return subprocess.run(argv, cwd=base, env=env, capture_output=True, text=True, timeout=300)

        rm = forge("jobs", "rm", removed)
        assert (rm.returncode, rm.stdout, rm.stderr) == (0, f"removed {removed}\n", "")
        assert not os.path.lexists(base / "staging" / removed)

        pruned_now = forge("jobs", "prune", "--older-than", "1d", "--with-outputs")
        assert pruned_now.returncode == 1 and pruned_now.stdout == f"removed {pruned}\n", pruned_now.stderr
        assert not os.path.lexists(base / "staging" / pruned)
        error, hint = pruned_now.stderr.splitlines()
        assert error == (f"error: job {blocked}: 1 entry of {base / 'staging' / blocked} could not be deleted, so its record "
                         f"is kept: {blocked}/work/theirs/f: Permission denied"), pruned_now.stderr
        assert hint.startswith("hint: make them deletable")
        assert (theirs / "f").read_text() == "root's\n"
        assert [r["id"] for r in json.loads(forge("jobs", "list", "--json").stdout)] == [blocked]  # forge can try again

        shutil.rmtree(theirs)
        again = forge("jobs", "rm", "--with-outputs", blocked)
        assert (again.returncode, again.stdout) == (0, f"removed {blocked}\n"), again.stderr
        assert list((base / "staging").iterdir()) == [] and list((base / "jobs").glob("*.json")) == []
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True, timeout=120)


def test_a_file_written_under_a_recipe_modules_name_never_shadows_the_staged_one(make_experiment, tmp_path, forge_home):
    from starforge.experiment.replay import replay_job

    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.spawns")
    store = JobStore(tmp_path / "jobs")
    backend, staged = _stage(exp, "local", store)
    record, log = _run(backend, staged)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert "CHILD ran the staged module " + str(staged.layout.recipe.resolve()) in log, log
    assert "working directory copy" not in log
    work = staged.layout.work
    assert (work / "configs" / "x.yaml").read_text() == "rewritten by the job\n"  # the job's own copy changed ...
    assert (staged.layout.recipe / "configs" / "x.yaml").read_text() == "lr: 0.5\n"  # ... not what replay proves
    assert tree_digest(staged.layout.recipe) == staged.spec.recipe_digest and not _pycache_in(staged.layout.recipe)

    again = replay_job(record.id, strict=True, store=store)  # the recipe, as staged, is still what was recorded
    chunks: list[str] = []
    final = wait(again.backend, again.record, chunks.append)
    assert (final.status, final.exit_code) == ("succeeded", 0), "".join(chunks)
    new_recipe = Path(again.record.dir).resolve() / "recipe"
    assert "CHILD ran the staged module " + str(new_recipe) in "".join(chunks)


def test_rm_and_prune_refuse_a_job_with_outputs_unless_asked(make_experiment, tmp_path, forge_home):
    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.writes")
    env = {**os.environ, "FORGE_HOME": str(forge_home)}
    forge = [str(BIN / "forge")]
    sub = subprocess.run([*forge, "submit", "--json"], cwd=exp, env=env, capture_output=True, text=True, timeout=300)
    assert sub.returncode == 0, sub.stderr
    job = json.loads(sub.stdout)
    job_dir = Path(job["dir"])
    shown = subprocess.run([*forge, "jobs", "show", job["id"]], env=env, capture_output=True, text=True, timeout=60)
    assert f"outputs  : {job_dir / 'work'} (1 file," in shown.stdout, shown.stdout

    for argv in (["jobs", "rm", job["id"]], ["jobs", "prune", "--older-than", "0s"]):
        refused = subprocess.run([*forge, *argv], env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and refused.stderr.startswith(f"error: job {job['id']} holds outputs (1 file, "), refused.stderr
        assert "--with-outputs" in refused.stderr and (job_dir / "work" / "outputs").is_dir()
    assert json.loads(subprocess.run([*forge, "jobs", "list", "--json"], env=env, capture_output=True, text=True,
                                     timeout=60).stdout)[-1]["id"] == job["id"]  # refused: nothing was deleted, record included
    helped = subprocess.run([*forge, "jobs", "prune", "--help"], env=env, capture_output=True, text=True, timeout=60).stdout
    assert "is refused, with their size, and then nothing at all is deleted; --with-outputs deletes the outputs too" \
        in " ".join(helped.split()), helped
    removed = subprocess.run([*forge, "jobs", "rm", "--with-outputs", job["id"]], env=env, capture_output=True, text=True,
                             timeout=60)
    assert removed.returncode == 0 and f"removed {job['id']}" in removed.stdout, removed.stderr
    assert not job_dir.exists()


def test_a_thousand_folders_deep_working_directory_is_shown_and_removed(make_experiment, tmp_path, forge_home):
    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.deep")
    env = {**os.environ, "FORGE_HOME": str(forge_home)}

    def forge(*args: str) -> subprocess.CompletedProcess:
        return forge_in_process(*args, cwd=exp, env=env, timeout=300)

    try:
        sub = forge("submit", "--json")
        assert sub.returncode == 0, sub.stderr
        job = json.loads(sub.stdout)
        job_dir = Path(job["dir"])
        shown = forge("jobs", "show", job["id"])
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        assert f"outputs  : {job_dir / 'work'} (1 file, 4 B written)" in shown.stdout, shown.stdout
        refused = forge("jobs", "rm", job["id"])
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(f"error: job {job['id']} holds outputs (1 file, 4 B in "), refused.stderr
        removed = forge("jobs", "rm", "--with-outputs", job["id"])
        assert (removed.returncode, removed.stdout, removed.stderr) == (0, f"removed {job['id']}\n", "")
        assert not os.path.lexists(job_dir)
        assert json.loads(forge("jobs", "list", "--json").stdout) == []
    finally:  # whatever failed: no tree deeper than the recursion limit is left for pytest's own cleanup
        subprocess.run(["rm", "-rf", str(exp / ".forge")], check=True, timeout=120)


def test_two_jobs_staged_in_one_process_are_each_bound_to_their_own_hashes(make_experiment, tmp_path):
    exp = _experiment(make_experiment, "local", tmp_path, "python -m workload.writes")
    store = JobStore(tmp_path / "jobs")
    first_backend, first = _stage(exp, "local", store)
    second_backend, second = _stage(exp, "local", store)
    assert first.binding.spec_sha256 != second.binding.spec_sha256  # another id, another JobSpec
    for backend, staged in ((second_backend, second), (first_backend, first)):  # the reverse order
        record, log = _run(backend, staged)
        assert (record.status, record.exit_code) == ("succeeded", 0), log
        saved = store.get(staged.spec.id)
        assert (saved.spec_sha256, saved.runtime_sha256) == (staged.binding.spec_sha256, staged.binding.runtime_sha256)


@pytest.mark.parametrize("what", ["runtime", "spec"])
def test_a_replays_newly_staged_files_changed_before_the_start_stop_the_job(make_experiment, tmp_path, forge_home,
                                                                             monkeypatch, what):
    from starforge.backends import local
    from starforge.experiment.replay import replay_job

    store, staged, record = _ran_locally(make_experiment, tmp_path)
    marker = tmp_path / "changed-runtime-ran"
    original = local.LocalBackend.submit

    def change_then_submit(self, staged, *, detach):  # between the replay's staging and its start
        if what == "runtime":
            zip_path = staged.layout.runtime_zip
            zip_path.chmod(0o644)
            import io
            import zipfile

            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as zf:
                zf.writestr("__main__.py", f"open({str(marker)!r}, 'w').write('ran')\n")
            zip_path.write_bytes(buf.getvalue())
        else:
            spec = staged.layout.spec
            spec.chmod(0o644)
            spec.write_text(spec.read_text().replace('"patched"', '"evil"'))
        return original(self, staged, detach=detach)

    monkeypatch.setattr(local.LocalBackend, "submit", change_then_submit)
    again = replay_job(record.id, store=store)
    chunks: list[str] = []
    final = wait(again.backend, again.record, chunks.append)
    out = "".join(chunks)
    assert (final.status, final.exit_code) == ("failed", 10), out
    assert "changed after staging" in out and "WROTE" not in out and not marker.exists(), out


def test_a_staging_leftover_behind_a_symlink_is_never_followed(tmp_path):
    # another user's folder the victim's cleanup must not touch: its modes stay as they are
    theirs = tmp_path / "theirs"
    (theirs / "inner").mkdir(parents=True)
    theirs.chmod(0o500)
    (theirs / "inner").chmod(0o500)
    link = tmp_path / ".job.staging-x"
    link.symlink_to(theirs)
    remove_tree(link)
    assert not os.path.lexists(link) and theirs.is_dir()
    assert (theirs.stat().st_mode & 0o777, (theirs / "inner").stat().st_mode & 0o777) == (0o500, 0o500)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "to-theirs").symlink_to(theirs)
    (tree / "sub").chmod(0o500)
    remove_tree(tree)
    assert not tree.exists() and (theirs.stat().st_mode & 0o777) == 0o500
    theirs.chmod(0o700)
    (theirs / "inner").chmod(0o700)
    shutil.rmtree(theirs)


def test_a_replay_under_a_permissive_umask_writes_nothing_others_may_change(make_experiment, tmp_path, forge_home):
    from starforge.experiment.replay import replay_job

    store, staged, record = _ran_locally(make_experiment, tmp_path)
    old = os.umask(0)
    try:
        again = replay_job(record.id, dry_run=False, detach=True, store=store)
    finally:
        os.umask(old)
    wait(again.backend, again.record, lambda _: None)
    runtime = Path(again.record.dir) / ".forge-runtime"
    runs_from = [runtime, runtime / "bootstrap", runtime / "bootstrap" / "sitecustomize.py", runtime / "starforge-runtime.zip",
                 runtime / "hyperparams.json", Path(again.record.dir) / "jobspec.json"]
    assert [(str(p), oct(p.stat().st_mode & 0o777)) for p in runs_from if p.stat().st_mode & 0o022] == []
    assert [str(p) for p in runtime.rglob("*") if p.stat().st_mode & 0o002] == []


def test_replay_refuses_a_jobspec_edited_to_match_an_edited_recipe(make_experiment, tmp_path, forge_home):
    from starforge.errors import ForgeError
    from starforge.experiment.replay import replay_job

    store, staged, record = _ran_locally(make_experiment, tmp_path)
    recipe_file = staged.layout.recipe / "configs" / "x.yaml"
    recipe_file.parent.chmod(0o755)
    recipe_file.chmod(0o644)
    recipe_file.write_text("lr: 9.0\n")
    spec_path = staged.layout.spec
    data = json.loads(spec_path.read_text())
    data["recipe"]["digest"] = tree_digest(staged.layout.recipe)  # the edit made to look recorded
    spec_path.chmod(0o644)
    spec_path.write_text(json.dumps(data))
    with pytest.raises(ForgeError) as refused:
        replay_job(record.id, strict=True, store=store)
    assert refused.value.exit_code == 10
    assert "its JobSpec" in refused.value.message and "changed since the job was submitted" in refused.value.message
