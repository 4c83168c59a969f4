"""Requirement checks: a plugin's ``requires`` (core, python, packages) against this process.

Every verdict comes from ``packaging``, evaluated in the process that runs the plugin;
nothing is remembered between processes (a remembered verdict would be a security
decision anyone who can write the cache could make). The ``packaging`` used is the copy
vendored under StarForge's namespace (``_vendor/``, pinned in ``vendor.txt``), the same in
the runtime zip and in an installed starforge-core: the trainer's own ``packaging`` is
never shadowed, nor used.
"""

from __future__ import annotations

import sys

from .errors import LaunchFailure, RequirementError
from .jobspec import PluginEntry


def _packaging():
    """``(SpecifierSet, Version, InvalidSpecifier, InvalidVersion)`` from the vendored packaging."""
    from ._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet
    from ._vendor.packaging.version import InvalidVersion, Version

    return SpecifierSet, Version, InvalidSpecifier, InvalidVersion


def packaging_version():
    """``(Version, InvalidVersion)`` from the vendored packaging."""
    SpecifierSet, Version, InvalidSpecifier, InvalidVersion = _packaging()
    return Version, InvalidVersion


def check_requires(entry: PluginEntry) -> None:
    """Raise a :class:`RequirementError` failure when core, python or packages are not satisfied here."""
    req = entry.requires or {}
    if not req:
        return
    from .. import __version__

    SpecifierSet, Version, InvalidSpecifier, InvalidVersion = _packaging()
    core = req.get("core")
    python = req.get("python")
    have_py = "%d.%d.%d" % sys.version_info[:3]
    packages = req.get("packages") or {}

    def unmet(what: str, spec: str, have: str | None) -> LaunchFailure:
        found = f"found {have}" if have else "not installed"
        return LaunchFailure(RequirementError, entry.ref, f"{entry.ref} requires {what} {spec}, {found}")

    def satisfied(spec: str, have: str, what: str) -> bool:
        try:
            return bool(SpecifierSet(spec).contains(Version(have), prereleases=True))
        except InvalidSpecifier:
            raise LaunchFailure(RequirementError, entry.ref, f"{entry.ref}: invalid specifier for {what}: {spec!r}") from None
        except InvalidVersion:
            return False

    if core and not satisfied(core, __version__, "starforge-core"):
        raise unmet("starforge-core", core, __version__)
    if python and not satisfied(python, have_py, "python"):
        raise unmet("python", python, have_py)
    if packages:
        import importlib.metadata as md

        for dist, spec in packages.items():
            try:
                have = md.version(dist)
            except md.PackageNotFoundError:
                raise unmet(dist, spec or "(any version)", None) from None
            if spec and not satisfied(spec, have, dist):
                raise unmet(dist, spec, have)
