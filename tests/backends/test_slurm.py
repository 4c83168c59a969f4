"""The slurm backend against a real one-node Slurm (munged + slurmctld + slurmd on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from starforge.backends.base import wait
from starforge.backends.slurm import _PREPARE, JOB_ITEMS, NAME_HOST, SlurmBackend, batch_script, query_state, sbatch_command
from starforge.errors import BackendError, ManifestError
from starforge.experiment.submit import submit_experiment
from starforge.jobs.binding import Binding

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


def _run(exp: Path):
    sub = submit_experiment(exp, (), backend="slurm")
    chunks: list[str] = []
    record = wait(sub.backend, sub.record, chunks.append)
    return sub, record, "".join(chunks)


def _results(log: str) -> list:
    return [json.loads(l[len("RESULTS ") :]) for l in log.splitlines() if l.startswith("RESULTS ")]


def _forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "forge"), *args], capture_output=True, text=True, timeout=60)


def test_job_runs_once_with_plugins_in_every_process(slurm_job_env, make_experiment, tmp_path):
    shared = tmp_path / "shared"
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(shared)})
    sub, record, log = _run(exp)

    assert (record.status, record.exit_code) == ("succeeded", 0), log
    job_dir = shared / sub.spec.id
    assert record.dir == str(job_dir)
    [res] = _results(log)  # launch: once
    assert res["driver"].startswith("patched:plain:") and res["child"].startswith("patched:plain:"), res
    # The training ran on the node-local copy, in a fresh private directory with an
    # unpredictable name (mktemp -d under the job's TMPDIR), and worked in the job's
    # working directory on the shared file system (what it writes outlives the copy).
    base = re.escape(os.environ.get("TMPDIR") or "/tmp")
    found = re.fullmatch(base + r"(/starforge-(\d+)\.[A-Za-z0-9]{10})", res["job_dir"])
    assert found and found.group(2) == record.backend_ref["job_id"], res["job_dir"]
    local = res["job_dir"]
    assert res["cwd"] == str(job_dir / "work") and res["cwd_mode"] == "0o755", res
    assert (res["job_dir_mode"], res["job_dir_uid"]) == ("0o700", os.geteuid())
    assert not os.path.exists(local)  # ...which the collect step removed
    assert res["slurm"]["SLURM_JOB_ID"] == record.backend_ref["job_id"]
    assert "plugin  : tester/mark-worker@1.0.0 loaded" in log

    # Provenance came back to the shared directory: the launcher and the spawned child
    # both patched workload.algo:tag; the prepare step's launcher pass is recorded too.
    records = [json.loads(p.read_text()) for p in (job_dir / "provenance").glob("*.json")]
    patched = {r["pid"]: r["role"] for r in records if any(p.get("target") == "workload.algo:tag" for p in r["patches"])}
    child_pid = int(res["child"].rsplit(":", 1)[1])
    driver_pid = int(res["driver"].rsplit(":", 1)[1])
    assert patched.get(driver_pid) == "launcher" and child_pid in patched, records
    assert json.loads((job_dir / "status.json").read_text())["code"] == 0
    assert (job_dir / "slurm" / "exit_code").read_text().strip() == "0"

    # The CLI sees the same job through the jobs store and the backend.
    shown = _forge("jobs", "show", record.id, "--json")
    assert shown.returncode == 0, shown.stderr
    details = json.loads(shown.stdout)
    assert (details["status"], details["exit_code"], details["backend"], details["dir"]) == ("succeeded", 0, "slurm", str(job_dir))
    logs = _forge("jobs", "logs", record.id)
    assert logs.returncode == 0 and "RESULTS " in logs.stdout


def test_per_node_launch_runs_in_an_srun_step_and_passes_the_exit_code(slurm_job_env, make_experiment, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKLOAD_EXIT", "7")  # reaches the job through sbatch's exported environment
    monkeypatch.setenv("FORGE_SLURM_STAGING", str(tmp_path / "from-env"))
    exp = make_experiment("python -m workload.train", "slurm", {"launch": "per-node", "staging": str(tmp_path / "ignored")})
    sub, record, log = _run(exp)

    assert (record.status, record.exit_code) == ("failed", 7), log
    assert record.dir == str(tmp_path / "from-env" / sub.spec.id)
    [res] = _results(log)  # one node in this allocation: one run
    # not the batch step: a job step started by srun, task 0 on node 0
    assert res["slurm"]["SLURM_STEP_ID"] not in (None, "batch") and res["slurm"]["SLURM_STEP_ID"].isdigit(), res
    assert (res["slurm"]["SLURM_NODEID"], res["slurm"]["SLURM_PROCID"]) == ("0", "0")
    assert res["driver"].startswith("patched:")
    state = query_state(record.backend_ref["job_id"], Path(record.dir))
    assert (state["state"], state["exit_code"]) == ("FAILED", 7)
    # Provenance names the Slurm job, node and task of each launcher (prepare step and run).
    records = [json.loads(p.read_text()) for p in (Path(record.dir) / "provenance").glob("*.json")]
    launchers = {r["mode"]: r["scheduler"]["slurm"] for r in records if r["role"] == "launcher"}
    assert set(launchers) == {"verify-only", "launch"}, records
    for ids in launchers.values():
        assert ids["job_id"] == record.backend_ref["job_id"]
        assert (ids["node_id"], ids["proc_id"]) == ("0", "0")
    assert launchers["launch"]["step_id"] == res["slurm"]["SLURM_STEP_ID"]
    # the end of the attempt: the launcher's outputs manifest, made on the node-local copy and
    # brought back by the collect step, lists the job's working directory on the shared file system
    manifest, = [json.loads(p.read_text()) for p in (Path(record.dir) / "lineage").glob("outputs-a0-*.json")]
    assert (manifest["recorded_by"], manifest["dirs"][0]["path"]) == ("launcher", str(Path(record.dir) / "work"))


def test_tampered_plugin_stops_the_job_before_the_entrypoint(slurm_job_env, make_experiment, tmp_path):
    from starforge.experiment.lock import open_experiment_registry
    from starforge.experiment.stage import resolve_job_in, stage_job
    from starforge.jobs.store import JobStore

    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(tmp_path / "shared")})
    plan = resolve_job_in(exp, backend="slurm")
    backend = SlurmBackend(plan.experiment.slurm, JobStore())
    job_dir = backend.staging_dir(exp, plan.spec.id)
    staged = stage_job(plan, job_dir, open_experiment_registry(plan.experiment))
    target = job_dir / "forge_plugins" / "mark-worker" / "mark_worker.py"
    target.chmod(0o644)
    target.write_text(target.read_text().replace("label + ", "'evil:' + label + "))

    record = wait(backend, backend.submit(staged, detach=False), lambda _: None)
    log = "".join(backend.logs(record))
    assert (record.status, record.exit_code) == ("failed", 10), log
    assert "mark_worker.py" in log
    assert _results(log) == []
    assert json.loads((job_dir / "status.json").read_text())["phase"] == "verify"


def test_cancel_stops_the_job_with_scancel(slurm_job_env, make_experiment, tmp_path):
    exp = make_experiment(
        "python -c 'import time; print(\"sleeping\", flush=True); time.sleep(300)'", "slurm", {"staging": str(tmp_path / "s")}
    )
    sub = submit_experiment(exp, (), backend="slurm", detach=True)
    backend, record = sub.backend, sub.record
    deadline = time.monotonic() + 60
    while "sleeping" not in "".join(backend.logs(record)) and time.monotonic() < deadline:
        time.sleep(0.3)
    record = backend.cancel(record)
    assert record.status == "cancelled"
    deadline = time.monotonic() + 30
    while (state := query_state(record.backend_ref["job_id"], Path(record.dir)))["state"] != "CANCELLED":
        assert time.monotonic() < deadline, state
        time.sleep(0.3)
    assert backend.refresh(record).status == "cancelled"


def _sbatch_losing_its_answer(folder: Path, submits: bool) -> Path:
    """A ``sbatch`` first on PATH that exits as ``timeout`` does when sbatch hangs (124), after
    running the real sbatch (*submits*: slurmctld queued the job, its answer was lost) or not."""
    folder.mkdir()
    real = shutil.which("sbatch")
    run = f'{real} "$@" >/dev/null 2>&1\n' if submits else ""
    (folder / "sbatch").write_text(f"#!/bin/sh\n{run}exit 124\n")
    (folder / "sbatch").chmod(0o755)
    return folder


def test_a_job_slurm_queued_after_sbatch_timed_out_is_recorded_not_submitted_again(
        slurm_job_env, make_experiment, tmp_path, monkeypatch):
    exp = make_experiment("python -c 'print(\"ran once\")'", "slurm", {"staging": str(tmp_path / "s")})
    shim = _sbatch_losing_its_answer(tmp_path / "bin", submits=True)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    sub, record, log = _run(exp)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert record.backend_ref["job_id"].isdigit()
    assert log.count("ran once") == 1, log  # the queued job is followed; none started again


def test_an_sbatch_that_timed_out_before_slurm_queued_the_job_says_so(slurm_job_env, make_experiment, tmp_path, monkeypatch):
    exp = make_experiment("python -c 'print(1)'", "slurm", {"staging": str(tmp_path / "s")})
    shim = _sbatch_losing_its_answer(tmp_path / "bin", submits=False)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BackendError) as failed:
        submit_experiment(exp, (), backend="slurm", detach=True)
    assert "'sbatch --parsable' did not answer within 30 s, and no job of " in failed.value.message
    assert "is in Slurm's queue (it may still appear: squeue --me -o '%i %Z')" in failed.value.message
    assert failed.value.hint == "is slurmctld running and reachable (scontrol ping)?"


def test_a_job_slurm_forgot_is_read_from_its_exit_code_file(slurm_job_env, tmp_path):
    job_dir = tmp_path / "job"
    (job_dir / "slurm").mkdir(parents=True)
    # scontrol does not know this id and this cluster has no accounting (sacct fails)
    assert query_state("987654", job_dir)["state"] is None
    (job_dir / "slurm" / "exit_code").write_text("3\n")
    assert query_state("987654", job_dir) == {"state": "FAILED", "exit_code": 3, "reason": ""}


def test_batch_script_and_settings(tmp_path):
    from starforge.cluster.jobspec import JobSpec, example

    spec = JobSpec.from_dict(example())
    settings = {"launch": "per-node", "nodes": 2, "partition": "gpu", "time": "01:00:00", "sbatch_args": ["--qos=high"]}
    bound = Binding("a" * 64, "b" * 64)
    text = batch_script(tmp_path / "job dir", spec, settings, bound)
    # No value of the job in the script: sbatch reads #SBATCH lines itself, so the job's
    # paths and names are sbatch arguments, the shared directory the script's argument.
    assert "#SBATCH" not in text and str(tmp_path) not in text and spec.name not in text
    argv = sbatch_command(tmp_path / "job dir", spec, settings, tmp_path / "job dir" / "slurm" / "job.sbatch")
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-3:] == ["--qos=high", f"{tmp_path}/job dir/slurm/job.sbatch", f"{tmp_path}/job dir"]
    assert f"--output={tmp_path}/job dir/slurm/output.log" in argv and f"--chdir={tmp_path}/job dir" in argv
    assert {"--nodes=2", "--partition=gpu", "--time=01:00:00", f"--job-name={spec.name}", "--export=ALL"} <= set(argv)
    assert "--output=/j/%%j%%u/slurm/output.log" in sbatch_command(Path("/j/%j%u"), spec, {}, Path("/s"))
    entry = 'python3 "$LOCAL/.forge-runtime/starforge-runtime.zip" --spec "$LOCAL/jobspec.json" --spec-sha256 "$SPEC_SHA256"'
    # per node, the launcher runs under a wrapper that names the host it failed on
    assert f"on_each_node bash -c {shlex.quote(NAME_HOST)} forge-run \"$SHARED\" {entry}" in text
    assert 'export FORGE_PROVENANCE_SHARED="$SHARED/provenance"' in text and 'export FORGE_PROVENANCE_SHARED' in batch_script(tmp_path, spec, {"launch": "once"}, bound)
    assert 'exec python3 "$zip" --spec "$local/jobspec.json" --spec-sha256 "$spec_sha" --verify-only' in text
    # the binding is in the script slurmctld stores at submit
    assert f"\nRUNTIME_SHA256={'a' * 64}\nSPEC_SHA256={'b' * 64}\n" in text
    assert 'BASE="${TMPDIR:-/tmp}"' in text and 'LOCAL=$(mktemp -d "$BASE/starforge-${SLURM_JOB_ID:-job}.XXXXXXXXXX")' in text
    assert "BASE=/local/scratch\n" in batch_script(tmp_path, spec, {"node_dir": "/local/scratch"}, bound)
    once = batch_script(tmp_path, spec, {"launch": "once"}, bound)
    assert f"\n    {entry}" in once and "one_step" not in once
    # srun options and a container image apply to every step, the single run included
    boxed = batch_script(tmp_path, spec, {"launch": "once", "container": "nvcr.io/rl:24.05",
                                          "srun_args": ["--mpi=none"], "container_mounts": ["/data:/data"]}, bound)
    opts = '--mpi=none --container-image=nvcr.io/rl:24.05 "--container-mounts=$CONTAINER_MOUNTS"'
    assert 'CONTAINER_MOUNTS="$SHARED:$SHARED,$BASE:$BASE,/data:/data"' in boxed
    assert f"--kill-on-bad-exit=1 {opts} \"$@\"; }}" in boxed
    assert f'one_step() {{ srun --nodes=1 --ntasks=1 {opts} "$@"; }}' in boxed and f"\n    one_step {entry}" in boxed
    with pytest.raises(ManifestError, match="slurm.srun_args: expected a list of strings"):
        SlurmBackend({"srun_args": "--mpi=none"})
    with pytest.raises(ManifestError, match="did you mean 'slurm.launch'"):
        SlurmBackend({"lanch": "once"})
    with pytest.raises(ManifestError, match="once or per-node"):
        SlurmBackend({"launch": "everywhere"})
    with pytest.raises(ManifestError, match="positive integer"):
        SlurmBackend({"nodes": 0})


# -- values of the job and the node-local copy (SPEC §9 threat model, §11) ----------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"partition": "debug\ntouch /tmp/pwned"}, re.escape("slurm.partition: 'debug\\ntouch /tmp/pwned' holds a newline")),
        ({"sbatch_args": ["--qos=a\x1b[2J"]}, "slurm.sbatch_args: .* holds control character U\\+001B"),
        ({"node_dir": "/scratch\r"}, "slurm.node_dir: .* holds a carriage return"),
    ],
)
def test_a_setting_with_a_control_character_is_refused(settings, message):
    with pytest.raises(ManifestError, match=message):
        SlurmBackend(settings)


def test_a_newline_in_the_experiment_path_injects_nothing(slurm_job_env, make_experiment, tmp_path, forge_home):
    # Before: `#SBATCH --chdir='<path>` with the rest of the path on the next line, a shell
    # command of the batch script. Now: refused at submit, one line, nothing submitted.
    exp = make_experiment("python -m workload.train", "slurm", name="exp")
    evil = tmp_path / "x\ntouch INJECTED\n"
    evil.mkdir()
    exp = exp.rename(evil / "exp")
    proc = subprocess.run([str(BIN / "forge"), "submit", "--backend", "slurm", str(exp)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: the job directory ") and "holds a newline" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not list(tmp_path.rglob("INJECTED"))
    assert not (exp / ".forge" / "jobs").exists() or not any((exp / ".forge" / "jobs").iterdir())
    with pytest.raises(BackendError, match="holds a newline"):
        submit_experiment(exp, (), backend="slurm")


def test_a_percent_in_the_staging_path_is_not_a_slurm_pattern(slurm_job_env, make_experiment, tmp_path):
    shared = tmp_path / "jobs-%j-%u-100%"
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(shared)})
    sub, record, log = _run(exp)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert (shared / sub.spec.id / "slurm" / "output.log").is_file()  # the literal path, not job id / user
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("jobs-")] == [shared.name]
    assert _results(log)[0]["driver"].startswith("patched:")


@pytest.fixture
def scratch():
    """A node scratch directory like /tmp (world-writable, sticky) that another user can reach."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sfscratch", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _plant_job_tree(other_user, root: Path, marker: Path) -> None:
    """What another user plants: a job-shaped tree of theirs whose runtime 'zip' records that it ran."""
    script = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')"
    other_user.run("sh", "-c", f"mkdir -p {root}/.forge-runtime && echo '{{}}' > {root}/jobspec.json"
                   f" && printf '%s\\n' \"{script}\" > {root}/.forge-runtime/starforge-runtime.zip && chmod -R a+rwX {root}")


