"""Fixtures shared by the direct tests of cluster modules."""

from __future__ import annotations

import sys
import uuid

import pytest


@pytest.fixture
def make_package(tmp_path, monkeypatch):
    """``make_package(prefix, {module: source})``: a fresh importable package named *prefix*
    plus a unique suffix, holding those modules; returns its name. Afterwards its modules
    leave ``sys.modules`` and ``sys.meta_path`` is as it was (hooks a test installed go)."""
    made: list[str] = []
    meta_path = list(sys.meta_path)

    def make(prefix: str, modules: dict[str, str]) -> str:
        name = prefix + uuid.uuid4().hex[:8]
        pkg = tmp_path / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        for module, source in modules.items():
            (pkg / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        made.append(name)
        return name

    yield make
    sys.meta_path[:] = meta_path
    for mod in [m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in made)]:
        del sys.modules[mod]
