"""``forge plan`` on the toy trainer: the patch ledger, each conflict kind, the
acknowledgement in forge.yaml, and that nothing is left behind."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from support.cli import forge, forge_process
from support.examples import copy_example
from support.processes import is_alive

REPO = Path(__file__).resolve().parents[2]
CONFLICT = 21  # docs/errors.md


def _forge(*args, cwd, env, ok=None, process=False):
    proc = (forge_process if process else forge)(*args, cwd=cwd, env=env, timeout=300)
    if ok is not None:
        assert proc.returncode == ok, f"forge {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


class Toy:
    """The quickstart experiment, its reference plugins published, plus plugins a test writes."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.exp = tmp / "exp"
        copy_example("quickstart", self.exp)
        self.scratch = tmp / "scratch"
        self.scratch.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(tmp / "home"), FORGE_OWNER="starforge", TMPDIR=str(self.scratch))
        self.process = False  # True: forge runs as a process of its own (what its children inherit, its /proc)
        for name in ("opsd-patch", "dr-grpo"):
            self.forge("plugin", "publish", str(REPO / "forge_plugins" / name), ok=0)

    def forge(self, *args, ok=None):
        return _forge(*args, cwd=self.tmp, env=self.env, ok=ok, process=self.process)

    def plugin(self, name: str, body: str, targets=("toy_grpo.algorithms",)) -> None:
        root = self.tmp / "src" / name
        root.mkdir(parents=True)
        module = name.replace("-", "_")
        (root / "plugin.yaml").write_text(
            f"schema: forge/plugin/v1\nname: {name}\nversion: '1.0.0'\nkind: algorithm\nentrypoint: {module}:install\n"
            f"load: eager\ntargets: [{', '.join(targets)}]\n"
        )
        (root / f"{module}.py").write_text("from starforge import patching\n\n\n" + body)
        self.forge("plugin", "publish", str(root), ok=0)

    def use(self, *plugins: str, extra: str = "") -> None:
        text = (self.exp / "forge.yaml").read_text()
        text = text.replace("plugins: [starforge/opsd-patch@~=1.2]", f"plugins: [{', '.join(plugins)}]")
        (self.exp / "forge.yaml").write_text(text + extra)
        self.forge("lock", str(self.exp), ok=0)

    def plan(self, *args, ok=None):
        return self.forge("plan", str(self.exp), *args, ok=ok)

    def conflicts(self, *args, ok=CONFLICT) -> list:
        doc = json.loads(self.plan("--json", *args, ok=ok).stdout)
        return [(c["kind"], c["plugin"], c["target"], c["acknowledged"]) for c in doc["conflicts"]]


@pytest.fixture
def toy(tmp_path) -> Toy:
    return Toy(tmp_path)


def test_quickstart_ledger_is_clean_and_leaves_nothing_behind(toy):
    toy.forge("lock", str(toy.exp), ok=0)
    run = toy.plan(ok=0)
    lines = run.stdout.splitlines()
    assert lines[1:] == [
        "starforge/opsd-patch@1.2.0  installed",
        "    wrap                     toy_grpo.algorithms:compute_advantages",
        "    registry entry (wrap)    toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]",
        "recipe:reward-clip@0.1.0  installed",
        "    wrap                     toy_grpo.algorithms:compute_rewards",
        "no conflicts",
    ]
    assert "trainer" not in run.stdout + run.stderr  # the entrypoint never ran
    assert not (toy.exp / ".forge").exists()  # no staged job, no job record
    assert json.loads(toy.forge("jobs", "list", "--json", ok=0).stdout) == []
    assert list(toy.scratch.iterdir()) == []  # the temporary staging is gone


def test_same_jobspec_as_submit(toy):
    toy.forge("lock", str(toy.exp), ok=0)
    doc = json.loads(toy.plan("--json", "--set", "opsd.scale=0.5", ok=0).stdout)
    assert doc["clean"] is True and doc["job"]["name"] == "quickstart"
    bad = toy.plan("--set", "opsd.scael=0.5", ok=2)
    assert bad.stderr.startswith("error: ") and "opsd.scale" in bad.stderr


