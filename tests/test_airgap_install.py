"""forge itself across the air gap (docs/airgap.md): starforge-core and its dependencies as a
folder of wheels, installed on the far side with no index at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from support.wheel import starforge_wheel


def run(cmd, env=None, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.index
def test_forge_installs_from_a_wheel_folder_with_no_index(tmp_path, tmp_path_factory):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # Connected side: forge's own wheel (built offline, pure Python: the run's one build, which
    # the wheel test reads too), then its dependencies' wheels from whatever index this
    # machine's pip is configured with.
    built, _output, _src = starforge_wheel(tmp_path_factory)
    own = Path(shutil.copy2(built, wheels))
    fetched = run([sys.executable, "-m", "pip", "download", "-q", "-d", wheels, "--only-binary=:all:", own])
    if fetched.returncode != 0:
        reason = "no package index reachable for the connected side's download: " + fetched.stderr.strip()[-300:]
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    # Far side: a fresh venv, no pip configuration, no index: the folder alone (pip runs on it
    # with --python, as the venv's own pip would).
    far = tmp_path / "far"
    venv.EnvBuilder(with_pip=False).create(far)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "FORGE_", "PYTHON"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="alice")
    pip = [sys.executable, "-m", "pip", "--python", far / "bin" / "python"]
    installed = run([*pip, "install", "-q", "--no-index", "--find-links", wheels, "starforge-core"], env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    forge = far / "bin" / "forge"
    from starforge import __version__

    assert run([forge, "--version"], env=env).stdout.strip() == f"forge {__version__}"
    for args in (["plugin", "init", "opsd-patch"], ["plugin", "check", "opsd-patch"], ["plugin", "pack", "opsd-patch"]):
        done = run([forge, *args], env=env, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
    # the install came from the folder: nothing of the test's own environment is imported
    where = run([far / "bin" / "python", "-c", "import starforge, click; print(starforge.__file__, click.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.count(str(far)) == 2, where.stdout
    # a wheel missing from the folder is an error naming the package, never a download
    next(wheels.glob("click-*.whl")).unlink()
    missing = run([sys.executable, "-m", "pip", "download", "-d", tmp_path / "again", "--no-index", "--find-links", wheels,
                   "starforge-core"], env=env)
    assert missing.returncode != 0 and "click" in missing.stderr.lower(), missing.stderr
