"""``forge jobs replay`` on the quickstart (a deterministic trainer): the same numbers, and
refusals when a plugin, the staged recipe or the runtime no longer match what the job ran."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from support.cli import forge
from support.examples import copy_example

REPO = Path(__file__).resolve().parents[2]
NUMBERS = ("rewards[", "advantages[", "step ", "first_mean_reward", "mean_reward")


def _numbers(out: str) -> list:
    return [ln for ln in out.splitlines() if ln.startswith(NUMBERS)]


class Quickstart:
    """The quickstart experiment, its plugin published and locked, with a forge home of its own
    (or a copy of *prepared*'s, made so: the experiment and the home name no path of theirs)."""

    def __init__(self, tmp: Path, registry: str | None = None, prepared: Path | None = None) -> None:
        self.tmp = tmp
        self.exp = tmp / "exp"
        self.home = tmp / "home"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(self.home), FORGE_OWNER="starforge")
        if registry:
            self.env["FORGE_REGISTRY"] = registry
        if prepared is not None:
            shutil.copytree(prepared / "exp", self.exp, symlinks=True)
            shutil.copytree(prepared / "home", self.home, symlinks=True)
            return
        copy_example("quickstart", self.exp)
        self.forge("plugin", "publish", str(REPO / "forge_plugins" / "opsd-patch"), ok=0)
        self.forge("lock", str(self.exp), ok=0)

    def forge(self, *args, ok=None):
        proc = forge(*args, cwd=self.tmp, env=self.env, timeout=300)
        if ok is not None:
            assert proc.returncode == ok, f"forge {' '.join(map(str, args))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def submit(self):
        run = self.forge("submit", str(self.exp), "--set", "grpo.steps=3", "--set", "opsd.scale=0.5", ok=0)
        job_id = next(ln.split(":", 1)[1].strip() for ln in run.stdout.splitlines() if ln.startswith("job     :"))
        return job_id, run.stdout + run.stderr

    def record(self, job_id: str) -> dict:
        return json.loads(self.forge("jobs", "show", job_id, "--json", ok=0).stdout)

    def job_dir(self, job_id: str) -> Path:
        return Path(self.record(job_id)["dir"])

    def clear_cache(self) -> None:
        shutil.rmtree(self.home / "cache", ignore_errors=True)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """One published and locked quickstart per worker, copied by each test."""
    return Quickstart(tmp_path_factory.mktemp("replay-prepared")).tmp


@pytest.fixture
def qs(tmp_path, prepared) -> Quickstart:
    return Quickstart(tmp_path, prepared=prepared)


def test_replay_prints_the_same_numbers_and_says_what_it_replays(qs):
    old_id, first = qs.submit()
    run = qs.forge("jobs", "replay", old_id, ok=0)
    out = run.stdout + run.stderr
    assert _numbers(out) and _numbers(out) == _numbers(first)
    assert f"replay  : of job {old_id}" in out.splitlines()
    assert not [ln for ln in out.splitlines() if ln.startswith("warning : ")]  # same machine, same environment
    new_id = next(ln.split(":", 1)[1].strip() for ln in run.stdout.splitlines() if ln.startswith("job     :"))
    assert new_id != old_id
    shown = qs.forge("jobs", "show", new_id, ok=0).stdout
    assert f"replay of: {old_id}" in shown.splitlines()
    record = qs.record(new_id)
    assert record["replay_of"] == old_id
    assert record["provenance"]["launcher"]["replay_of"] == old_id
    spec = json.loads((Path(record["dir"]) / "jobspec.json").read_text())
    old_spec = json.loads((qs.job_dir(old_id) / "jobspec.json").read_text())
    assert spec["replay"]["of"] == old_id and spec["replay"]["strict"] is False
    assert spec["replay"]["environment"] == qs.record(old_id)["provenance"]["launcher"]["environment"]
    for key in ("hyperparams", "entrypoint", "plugins", "recipe", "core_version"):
        assert spec[key] == old_spec[key], key


def test_replay_uses_the_staged_recipe_not_todays_tree(qs):
    old_id, first = qs.submit()
    (qs.exp / "forge.yaml").write_text((qs.exp / "forge.yaml").read_text().replace("seed: 0", "seed: 7"))
    (qs.exp / "toy_grpo" / "train.py").write_text("raise SystemExit('today''s tree ran')\n")
    run = qs.forge("jobs", "replay", old_id, ok=0)
    assert _numbers(run.stdout + run.stderr) == _numbers(first)