def test_replace_hiding_a_wrap_and_its_acknowledgement(toy):
    toy.use("starforge/opsd-patch@~=1.2", "starforge/dr-grpo@~=2.0")
    run = toy.plan(ok=CONFLICT)
    assert ("  !  hidden: starforge/dr-grpo@2.0.0 replaces toy_grpo.algorithms:compute_advantages, hiding "
            "starforge/opsd-patch@1.2.0's wrap of it (it never runs, so its settings have no effect there)") in run.stdout
    assert "    replace                  toy_grpo.algorithms:compute_advantages" in run.stdout
    assert toy.conflicts() == [
        ("hidden", "starforge/dr-grpo@2.0.0", "toy_grpo.algorithms:compute_advantages", False),
        ("hidden", "starforge/dr-grpo@2.0.0", "toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]", False),
    ]
    with open(toy.exp / "forge.yaml", "a") as f:
        f.write("plan:\n  acknowledge:\n    - {plugin: dr-grpo, replaces: 'toy_grpo.algorithms:*', reason: Dr-GRPO advantages on purpose}\n")
    run = toy.plan(ok=0)
    assert "(acknowledged in forge.yaml: Dr-GRPO advantages on purpose)" in run.stdout
    assert run.stdout.splitlines()[-1] == "0 conflicts (2 acknowledged)"


def test_two_plugins_replacing_one_target(toy):
    for name in ("first-adv", "second-adv"):
        toy.plugin(name, "def adv(rewards, group_size, eps=1e-6):\n    return rewards\n\n\n"
                         "def install(params):\n    patching.replace('toy_grpo.algorithms:compute_advantages', adv)\n")
    toy.use("starforge/first-adv@1.0.0", "starforge/second-adv@1.0.0")
    assert toy.conflicts() == [("double-replace", "starforge/second-adv@1.0.0", "toy_grpo.algorithms:compute_advantages", False)]


def test_an_install_that_raises_is_a_conflict_and_later_plugins_still_load(toy):
    toy.plugin("broken", "def install(params):\n    raise RuntimeError('no GPU here')\n")
    toy.use("starforge/broken@1.0.0", "starforge/opsd-patch@~=1.2")
    run = toy.plan(ok=CONFLICT)
    assert "starforge/broken@1.0.0  FAILED" in run.stdout
    assert "install raised RuntimeError: no GPU here" in run.stdout
    assert "starforge/opsd-patch@1.2.0  installed" in run.stdout
    assert toy.conflicts()[0][:2] == ("install-raised", "starforge/broken@1.0.0")


def test_a_missing_target_attribute_raises_in_install(toy):
    toy.plugin("typo", "def install(params):\n    patching.wrap('toy_grpo.algorithms:comptue_advantages', lambda o, *a: o(*a))\n")
    toy.use("starforge/typo@1.0.0")
    run = toy.plan(ok=CONFLICT)
    assert "did you mean 'compute_advantages'?" in run.stdout


def test_a_declared_target_no_patch_touched(toy):
    toy.plugin("declares-two", "def install(params):\n    patching.wrap('toy_grpo.algorithms:compute_rewards', lambda o, *a: o(*a))\n",
               targets=("toy_grpo.algorithms", "toy_grpo.train"))
    toy.use("starforge/declares-two@1.0.0")
    assert toy.conflicts() == [("untouched-target", "starforge/declares-two@1.0.0", "toy_grpo.train", False)]


def test_a_patch_waiting_for_a_module_that_cannot_be_imported(toy):
    toy.plugin("waits", "def install(params):\n    patching.wrap('vllm.engine:step', lambda o, *a: o(*a), when_imported=True)\n",
               targets=("vllm.engine",))
    toy.use("starforge/waits@1.0.0")
    kinds = [c[0] for c in toy.conflicts()]
    assert kinds == ["not-applied"]  # a pending patch touches its target; it never applied
    run = toy.plan(ok=CONFLICT)
    assert "    wrap                     vllm.engine:step  [pending]" in run.stdout
    assert "import of vllm.engine failed: ModuleNotFoundError: No module named 'vllm'" in run.stdout


