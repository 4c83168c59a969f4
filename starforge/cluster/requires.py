"""Requirement checks: a plugin's ``requires`` (core, python, packages) against this process.

Every verdict comes from ``packaging``, evaluated in the process that runs the plugin;
nothing is remembered between processes (a remembered verdict would be a security
decision anyone who can write the cache could make). The ``packaging`` used is the copy
vendored under StarForge's namespace (``_vendor/``, pinned in ``vendor.txt``), the same in
the runtime zip and in an installed starforge-core: the trainer's own ``packaging`` is
never shadowed, nor used.
"""

from __future__ import annotations

import operator
import sys

from .errors import LaunchFailure, RequirementError
from .jobspec import PluginEntry
from .plain_specifiers import is_release, plain_clauses, release_numbers


def _specifiers():
    """``(SpecifierSet, InvalidSpecifier)`` from the vendored packaging."""
    from ._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet

    return SpecifierSet, InvalidSpecifier


def packaging_version():
    """``(Version, InvalidVersion)`` from the vendored packaging."""
    from ._vendor.packaging.version import InvalidVersion, Version

    return Version, InvalidVersion


# A plain clause (plain_specifiers.py) is answered with packaging's Version alone, as
# packaging's own Specifier.contains answers it; anything else goes to its SpecifierSet.
# Where the version tested is a bare release too (``3.11.7``, ``0.1.0``: what the running
# interpreter and a released starforge-core are), the comparison is the one PEP 440 (and
# packaging's Version) makes between two releases: their numbers, trailing zeros dropped;
# then packaging is not imported at all (and the node entry compiles none of it).
_COMPARE = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne}


def satisfies(spec: str, have: str) -> bool:
    """Whether the version *have* satisfies the specifier *spec*, pre-releases included (they
    are facts, not choices); False when *have* is not a version. Raises packaging's
    ``InvalidSpecifier`` for an invalid *spec*. Every verdict is packaging's: a plain
    specifier compared with its ``Version`` (or, for a bare release, as it compares two
    releases), any other with its ``SpecifierSet``."""
    plain = plain_clauses(spec)
    if plain is not None and is_release(have):
        key = release_numbers(have)
        return all(_COMPARE[op](key, release_numbers(release)) for op, release in plain)
    Version, InvalidVersion = packaging_version()
    if plain is None:
        SpecifierSet, _ = _specifiers()
        specifiers = SpecifierSet(spec)
    try:
        version = Version(have)
    except InvalidVersion:
        return False
    if plain is not None and version.local is None:
        return all(_COMPARE[op](version, Version(release)) for op, release in plain)
    if plain is not None:
        SpecifierSet, _ = _specifiers()
        specifiers = SpecifierSet(spec)
    return bool(specifiers.contains(version, prereleases=True))


def check_requires(entry: PluginEntry) -> None:
    """Raise a :class:`RequirementError` failure when core, python or packages are not satisfied here."""
    req = entry.requires or {}
    if not req:
        return
    from .. import __version__

    core = req.get("core")
    python = req.get("python")
    have_py = "%d.%d.%d" % sys.version_info[:3]
    packages = req.get("packages") or {}

    def unmet(what: str, spec: str, have: str | None) -> LaunchFailure:
        found = f"found {have}" if have else "not installed"
        return LaunchFailure(RequirementError, entry.ref, f"{entry.ref} requires {what} {spec}, {found}")

    def satisfied(spec: str, have: str, what: str) -> bool:
        try:
            return satisfies(spec, have)
        except ValueError:  # packaging's InvalidSpecifier
            raise LaunchFailure(RequirementError, entry.ref, f"{entry.ref}: invalid specifier for {what}: {spec!r}") from None

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
