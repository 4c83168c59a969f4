"""Ctrl-C at any moment of a forge command ends it with one line and exit 130, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FORGE = str(Path(sys.executable).with_name("forge"))


def test_ctrl_c_while_forge_is_still_importing_its_command_line(tmp_path):
    # a module that forge imports before any command runs, interrupted as a Ctrl-C would interrupt it
    fake = tmp_path / "click"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise KeyboardInterrupt\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([FORGE, "jobs", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 130
    assert result.stderr.strip() == "error: aborted" and "Traceback" not in result.stderr


def test_ctrl_c_while_forge_reads_the_command_line(tmp_path):
    # interrupted in forge's own argument handling, before click has started
    code = (
        "import starforge.cli.main as m\n"
        "def interrupted(argv):\n    raise KeyboardInterrupt\n"
        "m.normalize_argv = interrupted\n"
        "m.main(['jobs', 'list'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "FORGE_HOME": str(tmp_path)})
    assert result.returncode == 130
    assert result.stderr.strip() == "error: aborted" and "Traceback" not in result.stderr