def test_another_users_planted_paths_are_never_used(slurm_job_env, make_experiment, tmp_path, other_user, scratch):
    # The old node-local path was /tmp/starforge-<job id> (rm -rf, mkdir -p, mv, exec):
    # another user pre-creating it stopped the job, or got their zip executed as the job's
    # user. Plant every predictable name; the job runs from a fresh private directory.
    marker = tmp_path / "ran-as-job-user"
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(tmp_path / "shared"), "node_dir": str(scratch)})
    from starforge.experiment.stage import resolve_job_in

    job_id = resolve_job_in(exp, backend="slurm").spec.id
    _plant_job_tree(other_user, scratch / "evil", marker)
    names = [f"starforge-{job_id}", f"starforge-{job_id}.tmp", "starforge-1", "starforge-job"]
    for name in names:
        other_user.run("ln", "-s", str(scratch / "evil"), str(scratch / name))
    sub, record, log = _run(exp)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    assert not marker.exists()
    [res] = _results(log)
    local = Path(res["job_dir"])
    assert local.parent == scratch and re.fullmatch(r"starforge-\d+\.[A-Za-z0-9]{10}", local.name), res
    assert (res["job_dir_mode"], res["job_dir_uid"]) == ("0o700", os.geteuid())
    assert not local.exists()  # removed by the collect step; what the other user planted is untouched
    assert sorted(p.name for p in scratch.iterdir()) == sorted(names + ["evil"])