def test_plugin_code_runs_without_credential_variables(toy):
    toy.plugin("nosy", "import os\n\n\ndef install(params):\n"
                       "    leaked = [k for k in ('FORGE_REGISTRY_PASSWORD', 'FORGE_REGISTRY_USER', 'FORGE_KEY_PASSPHRASE') if k in os.environ]\n"
                       "    assert not leaked, leaked\n"
                       "    patching.wrap('toy_grpo.algorithms:compute_rewards', lambda o, *a: o(*a))\n")
    toy.use("starforge/nosy@1.0.0")
    toy.env.update(FORGE_REGISTRY_PASSWORD="s3cret", FORGE_REGISTRY_USER="alice", FORGE_KEY_PASSPHRASE="pp")
    toy.process = True
    toy.plan(ok=0)


def test_a_job_python_missing_here_names_backend(toy):
    toy.use("starforge/opsd-patch@~=1.2", extra="python: /opt/cluster-image/bin/python3\n")
    run = toy.plan(ok=11)
    lines = run.stderr.splitlines()
    assert lines[0].startswith("error: forge plan: forge.yaml's python cannot run on this machine:")
    assert "/opt/cluster-image/bin/python3" in lines[0]
    assert "forge plan --backend" in lines[1]
    assert list(toy.scratch.iterdir()) == []


# `forge plan` with the staged job changed after staging and before its load phase runs
# (as anything that can write the staging directory could): bound like a real launch.
def _edit_after_staging(monkeypatch, what: str, marker: Path) -> None:
    """Each job staged from now on (by plan or submit) is changed right after staging."""
    from starforge.experiment import stage, submit

    original = stage.stage_job

    def stage_then_edit(plan, job_dir, *args, **kwargs):
        out = original(plan, job_dir, *args, **kwargs)
        if what == "spec":  # an injected hyperparameter; no plugin digest sees it
            spec = Path(job_dir) / "jobspec.json"
            spec.chmod(0o644)
            text = spec.read_text()
            assert '"opsd.scale": 1.0' in text
            spec.write_text(text.replace('"opsd.scale": 1.0', '"opsd.scale": 9.0'))
        else:  # a runtime zip that is not the one staged
            zip_path = Path(job_dir) / ".forge-runtime" / "starforge-runtime.zip"
            zip_path.chmod(0o644)
            with zipfile.ZipFile(zip_path, "w") as zf:
                zf.writestr("__main__.py", "open(%r, 'w').write('ran')" % str(marker))
        return out

    monkeypatch.setattr(stage, "stage_job", stage_then_edit)
    monkeypatch.setattr(submit, "stage_job", stage_then_edit)  # bound at submit's import


@pytest.mark.parametrize("what, refused", [("spec", "the JobSpec"), ("runtime", "the job's runtime zip")])
def test_a_job_changed_between_staging_and_the_load_phase_is_refused_as_a_launch_refuses_it(toy, monkeypatch, what,
                                                                                             refused):
    toy.forge("lock", str(toy.exp), ok=0)
    marker = toy.tmp / "evil-zip-ran"
    _edit_after_staging(monkeypatch, what, marker)
    run = toy.plan()
    assert run.returncode == 10, run.stdout + run.stderr  # the launcher's "verification failed" (SPEC §9)
    error = run.stderr.splitlines()[0]
    assert error.startswith("error: forge plan: ") and refused in error and "changed after staging" in error, run.stderr
    assert "Traceback" not in run.stderr and "installed" not in run.stdout  # no ledger: nothing was loaded
    assert not marker.exists()
    assert list(toy.scratch.iterdir()) == []
    # the same edit refused by a real launch, with the same code
    launch = toy.forge("submit", str(toy.exp))
    assert launch.returncode == 10 and refused in launch.stdout + launch.stderr, launch.stdout + launch.stderr
    assert not marker.exists()