def test_dry_run_prints_the_jobspec_and_stages_nothing(qs):
    old_id, _ = qs.submit()
    before = sorted(p.name for p in (qs.exp / ".forge" / "jobs").iterdir())
    run = qs.forge("jobs", "replay", old_id, "--dry-run", "--strict", ok=0)
    spec = json.loads(run.stdout)
    assert spec["replay"]["of"] == old_id and spec["replay"]["strict"] is True
    assert sorted(p.name for p in (qs.exp / ".forge" / "jobs").iterdir()) == before
    assert len(json.loads(qs.forge("jobs", "list", "--json", ok=0).stdout)) == 1


def _writable(path: Path) -> None:
    for p in [path, *path.parents][:6]:
        if p.exists():
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_an_edited_staged_recipe_is_refused(qs):
    old_id, _ = qs.submit()
    train = qs.job_dir(old_id) / "recipe" / "toy_grpo" / "train.py"
    _writable(train)
    train.write_text(train.read_text() + "\n# edited after the job ran\n")
    run = qs.forge("jobs", "replay", old_id, ok=10)
    line = run.stderr.splitlines()[0]
    assert line.startswith(f"error: cannot replay job {old_id}: the recipe as staged in ") and "changed since the job ran" in line
    assert len(json.loads(qs.forge("jobs", "list", "--json", ok=0).stdout)) == 1  # nothing submitted


def test_a_tampered_plugin_is_refused(qs):
    old_id, _ = qs.submit()
    qs.clear_cache()
    for blob in (qs.home / "registry" / "blobs" / "sha256").iterdir():  # the registry now serves other bytes
        blob.chmod(0o644)
        blob.write_bytes(blob.read_bytes()[:-10] + b"tampered!!")
    run = qs.forge("jobs", "replay", old_id, ok=10)
    line = run.stderr.splitlines()[0]
    assert line.startswith(f"error: cannot replay job {old_id}: plugin starforge/opsd-patch@1.2.0 with tree digest sf1:")
    assert "neither in the cache nor served by any configured registry" in line


def test_a_version_republished_with_other_content_is_refused(qs, tmp_path):
    old_id, _ = qs.submit()
    qs.clear_cache()
    other = tmp_path / "other-registry"
    changed = tmp_path / "opsd-patch"
    shutil.copytree(REPO / "forge_plugins" / "opsd-patch", changed, ignore=shutil.ignore_patterns("__pycache__"))
    module = next(changed.rglob("*.py"))
    module.write_text(module.read_text() + "\n# other content, same version\n")
    qs.forge("plugin", "publish", str(changed), "--registry", str(other), ok=0)
    shutil.rmtree(qs.home / "registry")
    run = qs.forge("jobs", "replay", old_id, "--registry", str(other), ok=10)
    assert "plugin starforge/opsd-patch@1.2.0 with tree digest" in run.stderr.splitlines()[0]


def test_a_replaced_runtime_zip_is_refused(qs):
    old_id, _ = qs.submit()
    zip_path = qs.job_dir(old_id) / ".forge-runtime" / "starforge-runtime.zip"
    _writable(zip_path)
    zip_path.write_bytes(zip_path.read_bytes() + b"\0")
    run = qs.forge("jobs", "replay", old_id, ok=10)
    assert "its runtime zip" in run.stderr.splitlines()[0] and "changed since the job was submitted" in run.stderr


