"""The launcher checks the signatures a job carries against a node-side trust file (FORGE_TRUST).

A plugin is signed and published through the CLI into a directory registry, locked, and
staged by the real staging code; the staged jobspec.json is then launched with and
without a trust file, and with its envelope stripped or swapped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import forge as run_forge

PLUGIN_YAML = """\
schema: forge/plugin/v1
name: opsd-patch
version: '{version}'
kind: algorithm
entrypoint: opsd_patch:install
load: eager
"""
PLUGIN_BODY = "def install(params):\n    print('opsd-patch {version} installed', flush=True)\n"
TRAINER = "print('trainer ran', flush=True)\n"
FORGE_YAML = """\
schema: forge/job/v1
name: demo
entrypoint: python -m trainer
plugins: [alice/opsd-patch@==1.2.0]
registry: {registry}
"""


class World:
    """A user's FORGE_HOME, a directory registry with signed plugins, a locked experiment."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.registry = tmp / "registry"
        self.exp = tmp / "exp"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
        self.env.update(FORGE_HOME=str(self.home), FORGE_OWNER="alice")

    def forge(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        proc = run_forge(*args, env=self.env, cwd=cwd or self.tmp, timeout=120)
        assert proc.returncode == 0, f"forge {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def publish_signed(self, version: str) -> None:
        root = self.tmp / "src" / version
        root.mkdir(parents=True)
        (root / "plugin.yaml").write_text(PLUGIN_YAML.format(version=version))
        (root / "opsd_patch.py").write_text(PLUGIN_BODY.format(version=version))
        self.forge("plugin", "publish", str(root), "--sign", "--registry", str(self.registry))

    def envelope(self, version: str) -> str:
        from starforge.registry.factory import open_registry

        reg = open_registry(str(self.registry))
        return reg.signature(reg.get("alice", "opsd-patch", version)).decode("utf-8")

    def trust_file(self, name: str, pub: Path) -> Path:
        path = self.tmp / f"{name}.json"
        env = dict(self.env, FORGE_HOME=str(self.tmp / f"{name}-home"))
        proc = run_forge("trust", "add", "alice", pub, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        (self.tmp / f"{name}-home" / "trust.json").replace(path)
        return path

    def stage(self, job_name: str) -> Path:
        """The real staging flow, in this process, under the world's FORGE_HOME."""
        from starforge.experiment.lock import open_experiment_registry
        from starforge.experiment.stage import resolve_job_in, stage_job

        old = os.environ.get("FORGE_HOME")
        os.environ["FORGE_HOME"] = str(self.home)
        try:
            plan = resolve_job_in(self.exp)
            return stage_job(plan, self.tmp / "jobs" / job_name, open_experiment_registry(plan.experiment)).dir
        finally:
            if old is None:
                del os.environ["FORGE_HOME"]
            else:
                os.environ["FORGE_HOME"] = old


def launch(job: Path, env: dict, extra: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in env.items() if not k.startswith("FORGE_")}
    full.update(extra or {})
    return subprocess.run([sys.executable, "-m", "starforge.launch", "--spec", str(job / "jobspec.json")],
                          env=full, capture_output=True, text=True, timeout=60, cwd=str(job.parent))


def rewrite_signature(job: Path, signature: str | None) -> None:
    """Replace (or, with None, strip) the carried envelope; the staged spec file is read-only,
    the job directory is not, so the new spec replaces it."""
    spec = json.loads((job / "jobspec.json").read_text())
    if signature is None:
        del spec["plugins"][0]["signature"]
    else:
        spec["plugins"][0]["signature"] = signature
    tmp = job / "jobspec.json.new"
    tmp.write_text(json.dumps(spec, indent=2))
    os.replace(tmp, job / "jobspec.json")


def status(job: Path) -> dict:
    return json.loads((job / "status.json").read_text())


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    w = World(tmp_path_factory.mktemp("signed"))
    w.forge("key", "generate")
    w.forge("key", "generate", "--name", "other")
    w.forge("trust", "add", "alice", str(w.home / "keys" / "default.pub"))
    w.publish_signed("1.2.0")
    w.publish_signed("1.2.1")
    w.exp.mkdir()
    (w.exp / "trainer.py").write_text(TRAINER)
    (w.exp / "forge.yaml").write_text(FORGE_YAML.format(registry=w.registry))
    w.forge("lock", cwd=w.exp)
    # the lock records the registry's facts (the envelope's digest and key), never a verdict
    facts = json.loads((w.exp / "plugins.lock.json").read_text())["plugins"][0]["signature"]
    assert facts["envelope_digest"].startswith("sha256:") and facts["key_id"]
    w.trusting_publisher = w.trust_file("node-trust", w.home / "keys" / "default.pub")
    w.trusting_other = w.trust_file("other-trust", w.home / "keys" / "other.pub")
    return w


def test_staging_carries_the_published_envelope(world):
    job = world.stage("carried")
    entry = json.loads((job / "jobspec.json").read_text())["plugins"][0]
    assert entry["signature"] == world.envelope("1.2.0")
    statement = json.loads(__import__("base64").b64decode(json.loads(entry["signature"])["payload"]))
    assert statement["subject"][0]["name"] == "alice/opsd-patch@1.2.0"


def test_a_signed_job_launches_with_a_trust_file_trusting_the_publisher(world):
    job = world.stage("trusted")
    result = launch(job, world.env, {"FORGE_TRUST": str(world.trusting_publisher)})
    assert result.returncode == 0, result.stderr
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in result.stderr
    assert "opsd-patch 1.2.0 installed" in result.stdout and "trainer ran" in result.stdout


def test_a_stripped_envelope_fails_verification(world):
    job = world.stage("stripped")
    rewrite_signature(job, None)
    result = launch(job, world.env, {"FORGE_TRUST": str(world.trusting_publisher)})
    assert result.returncode == 10, result.stderr
    assert "plugin  : alice/opsd-patch@1.2.0 failed (verification failed, exit 10)" in result.stderr
    assert "carries no signature, but owner alice has trusted keys" in result.stderr
    assert "installed" not in result.stdout and "trainer ran" not in result.stdout
    assert status(job)["phase"] == "verify" and status(job)["code"] == 10
    assert status(job)["plugin"] == "alice/opsd-patch@1.2.0"


def test_an_envelope_for_another_version_fails_verification(world):
    job = world.stage("moved")
    rewrite_signature(job, world.envelope("1.2.1"))
    result = launch(job, world.env, {"FORGE_TRUST": str(world.trusting_publisher)})
    assert result.returncode == 10, result.stderr
    assert "plugin  : alice/opsd-patch@1.2.0 failed (verification failed, exit 10)" in result.stderr
    assert "signature is for alice/opsd-patch@1.2.1, not alice/opsd-patch@1.2.0" in result.stderr
    assert "installed" not in result.stdout
    assert status(job)["phase"] == "verify"


def test_a_key_the_node_does_not_trust_fails_verification(world):
    job = world.stage("untrusted")
    result = launch(job, world.env, {"FORGE_TRUST": str(world.trusting_other)})
    assert result.returncode == 10, result.stderr
    assert "plugin  : alice/opsd-patch@1.2.0 failed (verification failed, exit 10)" in result.stderr
    assert "not in the trust file" in result.stderr
    assert "installed" not in result.stdout
    assert status(job)["phase"] == "verify" and status(job)["code"] == 10


def test_required_signatures_need_a_trusted_owner_and_a_trust_file(world, tmp_path):
    job = world.stage("required")
    empty = tmp_path / "empty-trust.json"
    empty.write_text(json.dumps({"schema": "forge/trust/v1", "owners": {}}))
    # nobody trusted for alice: not checked by default ...
    assert launch(job, world.env, {"FORGE_TRUST": str(empty)}).returncode == 0
    # ... refused when the node requires signatures
    result = launch(job, world.env, {"FORGE_TRUST": str(empty), "FORGE_REQUIRE_SIGNATURES": "1"})
    assert result.returncode == 10, result.stderr
    assert "no key is trusted for owner alice" in result.stderr
    # requiring signatures without a trust file, or naming a missing one, is refused too
    assert launch(job, world.env, {"FORGE_REQUIRE_SIGNATURES": "1"}).returncode == 10
    missing = launch(job, world.env, {"FORGE_TRUST": str(tmp_path / "nope.json")})
    assert missing.returncode == 10 and "no such trust file" in missing.stderr
    assert status(job)["phase"] == "verify"


def test_without_a_trust_file_nothing_is_checked_and_cryptography_stays_unloaded(world):
    job = world.stage("plain")
    rewrite_signature(job, "{\"not\": \"an envelope\"}")  # not looked at without FORGE_TRUST
    (job / "recipe").chmod(0o755)
    trainer = job / "recipe" / "trainer.py"
    trainer.chmod(0o644)
    trainer.write_text("import sys\nprint('crypto', sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'), flush=True)\n")
    result = launch(job, world.env)
    assert result.returncode == 0, result.stderr
    assert "crypto []" in result.stdout
    assert "plugin  : alice/opsd-patch@1.2.0 loaded" in result.stderr
    # the same job with a trust file: the launcher (this very process) loaded cryptography
    rewrite_signature(job, world.envelope("1.2.0"))
    checked = launch(job, world.env, {"FORGE_TRUST": str(world.trusting_publisher)})
    assert checked.returncode == 0, checked.stderr
    assert "crypto []" not in checked.stdout and "'cryptography'" in checked.stdout


def test_the_signature_field_round_trips_and_is_validated():
    from starforge.cluster.jobspec import JobSpec, example
    from starforge.errors import SpecError

    data = example()
    assert "signature" not in JobSpec.from_dict(data).to_dict()["plugins"][0]  # absent stays absent
    data["plugins"][0]["signature"] = '{"payloadType": "x"}'
    spec = JobSpec.from_dict(data)
    assert spec.plugins[0].signature == '{"payloadType": "x"}'
    assert JobSpec.from_dict(json.loads(spec.to_json())) == spec
    data["plugins"][0]["signature"] = {"payloadType": "x"}
    with pytest.raises(SpecError, match=r"jobspec.plugins\[0\].signature: expected the DSSE envelope as JSON text"):
        JobSpec.from_dict(data)
    builtin = dict(example()["plugins"][0], signature='{"payloadType": "x"}')
    del builtin["owner"]
    data = dict(example(), plugins=[], recipe={"plugins": [builtin]})
    with pytest.raises(SpecError, match="only a plugin package"):
        JobSpec.from_dict(data)


@pytest.mark.parametrize("case, content", [("list", "[1, 2]"), ("string", '"owners"'), ("number", "3"), ("null", "null"),
                                           ("deep", "[" * 5000 + "]" * 5000)])
def test_a_trust_file_of_the_wrong_shape_fails_verification_with_a_status(world, tmp_path, case, content):
    job = world.stage(f"bad-trust-{case}")
    bad = tmp_path / "trust.json"
    bad.write_text(content)
    result = launch(job, world.env, {"FORGE_TRUST": str(bad)})
    assert result.returncode == 10, result.stderr
    assert "Traceback" not in result.stderr and "trust file" in result.stderr
    assert "installed" not in result.stdout
    assert status(job)["phase"] == "verify" and status(job)["code"] == 10


PROBE_TRAINER = """
import json, sys
allowed = {"starforge", "starforge.plugins", "starforge.patching", "starforge.launch", "starforge.launch.__main__"}
baseline = set(json.loads(open(sys.argv[1]).read()))
loaded = sorted(m for m in sys.modules if m not in baseline and m.split(".")[0] not in sys.stdlib_module_names
                and not (m in allowed or m.startswith("starforge.cluster")))
print("LOADED", json.dumps(loaded))
print("STARFORGE", sys.modules["starforge"].__file__)
"""


def test_a_signed_launch_from_the_zip_under_forge_trust_loads_no_laptop_module(world, tmp_path):
    """The launch-time signature check runs on the cluster side: cryptography, nothing of the laptop."""
    from starforge.cluster.runtime_zip import write_runtime_zip

    job = world.stage("contract")
    zip_path = job / ".forge-runtime" / "starforge-runtime.zip"
    zip_path.parent.mkdir(exist_ok=True)
    write_runtime_zip(str(zip_path))
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "contract_probe.py").write_text(PROBE_TRAINER)
    env = {k: v for k, v in world.env.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(zip_path), str(probe_dir)])
    baseline = tmp_path / "baseline.json"
    subprocess.run([sys.executable, "-c", f"import json, sys; open({str(baseline)!r}, 'w').write(json.dumps(list(sys.modules)))"],
                   env=env, check=True, timeout=60)
    env["FORGE_TRUST"] = str(world.trusting_publisher)
    result = subprocess.run(
        [sys.executable, "-m", "starforge.launch", "--spec", str(job / "jobspec.json"), "--",
         "python", "-m", "contract_probe", str(baseline)],
        env=env, capture_output=True, text=True, timeout=60, cwd=str(job.parent))
    assert result.returncode == 0, result.stderr
    assert "runtime : starforge-core" in result.stderr and "from the job's runtime zip" in result.stderr
    assert f"STARFORGE {zip_path}{os.sep}starforge{os.sep}__init__.py" in result.stdout
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("LOADED ")]
    loaded = json.loads(line[len("LOADED "):])
    assert any(m.startswith("cryptography") for m in loaded)  # the signature was checked
    assert [m for m in loaded if m.startswith("starforge") or m.split(".")[0] in ("yaml", "click", "rich", "httpx")] == []