def test_plan_acknowledge_is_validated(toy):
    toy.use("starforge/opsd-patch@~=1.2")
    with open(toy.exp / "forge.yaml", "a") as f:
        f.write("plan:\n  acknowledge:\n    - {plugin: dr-grpo, replace: x}\n")
    run = toy.plan(ok=3)
    assert "unknown key 'plan.acknowledge.0.replace' (did you mean 'replaces'?)" in run.stderr


def test_backend_local_runs_the_load_phase_as_a_job_and_leaves_no_record(toy):
    toy.use("starforge/opsd-patch@~=1.2", "starforge/dr-grpo@~=2.0")
    run = toy.plan("--backend", "local", ok=CONFLICT)
    assert run.stdout.splitlines()[0].startswith("plan    : quickstart on the local backend (python ")
    assert "    replace                  toy_grpo.algorithms:compute_advantages" in run.stdout
    assert json.loads(toy.forge("jobs", "list", "--json", ok=0).stdout) == []
    assert not (toy.exp / ".forge").exists() and list(toy.scratch.iterdir()) == []
    doc = json.loads(toy.plan("--backend", "local", "--json", ok=CONFLICT).stdout)
    assert [c["kind"] for c in doc["conflicts"]] == ["hidden", "hidden"]


def test_plan_on_a_backend_refuses_a_setting_submit_refuses(toy):
    """Each backend drops only its own GPU requests: another backend's GPU key is refused as at submit."""
    toy.use("starforge/opsd-patch@~=1.2", extra="ray:\n  gpus_per_node: 8\n")
    plan = toy.plan("--backend", "ray", ok=3)
    submit = toy.forge("submit", str(toy.exp), "--backend", "ray", ok=3)
    assert "'ray.gpus_per_node'" in plan.stderr.splitlines()[0]
    assert plan.stderr.splitlines()[0] == submit.stderr.splitlines()[0]
    assert not (toy.exp / ".forge").exists()


def test_cpu_only_settings():
    from starforge.backends.base import backend_class

    slurm, ray, local = (backend_class(name).cpu_only_settings for name in ("slurm", "ray", "local"))
    assert slurm({"nodes": 4, "gpus_per_node": 8, "launch": "per-node", "sbatch_args": ["--gres=gpu:8", "-p", "batch"],
                  "partition": "x"}) == {"nodes": 1, "launch": "once", "sbatch_args": ["-p", "batch"], "partition": "x"}
    assert ray({"entrypoint_num_gpus": 1, "entrypoint_resources": {"GPU": 1, "mem": 2}}) == {"entrypoint_resources": {"mem": 2}}
    assert local({}) == {}


def test_deferred_plugins_are_registered_and_environment_plugins_skipped(toy):
    root = toy.tmp / "src" / "late"
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text("schema: forge/plugin/v1\nname: late\nversion: '1.0.0'\nkind: algorithm\n"
                                      "entrypoint: late:install\nload: deferred\n")
    (root / "late.py").write_text("def install(params, **ctx):\n    raise RuntimeError('must not run in a plan')\n")
    toy.forge("plugin", "publish", str(root), ok=0)
    toy.forge("plugin", "publish", str(REPO / "examples" / "environments" / "yes-reward"), ok=0)
    toy.use("starforge/opsd-patch@~=1.2", "starforge/late@1.0.0", "starforge/yes-reward@1.0.0")
    run = toy.plan(ok=0)
    lines = run.stdout.splitlines()
    assert "starforge/late@1.0.0  registered, not installed (deferred: its context exists only in training)" in lines
    assert "starforge/yes-reward@1.0.0  skipped (kind environment: left to the environment mechanism)" in lines  # as the launcher says it (docs/kinds.md)
    doc = json.loads(toy.plan("--json", ok=0).stdout)
    assert [(p["ref"], p["status"]) for p in doc["plugins"]] == [
        ("starforge/opsd-patch@1.2.0", "loaded"), ("starforge/late@1.0.0", "registered"),
        ("starforge/yes-reward@1.0.0", "skipped"), ("recipe:reward-clip@0.1.0", "loaded"),
    ]


