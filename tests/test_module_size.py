"""No module of the package is over 600 lines (the vendored packaging aside): one concept per module."""

from __future__ import annotations

from pathlib import Path

import starforge

PACKAGE = Path(starforge.__file__).parent
LIMIT = 600


def over_limit(package: Path, limit: int) -> dict:
    """``{relative path: lines}`` of the ``.py`` files under *package* (``_vendor/`` skipped) over *limit* lines."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if "_vendor" in path.relative_to(package).parts:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out[rel] = lines
    return out


def test_the_size_check_finds_a_long_module_and_skips_vendored_code(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * 600)
    (tmp_path / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "_vendor").mkdir()
    (tmp_path / "_vendor" / "theirs.py").write_text("x = 1\n" * 5000)
    assert over_limit(tmp_path, LIMIT) == {"long.py": 601}


def test_no_module_is_over_600_lines():
    assert over_limit(PACKAGE, LIMIT) == {}
