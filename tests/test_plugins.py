"""starforge.plugins outside the launcher: FORGE_HYPERPARAMS, and no job at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run(code: str, env: dict, cwd) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k != "PYTHONPATH"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, cwd=str(cwd))


def test_hyperparams_from_the_file_named_by_forge_hyperparams(tmp_path):
    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"grpo.lr": 1e-6, "task.target": [1, 2]}))
    code = (
        "from starforge.plugins import hyperparams\n"
        "hp = hyperparams()\n"
        "print(hp['grpo.lr'], hp['task.target'], hp is hyperparams())\n"
        "try:\n    hp['x'] = 1\nexcept TypeError:\n    print('read-only')\n"
    )
    out = run(code, {"FORGE_HYPERPARAMS": str(path)}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["1e-06 [1, 2] True", "read-only"]


def test_outside_a_job_hyperparams_are_empty_and_install_deferred_says_why(tmp_path):
    code = (
        "from starforge import plugins\n"
        "print(dict(plugins.hyperparams()), plugins.registered())\n"
        "try:\n    plugins.install_deferred('opsd-patch', tokenizer=None)\n"
        "except plugins.UnknownPluginError as exc:\n    print(exc)\n"
    )
    out = run(code, {}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "{} ()",
        "no deferred plugin named 'opsd-patch' is registered (registered: none: this process is not part of a forge job)",
    ]
