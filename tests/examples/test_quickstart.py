"""examples/quickstart.sh, the README's first command, run twice in a copy of the repository."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _advantages(out: str, scale: str) -> list:
    line = next(ln for ln in out.splitlines() if ln.startswith(f"opsd.scale={scale}  advantages[step 0] = "))
    return ast.literal_eval(line.split(" = ", 1)[1])


def test_quickstart_runs_and_reruns(tmp_path):
    repo = tmp_path / "repo"
    debris = shutil.ignore_patterns(".forge", "plugins.lock.json", "__pycache__", "*.pyc")
    shutil.copytree(REPO / "examples", repo / "examples", ignore=debris)
    shutil.copytree(REPO / "forge_plugins", repo / "forge_plugins", ignore=debris)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["QUICKSTART_PYTHON"] = sys.executable

    first = subprocess.run(["bash", "examples/quickstart.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert "published starforge/opsd-patch@1.2.0 sf1:" in out
    assert "plugin  : starforge/opsd-patch@1.2.0 loaded" in out.splitlines()
    assert "plugin  : recipe:reward-clip@0.1.0 loaded (built-in)" in out.splitlines()
    default, scaled = _advantages(out, "1.0"), _advantages(out, "0.5")
    assert len(default) == len(scaled) == 16 and any(default)
    assert scaled == [a * 0.5 for a in default]  # the --set reached the plugin
    lock = repo / "examples" / "quickstart" / "plugins.lock.json"
    lock_bytes = lock.read_bytes()
    assert (repo / ".forge-home" / "registry").is_dir()  # state stays inside the checkout

    second = subprocess.run(["bash", "examples/quickstart.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    published = [p for p in (REPO / "forge_plugins").iterdir() if (p / "plugin.yaml").is_file()]
    assert second.stdout.count("already published starforge/") == len(published) >= 7
    assert f"unchanged: {lock}" in second.stdout
    assert lock.read_bytes() == lock_bytes
    assert _advantages(second.stdout, "0.5") == scaled