@pytest.mark.parametrize("plant", ["directory", "symlink", "group-writable"])
def test_the_prepare_step_refuses_a_node_dir_it_does_not_own(slurm_job_env, tmp_path, other_user, scratch, plant):
    # The name is the batch host's `mktemp -d`; another node makes the same path itself.
    # Had another user taken that path first (guessed, raced), the step stops with exit 10
    # before copying anything there or executing anything from it.
    marker = tmp_path / "ran-as-job-user"
    shared = scratch / "shared"
    _plant_job_tree(other_user, shared, marker)  # stands in for the job: its 'zip' must not run either
    local = scratch / "starforge-42.AbCdEfGhIj"
    if plant == "directory":
        other_user.run("mkdir", "-m", "0777", str(local))
    elif plant == "symlink":
        _plant_job_tree(other_user, scratch / "evil", marker)
        other_user.run("ln", "-s", str(scratch / "evil"), str(local))
    else:  # ours, but not private: refused too, never loosened into use
        local.mkdir()
        local.chmod(0o770)
    proc = subprocess.run(
        ["srun", "--nodes=1", "--ntasks=1", "bash", "-c", _PREPARE, "forge-prepare", str(shared), str(local), "0" * 64, "0" * 64, *JOB_ITEMS],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert proc.returncode == 10, proc.stdout + proc.stderr
    assert "is not a fresh private directory" in proc.stderr
    assert not marker.exists()
    if plant != "symlink":
        assert not (local / "jobspec.json").exists()  # nothing of the job was copied there


@pytest.mark.parametrize("said, hint", [
    ("sbatch: error: Batch job submission failed: Invalid partition name specified", "sinfo -s"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified", "--account=NAME"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available", "cpus_per_task"),
    ("sbatch: error: Batch job submission failed: something new", "slurm: settings in forge.yaml"),
])
def test_an_sbatch_refusal_comes_with_a_hint(said, hint):
    from starforge.backends.slurm_client import sbatch_hint

    assert hint in sbatch_hint(said)


def test_a_requeued_prepare_marks_the_earlier_copies_removed_only_when_they_all_went(other_user):
    # As the job's (ordinary) user: an earlier attempt's read-only copy goes; a copy holding a
    # folder of another user (root) cannot, so no mark says this host removed its copies.
    import socket

    base = Path(other_user.run("mktemp", "-d", "/tmp/forge-node-XXXXXXXX").stdout.strip())
    shared = Path(other_user.run("mktemp", "-d", "/tmp/forge-shared-XXXXXXXX").stdout.strip())
    marks = shared / "slurm" / "cleanup"
    try:
        other_user.run("mkdir", "-p", str(marks), str(base / "starforge-42.gone000001" / "forge_plugins" / "p"),
                       str(base / "starforge-42.stuck00001" / "work"))
        other_user.run("chmod", "-R", "a-w", str(base / "starforge-42.gone000001"))
        theirs = base / "starforge-42.stuck00001" / "work" / "theirs"
        theirs.mkdir()
        (theirs / "f").write_text("root's\n")

        def prepare(local: Path) -> subprocess.CompletedProcess:
            return other_user.run("env", "SLURM_JOB_ID=42", "FORGE_ATTEMPT=1", "bash", "-c", _PREPARE, "forge-prepare",
                                  str(shared), str(local), "0" * 64, "0" * 64, *JOB_ITEMS, check=False)

        proc = prepare(base / "starforge-42.NewCopy001")
        assert not (base / "starforge-42.gone000001").exists() and (theirs / "f").is_file()
        assert list(marks.iterdir()) == [], proc.stderr
        assert f"an earlier attempt's node-local copy {base / 'starforge-42.stuck00001'} could not be removed entirely" \
            in proc.stderr
        shutil.rmtree(theirs)
        prepare(base / "starforge-42.NewCopy002")
        host = socket.gethostname().split(".")[0]
        assert [(p.name, p.read_text()) for p in marks.iterdir()] == [(f"a1-{host}.swept", "2\n")]  # the stuck one and NewCopy001
    finally:
        subprocess.run(["rm", "-rf", str(base), str(shared)], check=True)


@pytest.mark.parametrize("kind", ["a folder of another user", "a link of another user", "writable by all without the sticky bit"])
def test_the_prepare_step_refuses_a_node_dir_another_user_could_swap_the_copy_in(tmp_path, other_user, kind):
    # The node-local copy is made, checked, then run from: where another user owns (or can
    # write) the folder it is made in, they could rename it after the check and put their
    # own in its place. The step stops with exit 10 before copying or running anything.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "jobspec.json").write_text("{}")
    made = []
    if kind == "a folder of another user":
        base = Path(other_user.run("mktemp", "-d", "/tmp/forge-node-XXXXXXXX").stdout.strip())
        other_user.run("chmod", "0755", str(base))
        made.append(base)
    elif kind == "a link of another user":
        target = tmp_path / "real"
        target.mkdir()
        base = Path(other_user.run("mktemp", "-u", "/tmp/forge-node-link-XXXXXXXX").stdout.strip())
        other_user.run("ln", "-s", str(target), str(base))
        made.append(base)
    else:
        base = tmp_path / "shared-tmp"
        base.mkdir()
        base.chmod(0o777)
    local = base / "starforge-42.AbCdEfGhIj"
    try:
        proc = subprocess.run(["bash", "-c", _PREPARE, "forge-prepare", str(shared), str(local), "0" * 64, "0" * 64, *JOB_ITEMS],
                              capture_output=True, text=True, timeout=120)
        copied = os.path.lexists(local)
    finally:
        for path in made:
            subprocess.run(["rm", "-rf", str(path)], check=True)
    assert proc.returncode == 10, proc.stdout + proc.stderr
    assert "the node-local directory's folder is not safe: " in proc.stderr
    assert ("is owned by uid" if kind != "writable by all without the sticky bit" else "is writable by others without the sticky bit") in proc.stderr
    assert not copied  # nothing made or copied there
