"""forge's own wheel, built offline from a copy of the checkout's sources, once per test run:
the wheel test reads what it ships and the air-gap test installs it (the same build)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.once import made_once

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "starforge", "plugin_templates")


def build(root: Path) -> None:
    """``root/src`` (the sources a wheel is built from), ``root/wheel/starforge_core-*.whl`` and
    ``root/build-output.txt`` (what pip and the build backend printed, ``-v``)."""
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".venv", ".git")
    for entry in SOURCES:
        path = REPO / entry
        if path.is_dir():
            shutil.copytree(path, src / entry, ignore=ignore)
        elif path.exists():
            shutil.copy2(path, src / entry)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-v", str(src), "-w",
         str(root / "wheel")],
        capture_output=True, text=True, timeout=600,
    )
    (root / "build-output.txt").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def starforge_wheel(tmp_path_factory) -> tuple[Path, str, Path]:
    """``(wheel file, build output, source copy)`` of the run's one build."""
    root = made_once(tmp_path_factory, "starforge-wheel", build)
    (wheel,) = (root / "wheel").glob("starforge_core-*.whl")
    return wheel, (root / "build-output.txt").read_text(), root / "src"
