"""forge lock, forge submit, forge plugin add/remove, end to end through the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

SCALE = {"opsd.scale": ("float", 1.0)}


def key_id_of(project, name: str) -> str:
    from starforge.signatures.signing import key_id

    return key_id((project.home / "keys" / f"{name}.pub").read_bytes())


def test_eager_and_deferred_plugins_run_and_see_the_set(project):
    project.publish(project.plugin("opsd-patch", params=SCALE))
    project.publish(project.plugin("late-patch", "0.3.0", load="deferred"))
    project.experiment(plugins=["alice/opsd-patch@~=1.2", "alice/late-patch"], entrypoint="python -m trainer late-patch")
    out = project.forge("lock").stdout
    assert "added alice/opsd-patch@1.2.0" in out and "added alice/late-patch@0.3.0" in out
    run = project.forge("submit", "--set", "opsd.scale=0.5")
    lines = run.stdout.splitlines()
    job_id = lines[0].split(": ", 1)[1]
    assert lines[1] == f"dir     : {project.jobs_dir() / job_id}"
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in lines
    assert any(line.startswith("plugin  : alice/late-patch@0.3.0 registered") for line in lines)
    assert "opsd-patch 1.2.0 installed opsd.scale=0.5" in lines
    assert "late-patch 0.3.0 installed later with tiny-model" in lines
    hp = json.loads(next(line for line in lines if line.startswith("trainer hyperparams ")).split(" ", 2)[2])
    assert hp == {"grpo.group_size": 8, "grpo.lr": 1e-6, "opsd.scale": 0.5}
    assert f"job {job_id} succeeded, exit code 0" in run.stderr

    shown = json.loads(project.forge("jobs", "show", job_id, "--json").stdout)
    assert {k: shown[k] for k in ("id", "status", "exit_code", "dir", "backend")} == {
        "id": job_id, "status": "succeeded", "exit_code": 0, "dir": str(project.jobs_dir() / job_id), "backend": "local"
    }
    prov = shown["provenance"]["plugins"]
    assert prov["alice/opsd-patch@1.2.0"]["loaded"] >= 1 and prov["alice/late-patch@0.3.0"]["installed_later"] >= 1
    text = project.forge("jobs", "show", job_id).stdout
    assert "status   : succeeded (exit 0)" in text and "alice/opsd-patch@1.2.0" in text
    log = project.forge("jobs", "logs", job_id).stdout
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in log and "trainer done" in log


def test_staged_job_directory(opsd):
    opsd.forge("lock")
    job_id = opsd.forge("submit").stdout.splitlines()[0].split(": ", 1)[1]
    job = opsd.jobs_dir() / job_id
    spec = json.loads((job / "jobspec.json").read_text())
    lock = json.loads(opsd.lock.read_text())
    assert spec["id"] == job_id and job_id.startswith("demo-")
    assert spec["plugins"][0]["digest"] == lock["plugins"][0]["digest"]
    assert spec["core_version"] and spec["entrypoint"] == ["python", "-m", "trainer"]
    assert sorted(os.listdir(job / "forge_plugins" / "opsd-patch")) == ["opsd_patch.py", "plugin.yaml"]
    assert (job / "recipe" / "trainer.py").is_file() and (job / "recipe" / "forge.yaml").is_file()
    assert not (job / "recipe" / ".forge").exists()  # the jobs directory is not copied into itself
    assert not os.access(job / "forge_plugins" / "opsd-patch" / "opsd_patch.py", os.W_OK) or os.geteuid() == 0
    assert (os.stat(job / "forge_plugins" / "opsd-patch" / "opsd_patch.py").st_mode & 0o222) == 0
    assert (os.stat(job / "recipe" / "trainer.py").st_mode & 0o222) == 0
    assert (job / "log.txt").read_text().count("trainer done") == 1


def test_set_typing_and_typos(opsd):
    opsd.forge("lock")
    typo = opsd.forge("submit", "--set", "opsd.scael=0.5", ok=False)
    assert typo.returncode == 2
    assert "error: --set opsd.scael=0.5: unknown key 'opsd.scael' (closest: opsd.scale)" in typo.stderr
    bad = opsd.forge("submit", "--set", "grpo.group_size=abc", ok=False)
    assert bad.returncode == 2 and "'grpo.group_size' is an integer in config (8), got a string 'abc'" in bad.stderr
    spec = json.loads(opsd.forge("submit", "--dry-run", "--set", "+new.key=1", "--set", "opsd.scale=2", "--set", "grpo.lr=3e-6").stdout)
    assert spec["hyperparams"] == {"grpo.group_size": 8, "grpo.lr": 3e-6, "new.key": 1, "opsd.scale": 2.0}
    assert not opsd.jobs_dir().exists()  # a dry run and refused submits stage nothing


def test_dry_run_prints_the_jobspec_and_stages_nothing(opsd):
    opsd.forge("lock")
    spec = json.loads(opsd.forge("submit", "--dry-run").stdout)
    assert spec["schema"] == "forge/jobspec/v1"
    assert [p["ref"] for p in spec["plugins"]] == ["alice/opsd-patch@1.2.0"]
    assert spec["hyperparams"]["opsd.scale"] == 1.0  # the declared default
    assert not (opsd.exp / ".forge").exists()
    assert json.loads(opsd.forge("jobs", "list", "--json").stdout) == []


def test_missing_and_stale_lock_refuse_to_submit(opsd):
    missing = opsd.forge("submit", ok=False)
    assert missing.returncode == 15 and "no lock file next to forge.yaml" in missing.stderr
    assert "hint: run: forge lock" in missing.stderr
    opsd.forge("lock")
    (opsd.exp / "forge.yaml").write_text((opsd.exp / "forge.yaml").read_text().replace("~=1.2", ">=1.0"))
    stale = opsd.forge("submit", ok=False)
    assert stale.returncode == 15
    assert "plugins.lock.json is stale: opsd-patch: forge.yaml requests alice/opsd-patch@>=1.0, the lock was made for alice/opsd-patch@~=1.2" in stale.stderr
    assert not opsd.jobs_dir().exists()


def test_lock_check_passes_after_config_edit_fails_after_request_change_and_writes_nothing(opsd):
    opsd.forge("lock")
    before = opsd.lock.read_bytes()
    stat = os.stat(opsd.lock)
    assert opsd.forge("lock", "--check").stdout.startswith(f"ok: {opsd.lock} matches forge.yaml and registry ")
    yaml_path = opsd.exp / "forge.yaml"
    yaml_path.write_text(yaml_path.read_text().replace('"group_size": 8', '"group_size": 16'))
    opsd.forge("lock", "--check")
    opsd.forge("lock", "--check", "--offline")
    assert "unchanged:" in opsd.forge("lock").stdout
    yaml_path.write_text(yaml_path.read_text().replace("~=1.2", "~=1.3"))
    for args in (("lock", "--check"), ("lock", "--check", "--offline")):
        failed = opsd.forge(*args, ok=False)
        assert failed.returncode == 15
        assert "forge.yaml requests alice/opsd-patch@~=1.3, the lock was made for alice/opsd-patch@~=1.2" in failed.stderr
        assert failed.stderr.rstrip().endswith("hint: run: forge lock")  # it re-resolves a changed request
    assert opsd.lock.read_bytes() == before and os.stat(opsd.lock).st_mtime_ns == stat.st_mtime_ns


def test_moved_tag_is_a_hard_error_naming_both_digests(opsd):
    opsd.forge("lock")
    locked = json.loads(opsd.lock.read_text())["plugins"][0]["digest"]
    record = opsd.home / "registry" / "plugins" / "alice" / "opsd-patch" / "1.2.0.json"
    data = json.loads(record.read_text())
    moved = "sf1:" + "f" * 64
    data["tree_digest"] = moved
    record.write_text(json.dumps(data))
    for args in (("lock", "--check"), ("lock",)):
        failed = opsd.forge(*args, ok=False)
        assert failed.returncode == 15
        assert f"moved tag: alice/opsd-patch@1.2.0 is locked at {locked}, but registry" in failed.stderr
        assert f"now serves {moved}" in failed.stderr
    assert opsd.forge("lock", "--check", "--offline").returncode == 0
    assert json.loads(opsd.lock.read_text())["plugins"][0]["digest"] == locked


def test_upgrade_and_plugin_add_never_repin_a_moved_tag(opsd):
    opsd.forge("lock")
    original = opsd.lock.read_bytes()
    locked = json.loads(original)["plugins"][0]["digest"]
    record = opsd.home / "registry" / "plugins" / "alice" / "opsd-patch" / "1.2.0.json"
    data = json.loads(record.read_text())
    moved = "sf1:" + "e" * 64
    data["tree_digest"] = moved
    record.write_text(json.dumps(data))
    for args in (("lock", "--upgrade", "opsd-patch"), ("lock", "--upgrade"), ("plugin", "add", "alice/opsd-patch@1.2.0")):
        failed = opsd.forge(*args, ok=False)
        assert failed.returncode == 15, (args, failed.stdout, failed.stderr)
        assert f"moved tag: alice/opsd-patch@1.2.0 is locked at {locked}, but registry" in failed.stderr
        assert f"now serves {moved}" in failed.stderr
        # the hint says what resolves it, names the registry the lock recorded, and does
        # not send the user to --upgrade (which refuses too)
        hint = failed.stderr.split("hint: ", 1)[1]
        assert f"the lock was made with registry {opsd.home / 'registry'}" in hint
        assert "publish the new content as a new version" in hint and "tag immutability" in hint
        assert "--upgrade" not in hint
        assert opsd.lock.read_bytes() == original
    assert "alice/opsd-patch@1.2.0" not in (opsd.exp / "forge.yaml").read_text()


def test_only_upgrade_changes_a_locked_version(opsd):
    opsd.forge("lock")
    opsd.publish(opsd.plugin("opsd-patch", "1.2.1", params=SCALE))
    opsd.forge("lock")
    assert json.loads(opsd.lock.read_text())["plugins"][0]["version"] == "1.2.0"
    assert "upgraded opsd-patch 1.2.0 -> 1.2.1" in opsd.forge("lock", "--upgrade", "opsd-patch").stdout
    assert json.loads(opsd.lock.read_text())["plugins"][0]["version"] == "1.2.1"
    unknown = opsd.forge("lock", "--upgrade", "nope", ok=False)
    assert unknown.returncode == 2 and "--upgrade nope: no plugin of that name in forge.yaml" in unknown.stderr


def test_upgrade_value_that_is_a_directory_says_how_to_write_it(opsd):
    opsd.forge("lock")
    opsd.publish(opsd.plugin("opsd-patch", "1.2.1", params=SCALE))
    failed = opsd.forge("lock", "--upgrade", "exp", ok=False, cwd=opsd.tmp)
    assert failed.returncode == 2, failed.stderr
    assert "--upgrade exp: the value after --upgrade is a plugin name, and 'exp' is a directory" in failed.stderr
    assert "hint: to upgrade every plugin of it: forge lock exp --upgrade; one plugin: forge lock --upgrade NAME exp" in failed.stderr
    assert "no forge.yaml" not in failed.stderr
    assert json.loads(opsd.lock.read_text())["plugins"][0]["version"] == "1.2.0"
    # the spellings the hint gives work
    assert "upgraded opsd-patch 1.2.0 -> 1.2.1" in opsd.forge("lock", "exp", "--upgrade", cwd=opsd.tmp).stdout
    assert "unchanged:" in opsd.forge("lock", "--upgrade", "opsd-patch", "exp", cwd=opsd.tmp).stdout
    # a plugin name that happens to be a directory too is still the plugin
    (opsd.exp / "opsd-patch").mkdir()
    assert "unchanged:" in opsd.forge("lock", "--upgrade", "opsd-patch").stdout


def test_lock_entry_fields(opsd):
    opsd.forge("lock")
    lock = json.loads(opsd.lock.read_text())
    assert lock["schema"] == "forge/lock/v2" and lock["registry"] == str(opsd.home / "registry")
    e = lock["plugins"][0]
    assert sorted(e) == sorted([
        "owner", "name", "version", "request", "digest", "artifact_digest", "kind", "load", "entrypoint",
        "requires", "targets", "params", "top_level", "files", "signature",
    ])
    assert (e["owner"], e["name"], e["version"], e["request"], e["kind"], e["load"]) == (
        "alice", "opsd-patch", "1.2.0", "alice/opsd-patch@~=1.2", "algorithm", "eager")
    assert e["top_level"] == ["opsd_patch"] and e["signature"] is None  # the registry holds no envelope
    assert e["params"] == {"opsd.scale": {"type": "float", "default": 1.0}}
    digest = opsd.forge("plugin", "digest", str(opsd.src / "opsd-patch-1.2.0")).stdout.strip()
    assert e["digest"] == digest


def test_refusals_at_lock_time(project):
    project.publish(project.plugin("prep", "1.0.0", kind="data-prep"))
    project.publish(project.plugin("left", "1.0.0", module="shared_mod"))
    project.publish(project.plugin("right", "1.0.0", module="shared_mod"))
    project.publish(project.plugin("env-thing", "1.0.0", kind="environment",
                                   body="def install(params, **ctx):\n    return dict\n"))  # load_environment's call
    project.experiment(plugins=["alice/prep"])
    failed = project.forge("lock", ok=False)
    assert failed.returncode == 15 and "alice/prep@1.0.0 is a data-prep plugin" in failed.stderr
    project.experiment(plugins=["alice/left", "alice/right"])
    failed = project.forge("lock", ok=False)
    assert "alice/left@1.0.0 and alice/right@1.0.0 both provide the top-level module 'shared_mod'" in failed.stderr
    assert not project.lock.exists()
    project.experiment(plugins=["alice/env-thing"])
    out = project.forge("lock").stdout
    assert "environment plugin: shipped with the job" in out
    assert json.loads(project.lock.read_text())["plugins"][0]["note"].startswith("environment plugin")


def test_builtin_shadowed_by_a_locked_package(opsd):
    # a built-in of the same name and module: the locked package wins and the built-in is not loaded
    opsd.plugin("opsd-patch", "0.9.0", params=SCALE, where=opsd.exp / "common" / "algorithms" / "opsd-patch",
                body="def install(params):\n    print('BUILT-IN RAN', flush=True)\n")
    opsd.experiment(plugins=["alice/opsd-patch@~=1.2"], builtins=["opsd-patch"])
    locked = opsd.forge("lock")
    assert "note: built-in opsd-patch is shadowed by the locked package" in locked.stderr  # a note (docs/cli.md)
    assert "note:" not in locked.stdout
    run = opsd.forge("submit")
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in run.stdout
    assert "recipe:opsd-patch@0.9.0 shadowed" in run.stdout
    assert "BUILT-IN RAN" not in run.stdout and "opsd-patch 1.2.0 installed" in run.stdout


def test_builtin_is_digested_into_the_spec(opsd):
    opsd.plugin("clip", "0.1.0", where=opsd.exp / "common" / "algorithms" / "clip")
    (opsd.exp / "common" / "algorithms" / "clip" / "__pycache__").mkdir()
    (opsd.exp / "common" / "algorithms" / "clip" / "__pycache__" / "x.pyc").write_bytes(b"debris")
    opsd.experiment(plugins=["alice/opsd-patch@~=1.2"], builtins=["clip"])
    opsd.forge("lock")
    spec = json.loads(opsd.forge("submit", "--dry-run").stdout)
    digest = opsd.forge("plugin", "digest", str(opsd.exp / "common" / "algorithms" / "clip")).stdout.strip()
    assert [(p["name"], p["digest"]) for p in spec["recipe"]["plugins"]] == [("clip", digest)]
    run = opsd.forge("submit")
    assert "clip 0.1.0 installed" in run.stdout
    job = opsd.jobs_dir() / run.stdout.splitlines()[0].split(": ", 1)[1]
    assert not (job / "recipe" / "common" / "algorithms" / "clip" / "__pycache__" / "x.pyc").exists()


def test_tampered_staged_plugin_fails_verification(opsd):
    opsd.forge("lock")
    job = opsd.jobs_dir() / opsd.forge("submit").stdout.splitlines()[0].split(": ", 1)[1]
    target = job / "forge_plugins" / "opsd-patch" / "opsd_patch.py"
    os.chmod(target.parent, 0o755)
    os.chmod(target, 0o644)
    target.write_text("def install(params):\n    print('EVIL', flush=True)\n")
    rerun = subprocess.run([sys.executable, "-m", "starforge.launch", "--spec", str(job / "jobspec.json")],
                           env=opsd.env, cwd=job, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 10
    assert "changed: opsd_patch.py" in rerun.stderr and "EVIL" not in rerun.stdout
    assert json.loads((job / "status.json").read_text())["phase"] == "verify"


def test_exit_code_passes_through(opsd):
    opsd.forge("lock")
    run = opsd.forge("submit", "--set", "+exit.code=3", ok=False)
    assert run.returncode == 3
    job_id = run.stdout.splitlines()[0].split(": ", 1)[1]
    assert f"job {job_id} failed, exit code 3" in run.stderr
    rows = json.loads(opsd.forge("jobs", "list", "--json").stdout)
    assert [(r["id"], r["status"], r["exit_code"]) for r in rows] == [(job_id, "failed", 3)]


def test_plugin_add_and_remove_edit_both_files(opsd):
    opsd.publish(opsd.plugin("gspo", "1.0.0"))
    yaml_path = opsd.exp / "forge.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("plugins: [alice/opsd-patch@~=1.2]", "# mine\nplugins: [alice/opsd-patch@~=1.2]  # load order"))
    out = opsd.forge("plugin", "add", "alice/gspo")
    assert "added alice/gspo@1.0.0" in out.stdout
    assert "# mine\nplugins: [alice/opsd-patch@~=1.2, alice/gspo@>=1.0.0]  # load order\n" in yaml_path.read_text()
    assert [p["name"] for p in json.loads(opsd.lock.read_text())["plugins"]] == ["opsd-patch", "gspo"]
    opsd.forge("lock", "--check")
    opsd.forge("plugin", "remove", "opsd-patch")
    assert "plugins: [alice/gspo@>=1.0.0]  # load order\n" in yaml_path.read_text()
    assert [p["name"] for p in json.loads(opsd.lock.read_text())["plugins"]] == ["gspo"]
    opsd.forge("lock", "--check")
    missing = opsd.forge("plugin", "remove", "opsd-patch", ok=False)
    assert missing.returncode == 2 and "does not request a plugin 'opsd-patch'" in missing.stderr
    nothing = opsd.forge("plugin", "add", "alice/nothing", ok=False)
    assert nothing.returncode == 7
    assert "alice/nothing" not in yaml_path.read_text()  # an unresolvable request leaves both files alone


def test_plugin_add_block_style(opsd):
    opsd.publish(opsd.plugin("gspo", "1.0.0"))
    yaml_path = opsd.exp / "forge.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("plugins: [alice/opsd-patch@~=1.2]", "plugins:\n  - alice/opsd-patch@~=1.2  # first"))
    opsd.forge("plugin", "add", "alice/gspo@1.0.0")
    assert "plugins:\n  - alice/opsd-patch@~=1.2  # first\n  - alice/gspo@1.0.0\n" in yaml_path.read_text()
    opsd.forge("plugin", "add", "alice/opsd-patch@1.2.0")
    assert "plugins:\n  - alice/opsd-patch@1.2.0  # first\n  - alice/gspo@1.0.0\n" in yaml_path.read_text()
    assert [p["request"] for p in json.loads(opsd.lock.read_text())["plugins"]] == ["alice/opsd-patch@==1.2.0", "alice/gspo@==1.0.0"]
    opsd.forge("plugin", "remove", "alice/gspo")
    assert "plugins:\n  - alice/opsd-patch@1.2.0  # first\nrecipe:" in yaml_path.read_text()
    opsd.forge("lock", "--check")


def test_signature_status_is_locked_and_required_when_asked(project):
    project.forge("key", "generate", cwd=project.tmp)
    project.forge("trust", "add", "alice", str(project.home / "keys" / "default.pub"), cwd=project.tmp)
    signed = project.plugin("opsd-patch", params=SCALE)
    project.forge("plugin", "publish", str(signed), "--sign", cwd=project.tmp)
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    locked = project.forge("lock", "--require-signatures")
    assert "signature verified" in locked.stdout  # decided by this machine's trust file
    facts = json.loads(project.lock.read_text())["plugins"][0]["signature"]
    assert facts["envelope_digest"].startswith("sha256:") and facts["key_id"] == key_id_of(project, "default")
    envelope = next((project.home / "registry").rglob("*.dsse.json")).read_bytes()
    assert facts["envelope_digest"] == "sha256:" + __import__("hashlib").sha256(envelope).hexdigest()
    project.forge("lock", "--check", "--require-signatures")

    # bob has no trusted key: fine by default (unsigned), refused with --require-signatures
    project.env["FORGE_OWNER"] = "bob"
    project.publish(project.plugin("gspo", "1.0.0"))
    project.experiment(plugins=["alice/opsd-patch@~=1.2", "bob/gspo"])
    refused = project.forge("lock", "--require-signatures", ok=False)
    assert refused.returncode == 9 and "no key is trusted for owner bob" in refused.stderr
    assert [p["name"] for p in json.loads(project.lock.read_text())["plugins"]] == ["opsd-patch"]  # untouched
    relocked = project.forge("lock", "--json")
    assert json.loads(relocked.stdout)["signatures"] == {"opsd-patch": "verified", "gspo": "unsigned"}
    assert [p["signature"] is None for p in json.loads(project.lock.read_text())["plugins"]] == [False, True]
    # an owner with trusted keys needs a signature: alice's unsigned 1.2.1 cannot be locked
    project.env["FORGE_OWNER"] = "alice"
    project.publish(project.plugin("opsd-patch", "1.2.1", params=SCALE))
    stripped = project.forge("lock", "--upgrade", "opsd-patch", ok=False)
    assert stripped.returncode == 9 and "alice/opsd-patch@1.2.1 has no signature" in stripped.stderr


def test_a_failing_install_stops_the_job_and_show_names_the_phase(project):
    project.publish(project.plugin("boom", "1.0.0", body="def install(params):\n    raise RuntimeError('no target here')\n"))
    project.experiment(plugins=["alice/boom"])
    project.forge("lock")
    run = project.forge("submit", ok=False)
    assert run.returncode == 13
    assert "RuntimeError: no target here" in run.stdout and "trainer done" not in run.stdout
    job_id = run.stdout.splitlines()[0].split(": ", 1)[1]
    assert f"job {job_id} failed, exit code 13 (launcher phase install, plugin " in run.stderr
    shown = project.forge("jobs", "show", job_id).stdout
    assert "status   : failed (exit 13)" in shown and "phase    : install (plugin " in shown


def _mirror(project, name, version, dest, *, recompress=True, other_root=None):
    """Publish owner/name@version from the user's registry to the directory registry *dest*
    as another archive of the same files (re-gzipped at another level), or, with
    *other_root*, as other content under the same version (a moved tag)."""
    import gzip
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from starforge.cluster.digest import hash_file
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.publish import publish_plugin

    if other_root is not None:
        return publish_plugin(other_root, DirectoryRegistry(dest), "alice").version
    info = DirectoryRegistry(project.home / "registry").get("alice", name, version)
    with tempfile.TemporaryDirectory() as tmp:
        original = Path(tmp) / "a.tar.gz"
        DirectoryRegistry(project.home / "registry").download(info, original)
        other = Path(tmp) / "b.tar.gz"
        other.write_bytes(gzip.compress(gzip.decompress(original.read_bytes()), compresslevel=1, mtime=0))
        mirrored = replace(info, artifact_digest="sha256:" + hash_file(other), size=other.stat().st_size, signed=False)
        return DirectoryRegistry(dest).publish(other, mirrored).version


def test_a_mirror_with_another_archive_of_the_same_files_stages_the_lock(opsd):
    opsd.forge("lock")
    locked = json.loads(opsd.lock.read_text())["plugins"][0]
    mirror = opsd.tmp / "mirror"
    served = _mirror(opsd, "opsd-patch", "1.2.0", mirror)
    assert served.tree_digest == locked["digest"] and served.artifact_digest != locked["artifact_digest"]
    assert opsd.forge("lock", "--check", "--registry", str(mirror)).returncode == 0

    cache = opsd.home / "cache"
    # lock --check read the tree (cache first, SPEC §5): empty the cache so that submit
    # fetches the mirror's archive itself
    shutil.rmtree(cache)
    run = opsd.forge("submit", "--registry", str(mirror))
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in run.stdout
    # the archive fetched from the mirror is now cached under the tree digest: staging again
    # needs no registry at all
    again = opsd.forge("submit", "--registry", str(opsd.tmp / "no-such-registry"))
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in again.stdout


def test_a_mirror_serving_other_files_under_a_locked_version_is_a_moved_tag_at_submit(opsd):
    opsd.forge("lock")
    locked = json.loads(opsd.lock.read_text())["plugins"][0]["digest"]
    other = opsd.plugin("opsd-patch", params=SCALE, where=opsd.tmp / "other", body="def install(params):\n    print('other')\n")
    mirror = opsd.tmp / "mirror"
    moved = _mirror(opsd, "opsd-patch", "1.2.0", mirror, other_root=other).tree_digest
    assert moved != locked
    shutil.rmtree(opsd.home / "cache")  # another machine, the lock committed: nothing cached there
    failed = opsd.forge("submit", "--registry", str(mirror), ok=False)
    assert failed.returncode == 15, failed.stderr
    assert f"moved tag: alice/opsd-patch@1.2.0 is locked at {locked}, but registry {mirror} now serves {moved}" in failed.stderr
    assert not opsd.jobs_dir().exists() or os.listdir(opsd.jobs_dir()) == []


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("backend", ["ray", "slurm"])
def test_a_backend_that_cannot_take_the_job_leaves_no_job_directory(opsd, backend):
    opsd.forge("lock")
    # No Ray head listens on that port; Slurm's client finds an empty configuration (or no sbatch).
    (opsd.tmp / "slurm.conf").write_text("")
    opsd.env.update(FORGE_RAY_ADDRESS=f"http://127.0.0.1:{_free_port()}", SLURM_CONF=str(opsd.tmp / "slurm.conf"))
    failed = opsd.forge("submit", "--backend", backend, ok=False)
    assert failed.returncode == 16, failed.stderr
    assert failed.stderr.startswith("error: ")
    if backend == "slurm" and shutil.which("sbatch"):  # the missing configuration is named, not the job's settings
        assert "hint: no Slurm configuration here" in failed.stderr and "sbatch_args" not in failed.stderr, failed.stderr
    leftovers = [p.name for p in opsd.jobs_dir().iterdir()] if opsd.jobs_dir().exists() else []
    assert leftovers == []
    assert json.loads(opsd.forge("jobs", "list", "--json").stdout) == []


def test_submit_applies_the_trust_file_and_require_signatures(project):
    project.publish(project.plugin("opsd-patch", params=SCALE))  # unsigned
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock")
    assert "loaded" in project.forge("submit").stdout  # nobody trusted for alice: unsigned runs
    # untrusted owner, but signatures required on this submit
    refused = project.forge("submit", "--require-signatures", ok=False)
    assert refused.returncode == 9 and "no key is trusted for owner alice" in refused.stderr
    # once alice has a trusted key, her unsigned version is refused (a stripped signature is an error)
    project.forge("key", "generate", cwd=project.tmp)
    project.forge("trust", "add", "alice", str(project.home / "keys" / "default.pub"), cwd=project.tmp)
    stripped = project.forge("submit", ok=False)
    assert stripped.returncode == 9, stripped.stderr
    assert "alice/opsd-patch@1.2.0 has no signature, but owner alice has trusted keys" in stripped.stderr
    assert project.forge("lock", "--check", ok=False).returncode == 9  # the same verdict as the lock check
    assert len(os.listdir(project.jobs_dir())) == 1  # only the first, unsigned-but-allowed job

    # a signed version by the trusted key stages and runs, with and without --require-signatures
    signed = project.plugin("opsd-patch", "1.2.1", params=SCALE, where=project.tmp / "signed")
    project.forge("plugin", "publish", str(signed), "--sign", cwd=project.tmp)
    project.forge("lock", "--upgrade", "opsd-patch")
    assert "plugin  : alice/opsd-patch@1.2.1 loaded" in project.forge("submit", "--require-signatures").stdout


def test_a_lock_made_with_another_registry_names_it_in_check_and_submit(project):
    """Lock made against registry R (recorded in the lock); commands run without --registry
    use the empty default registry: the errors say so and name R, never --upgrade."""
    other = project.tmp / "team-registry"
    project.forge("plugin", "publish", str(project.plugin("opsd-patch", params=SCALE)), "--registry", str(other), cwd=project.tmp)
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock", "--registry", str(other))
    assert json.loads(project.lock.read_text())["registry"] == str(other)
    default = project.home / "registry"
    project.forge("plugin", "publish", str(project.plugin("gspo", "1.0.0")), cwd=project.tmp)  # the default registry exists

    check = project.forge("lock", "--check", ok=False)
    assert check.returncode == 15, check.stderr
    assert (f"error: the lock pins alice/opsd-patch@1.2.0, which registry {default} does not have; "
            f"the lock was made with registry {other}") in check.stderr
    assert f"hint: the lock was made with registry {other}: pass --registry {other} (or set FORGE_REGISTRY={other})" in check.stderr
    assert "--upgrade" not in check.stderr
    assert project.forge("lock", "--check", "--registry", str(other)).returncode == 0

    # nothing cached (lock read the trees into this machine's cache: empty it, as on a
    # colleague's machine): submit cannot stage, and says which registry to use
    shutil.rmtree(project.home / "cache")
    staged = project.forge("submit", ok=False)
    assert staged.returncode == 7, staged.stderr
    assert f"which registry {default} does not have, and the cache does not hold its files" in staged.stderr
    assert f"pass --registry {other} (or set FORGE_REGISTRY={other})" in staged.stderr


def test_a_pulled_signed_version_stages_offline_and_is_verified_against_the_trust_file_each_time(project):
    import shutil

    other = project.tmp / "team-registry"
    project.forge("key", "generate", cwd=project.tmp)
    project.forge("trust", "add", "alice", str(project.home / "keys" / "default.pub"), cwd=project.tmp)
    project.forge("plugin", "publish", str(project.plugin("opsd-patch", params=SCALE)), "--sign", "--registry", str(other), cwd=project.tmp)
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock", "--registry", str(other))
    assert json.loads(project.lock.read_text())["plugins"][0]["signature"]["key_id"] == key_id_of(project, "default")
    digest = json.loads(project.lock.read_text())["plugins"][0]["digest"]
    envelope = (other / "plugins" / "alice" / "opsd-patch" / "1.2.0.dsse.json").read_bytes()
    kept = project.home / "cache" / "blobs" / "signatures" / f"sf1-{digest[4:]}" / "alice" / "opsd-patch" / "1.2.0.dsse.json"

    run = project.forge("submit", "--registry", str(other))  # files and the verified envelope are cached
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in run.stdout
    assert kept.read_bytes() == envelope

    # the registry is gone: the cache holds the files and the signature, verified again
    shutil.rmtree(other)
    offline = project.forge("submit", "--registry", str(other))
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in offline.stdout
    assert project.forge("submit").returncode == 0  # the default registry, which never had it

    # the trust file still decides: with alice's key replaced, the cached envelope is refused
    trust = project.home / "trust.json"
    trusted = trust.read_bytes()
    trust.unlink()
    project.forge("key", "generate", "--name", "new", cwd=project.tmp)
    project.forge("trust", "add", "alice", str(project.home / "keys" / "new.pub"), cwd=project.tmp)
    refused = project.forge("submit", "--registry", str(other), ok=False)
    assert refused.returncode == 9, refused.stderr
    assert "error: " in refused.stderr and "alice/opsd-patch@1.2.0" in refused.stderr

    # a tampered cached envelope does not verify either
    trust.write_bytes(trusted)
    data = json.loads(envelope)
    data["payloadType"] = data["payloadType"] + "x"
    kept.write_text(json.dumps(data))
    for copy in kept.parent.glob("1.2.0.envelopes/*"):  # every cached copy (kept by digest for the lock)
        copy.write_text(json.dumps(data))
    tampered = project.forge("submit", "--registry", str(other), ok=False)
    assert tampered.returncode == 9, tampered.stderr
    # no kept envelope: the error says why the registry is needed and which one the lock used
    kept.unlink()
    unchecked = project.forge("submit", ok=False)
    assert unchecked.returncode == 7, unchecked.stderr
    assert (f"which registry {project.home / 'registry'} does not have, and its owner's signature must be checked"
            in unchecked.stderr)
    assert "the cache holds no verified signature for it" in unchecked.stderr
    # the lock's registry was removed from this machine: the hint names it as gone and says
    # how to fill the registry used here, instead of a path that is not there
    assert f"the lock was made with registry {other}, which is not on this machine" in unchecked.stderr
    assert f"forge bundle push FILE --registry {project.home / 'registry'}" in unchecked.stderr
    jobs = [n for n in os.listdir(project.jobs_dir()) if not n.startswith(".")]
    assert len(jobs) == 3  # the refused submits staged nothing
