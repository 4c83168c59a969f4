"""Experiments as a user builds them: plugins published through the CLI into a directory
registry under a temporary FORGE_HOME, an experiment directory with a tiny trainer, and
``forge`` run on them (in the test process, or as a process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

from support.cli import forge, forge_process

# A trainer small enough to start fast: prints the hyperparams it sees, installs the
# deferred plugins named on its command line, exits with hyperparam 'exit.code'.
TRAINER = '''\
import json, sys, time
from starforge import plugins
hp = plugins.hyperparams()
print("trainer hyperparams " + json.dumps(dict(hp), sort_keys=True), flush=True)
for name in sys.argv[1:]:
    plugins.install_deferred(name, model="tiny-model")
if hp.get("sleep"):
    print("trainer sleeping", flush=True)
    time.sleep(hp["sleep"])
print("trainer done", flush=True)
sys.exit(int(hp.get("exit.code", 0)))
'''


class Project:
    """One user's world: FORGE_HOME, a source dir for plugins, one experiment directory."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.src = tmp / "src"
        self.exp = tmp / "exp"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(self.home), FORGE_OWNER="alice", FORGE_CANCEL_GRACE="5")

    def forge(self, *args, ok=True, cwd=None, timeout=120, process=False) -> subprocess.CompletedProcess:
        """``forge ARGS`` in this world (in this process; with *process*, as a process of its own)."""
        run = forge_process if process else forge
        proc = run(*args, env=self.env, cwd=cwd or self.exp, timeout=timeout)
        if ok:
            assert proc.returncode == 0, f"forge {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def plugin(self, name, version="1.2.0", *, load="eager", kind="algorithm", module=None, params=None, body=None, where=None) -> Path:
        """Write a plugin directory; its install prints one line so tests can see it ran."""
        module = module or name.replace("-", "_")
        root = (where or self.src / f"{name}-{version}")
        root.mkdir(parents=True, exist_ok=True)
        params = params if params is not None else {}
        lines = [
            "schema: forge/plugin/v1",
            f"name: {name}",
            f"version: '{version}'",
            f"kind: {kind}",
            f"entrypoint: {module}:install",
            f"load: {load}",
        ]
        if params:
            lines.append("params:")
            for key, (typ, default) in params.items():
                lines.append(f"  {key}: {{type: {typ}, default: {json.dumps(default)}}}")
        (root / "plugin.yaml").write_text("\n".join(lines) + "\n")
        if body is None:
            if load == "eager":
                body = (
                    f"KEYS = {sorted(params)!r}\n\n"
                    "def install(params):\n"
                    f"    shown = ', '.join('%s=%s' % (k, params[k]) for k in KEYS)\n"
                    f"    print('{name} {version} installed ' + shown, flush=True)\n"
                )
            else:
                body = f"def install(params, **ctx):\n    print(f'{name} {version} installed later with ' + ctx['model'], flush=True)\n"
        (root / f"{module}.py").write_text(body)
        return root

    def publish(self, root: Path) -> None:
        self.forge("plugin", "publish", str(root), cwd=self.tmp)

    def experiment(self, plugins=(), builtins=(), config=None, entrypoint="python -m trainer", extra="") -> Path:
        self.exp.mkdir(parents=True, exist_ok=True)
        (self.exp / "trainer.py").write_text(TRAINER)
        config = config if config is not None else {"grpo": {"group_size": 8, "lr": 1.0e-6}}
        text = textwrap.dedent(
            f"""\
            schema: forge/job/v1
            name: demo
            entrypoint: {entrypoint}
            plugins: [{", ".join(plugins)}]
            recipe:
              plugins: [{", ".join(builtins)}]
            config: {json.dumps(config)}
            """
        ) + extra
        (self.exp / "forge.yaml").write_text(text)
        return self.exp

    @property
    def lock(self) -> Path:
        return self.exp / "plugins.lock.json"

    def jobs_dir(self) -> Path:
        return self.exp / ".forge" / "jobs"


def submit_and_wait(exp: Path, backend: str, sets=()):
    """Submit the experiment *exp* to *backend* and wait for the job to end: ``(submission,
    job record, the job's log as it was followed)``."""
    from starforge.backends.base import wait
    from starforge.experiment.submit import submit_experiment

    sub = submit_experiment(exp, sets, backend=backend)
    chunks: list[str] = []
    record = wait(sub.backend, sub.record, chunks.append)
    return sub, record, "".join(chunks)
