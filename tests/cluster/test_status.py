"""The launcher's exit codes and status.json (SPEC §9), written once for the launcher,
the node entry and the local backend."""

from __future__ import annotations

import json
import os
import stat

import pytest

from starforge.cluster import status
from starforge.cluster.errors import (
    DeferredNotInstalledError,
    InstallError,
    PluginImportError,
    RequirementError,
    SpecError,
    VerificationError,
)


def test_the_codes_are_the_contracts():
    assert (status.SPEC_EXIT, status.VERIFY_EXIT, status.REQUIRES_EXIT, status.IMPORT_EXIT, status.INSTALL_EXIT,
            status.DEFERRED_EXIT) == (2, 10, 11, 12, 13, 14)  # fmt: skip
    by_phase = {cls.phase: cls.exit_code for cls in (SpecError, VerificationError, RequirementError, PluginImportError,
                                                        InstallError)}  # fmt: skip
    assert by_phase == {"spec": 2, "verify": 10, "requires": 11, "import": 12, "install": 13}
    assert DeferredNotInstalledError.exit_code == 14


def test_status_json_is_replaced_whole_with_its_mode_whatever_the_umask(tmp_path):
    (tmp_path / "status.json").write_text("old")
    old = os.umask(0o077)
    try:
        status.write_status(str(tmp_path), "requires", 11, None, "the job's Python is 3.8")
    finally:
        os.umask(old)
    assert json.loads((tmp_path / "status.json").read_text()) == {
        "phase": "requires", "code": 11, "plugin": None, "message": "the job's Python is 3.8"}  # fmt: skip
    assert stat.S_IMODE((tmp_path / "status.json").stat().st_mode) == 0o644
    status.write_status(str(tmp_path), "install", 13, "alice/p@1.0.0", "boom", time="2026-11-29T12:00:00Z")
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["plugin"] == "alice/p@1.0.0" and data["time"] == "2026-11-29T12:00:00Z"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp file left


def test_a_status_that_cannot_be_written_leaves_nothing_behind(tmp_path):
    (tmp_path / "status.json").mkdir()  # the rename over it fails
    with pytest.raises(OSError):
        status.write_status(str(tmp_path), "verify", 10, None, "changed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]
    with pytest.raises(OSError):
        status.write_status(str(tmp_path / "gone"), "verify", 10)