def test_a_process_a_plugin_leaves_behind_neither_delays_plan_nor_outlives_it(toy):
    import time

    pid_file = toy.tmp / "grandchild.pid"
    toy.plugin("lingering", "import os, time\n\n\ndef install(params):\n"
                            "    pid = os.fork()\n"
                            "    if pid == 0:  # holds the load phase's output pipe\n"
                            "        time.sleep(120)\n"
                            "        os._exit(0)\n"
                            f"    open({str(pid_file)!r}, 'w').write(str(pid))\n"
                            "    patching.wrap('toy_grpo.algorithms:compute_rewards', lambda o, *a: o(*a))\n")
    toy.use("starforge/lingering@1.0.0")
    toy.process = True
    started = time.monotonic()
    try:
        toy.plan(ok=0)
        took = time.monotonic() - started
        grandchild = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while is_alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not is_alive(grandchild)  # ended with the load phase's process group
        assert took < 60, took  # not the grandchild's 120 s
    finally:
        if pid_file.exists() and is_alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), 9)


def test_plugin_code_cannot_read_the_credentials_from_forges_proc_environ(toy):
    # The load phase's parent is the forge process, which read the credentials: what its
    # /proc/<pid>/environ shows (and every other ancestor's) holds none of them.
    report = toy.tmp / "ancestors.json"
    toy.plugin("proc-snoop", "import json, os\n\n\ndef install(params):\n"
                             "    seen, pid = {}, os.getppid()\n"
                             "    while pid > 1:\n"
                             "        with open(f'/proc/{pid}/environ', 'rb') as f:\n"
                             "            seen[pid] = f.read().decode('utf-8', 'replace').split('\\0')\n"
                             "        with open(f'/proc/{pid}/stat') as f:\n"
                             "            pid = int(f.read().rsplit(')', 1)[1].split()[1])\n"
                             f"    open({str(report)!r}, 'w').write(json.dumps(seen))\n"
                             "    patching.wrap('toy_grpo.algorithms:compute_rewards', lambda o, *a: o(*a))\n")
    toy.use("starforge/proc-snoop@1.0.0")
    toy.env.update(FORGE_REGISTRY_PASSWORD="push-S3cr3t", FORGE_REGISTRY_USER="ci-pusher", FORGE_KEY_PASSPHRASE="sign-S3cr3t",
                   FORGE_RAY_TOKEN="ray-T0ken", HF_TOKEN="hf-token-456")
    toy.process = True
    toy.plan(ok=0)
    seen = json.loads(report.read_text())
    forge = next(iter(seen.values()))  # the load phase's parent
    assert "HF_TOKEN=hf-token-456" in forge  # the read worked: the user's own variables are there
    leaked = [e for environ in seen.values() for e in environ
              if any(s in e for s in ("push-S3cr3t", "ci-pusher", "sign-S3cr3t", "ray-T0ken"))]
    assert leaked == []


def test_what_plugin_code_says_reaches_the_terminal_spelled_out(toy):
    # An install that raises with terminal control sequences in its message (OSC 52 writes the
    # clipboard, OSC 8 a link, a carriage return rewrites the line, U+202E reverses it).
    toy.plugin("noisy", "def install(params):\n"
                        "    raise RuntimeError('\\x1b]52;c;aGk=\\x07\\x1b]8;;https://evil.example/\\x07x\\x1b]8;;\\x07"
                        "\\rno conflicts \\u202eevil')\n")
    toy.use("starforge/noisy@1.0.0")
    run = toy.plan(ok=CONFLICT)
    raw = [c for c in run.stdout + run.stderr if ord(c) < 0x20 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f
           or c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]
    assert raw == []
    assert ("install raised RuntimeError: ^[]52;c;aGk=^G^[]8;;https://evil.example/^Gx^[]8;;^G^Mno conflicts \\u202eevil"
            in run.stdout)