def test_a_job_of_an_older_starforge_core_replays_saying_what_it_cannot_prove(qs):
    old_id, first = qs.submit()
    job_dir = qs.job_dir(old_id)
    # What an older starforge-core left: no recipe digest in the JobSpec, no runtime or
    # JobSpec sha256 in the record, and its own runtime zip (one from before the binding refuses the
    # --spec-sha256 every backend passes today; this one would say so if it ran).
    spec_path = job_dir / "jobspec.json"
    data = json.loads(spec_path.read_text())
    digest = data["recipe"].pop("digest")
    _writable(spec_path)
    spec_path.write_text(json.dumps(data))
    [record_path] = [p for p in qs.home.rglob(f"{old_id}.json") if p.parent.name == "jobs"]
    record = json.loads(record_path.read_text())
    record["runtime_sha256"] = ""
    del record["spec_sha256"]
    record_path.write_text(json.dumps(record))
    zip_path = job_dir / ".forge-runtime" / "starforge-runtime.zip"
    _writable(zip_path)
    zip_path.write_bytes(_zip({"__main__.py": "print('OLD RUNTIME RAN')\nraise SystemExit(2)\n"}))

    run = qs.forge("jobs", "replay", old_id, ok=0)
    out = run.stdout + run.stderr
    assert _numbers(out) == _numbers(first)  # the same plugins by digest, hyperparams and recipe: the same numbers
    assert "OLD RUNTIME RAN" not in out  # an unproved runtime never runs
    notes = [ln for ln in run.stderr.splitlines() if ln.startswith("note: ")]
    assert any("older starforge-core that recorded no recipe digest" in n and "cannot be proved" in n for n in notes), notes
    assert any("recorded no runtime sha256" in n and "runs this starforge-core's runtime" in n for n in notes), notes
    assert any("recorded no JobSpec sha256" in n for n in notes), notes
    new_id = next(ln.split(":", 1)[1].strip() for ln in run.stdout.splitlines() if ln.startswith("job     :"))
    new = qs.record(new_id)
    spec = json.loads((Path(new["dir"]) / "jobspec.json").read_text())
    assert spec["replay"]["of"] == old_id and spec["replay"]["unproven"] == ["jobspec", "recipe", "runtime"]
    assert spec["recipe"]["digest"] == digest  # recorded now, so the replay itself replays exactly
    assert new["runtime_sha256"] and new["replay_of"] == old_id
    again = qs.forge("jobs", "replay", new_id, "--dry-run", ok=0)
    assert "older starforge-core" not in again.stderr and "unproven" not in json.loads(again.stdout)["replay"]

    strict = qs.forge("jobs", "replay", old_id, "--strict", ok=10)
    line = strict.stderr.splitlines()[0]
    assert line.startswith(f"error: cannot replay job {old_id}: --strict: what it ran cannot be proved or compared: jobspec, recipe, runtime")
    assert len(json.loads(qs.forge("jobs", "list", "--json", ok=0).stdout)) == 2  # nothing submitted


def _zip(files: dict) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


def test_environment_difference_warns_and_strict_refuses(qs):
    old_id, first = qs.submit()
    for path in (qs.job_dir(old_id) / "provenance").rglob("*.json"):
        data = json.loads(path.read_text())
        if data.get("role") == "launcher" and data.get("environment"):
            data["environment"]["python"]["version"] = "3.10.0"
            _writable(path)
            path.write_text(json.dumps(data))
    run = qs.forge("jobs", "replay", old_id, ok=0)
    out = run.stdout + run.stderr
    py = ".".join(map(str, sys.version_info[:3]))
    assert f"warning : replay of {old_id}: environment differs: python version: 3.10.0 -> {py}" in out.splitlines()
    assert _numbers(out) == _numbers(first)
    strict = qs.forge("jobs", "replay", old_id, "--strict", ok=11)
    assert f"error: replay of {old_id} with --strict: the environment differs" in strict.stdout + strict.stderr
    assert not _numbers(strict.stdout + strict.stderr)  # refused before the trainer ran


def test_unknown_job_and_a_job_whose_directory_is_gone(qs):
    run = qs.forge("jobs", "replay", "no-such-job", ok=7)
    assert run.stderr.startswith("error: no job 'no-such-job'")
    old_id, _ = qs.submit()
    job_dir = qs.job_dir(old_id)
    for dirpath, _dirs, _files in os.walk(job_dir):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(job_dir)
    run = qs.forge("jobs", "replay", old_id, ok=7)
    lines = run.stderr.splitlines()
    assert lines[0] == (f"error: cannot replay job {old_id}: its directory {job_dir} is gone; replay runs the recipe and "
                        "runtime as they were staged there")
    assert lines[1].startswith("hint: ") and "Traceback" not in run.stderr


@pytest.mark.oci
def test_replay_fetches_plugins_by_digest_from_an_oci_registry(tmp_path, oci_server):
    qs = Quickstart(tmp_path, registry=oci_server.url)
    old_id, first = qs.submit()
    qs.clear_cache()
    run = qs.forge("jobs", "replay", old_id, ok=0)
    assert _numbers(run.stdout + run.stderr) == _numbers(first)
