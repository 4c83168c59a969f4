"""Provenance records and their summary (what `forge jobs show` prints)."""

from __future__ import annotations

import json
import os

from launch_jobs import deferred_plugin, demo_plugin

from starforge.cluster.provenance import read_records, summarize


def test_summary_counts_processes_plugins_and_patches(builder):
    trainer = """
    import subprocess, sys
    from starforge.plugins import install_deferred
    install_deferred("late-offset", offset=1)
    subprocess.run([sys.executable, "-c", "from app import algo; algo.compute(1)"], check=True)
    """
    env_plugin = {"name": "sandbox-env", "kind": "environment", "files": {"sandbox_env.py": ""}}
    builtin = {"name": "demo-patch", "version": "0.1.0", "files": {"demo_patch.py": ""}}
    job = builder.job(plugins=[demo_plugin(), deferred_plugin(), env_plugin], builtins=[builtin], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    summary = summarize(str(job.dir))
    assert summary["processes"] == 2
    assert summary["attempts"] == [0]
    assert summary["launcher"]["pid"] != summary["launcher"]["attempt"]
    assert summary["failures"] == []
    plugins = summary["plugins"]
    demo = plugins["alice/demo-patch@1.0.0"]
    assert (demo["verified"], demo["loaded"], demo["source"]) == (2, 2, "package")
    late = plugins["alice/late-offset@1.0.0"]
    # registered in both processes, installed only where the trainer called install_deferred
    assert (late["registered"], late["installed_later"]) == (2, 1)
    assert plugins["alice/sandbox-env@1.0.0"]["skipped"] == 2
    assert plugins["recipe:demo-patch@0.1.0"]["shadowed"] == 2
    targets = sorted((p["target"], p["plugin"], p["processes"]) for p in summary["patches"] if p.get("status") == "applied")
    # the launcher's two patches, the worker's one (deferred is not installed there)
    assert ("app.algo:compute", "alice/demo-patch@1.0.0", 2) in targets
    assert ("app.algo:compute", "alice/late-offset@1.0.0", 1) in targets


def test_records_are_per_attempt_and_failures_are_summarized(builder):
    job = builder.job(plugins=[demo_plugin()])
    assert job.launch().returncode == 0
    job.tamper("forge_plugins/demo-patch/demo_patch.py", "def install(params):\n    pass\n")
    assert job.launch().returncode == 10
    names = sorted(os.listdir(job.dir / "provenance"))
    assert [n.split("-")[0] for n in names] == ["a0", "a1"]
    summary = summarize(str(job.dir))
    assert summary["attempts"] == [0, 1]
    (failure,) = summary["failures"]
    assert (failure["phase"], failure["code"], failure["plugin"], failure["attempt"]) == ("verify", 10, "alice/demo-patch@1.0.0", 1)
    assert summary["plugins"]["alice/demo-patch@1.0.0"]["failed"] == 1


def test_slurm_restart_count_names_the_attempt(builder):
    job = builder.job(plugins=[demo_plugin()])
    assert job.launch(env={"SLURM_RESTART_COUNT": "3"}).returncode == 0
    (rec,) = read_records(str(job.dir))
    assert rec["attempt"] == 3 and rec["file"].startswith("a3-")
    record = json.loads((job.dir / "provenance" / rec["file"]).read_text())
    assert record["schema"] == "forge/provenance/v1"
    assert record["plugins"][0]["digest"] == job.spec["plugins"][0]["digest"]


def test_summary_of_a_job_without_records_is_empty(tmp_path):
    assert summarize(str(tmp_path))["processes"] == 0


def test_records_carry_the_scheduler_ids_without_importing_ray(builder):
    trainer = """
    import subprocess, sys
    from starforge.cluster import process_job as process
    process.current_job().write_provenance()
    print("ray imported:", "ray" in sys.modules)
    subprocess.run([sys.executable, "-c", "pass"], check=True, env={**__import__("os").environ, "SLURM_PROCID": "3"})
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "1", "SLURM_NODEID": "2", "SLURM_PROCID": "5", "SLURM_LOCALID": "0"}
    result = job.launch(env={**slurm, "RAY_JOB_ID": "02000000"})
    assert result.returncode == 0, result.stderr
    assert "ray imported: False" in result.stdout
    records = {r["role"]: r for r in job.records()}
    assert records["launcher"]["scheduler"] == {
        "slurm": {"job_id": "4242", "step_id": "1", "node_id": "2", "proc_id": "5", "local_id": "0"},
        "ray": {"job_id": "02000000"},
    }
    assert records["worker"]["scheduler"]["slurm"]["proc_id"] == "3"
    plain = builder.job(plugins=[demo_plugin()])
    assert plain.launch().returncode == 0
    assert [r["scheduler"] for r in plain.records()] == [{}]
