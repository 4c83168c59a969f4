"""Resolve a plugin reference to one published version.

The newest version that satisfies the reference's specifier wins, compared by PEP 440.
Pre-releases (``2.0.0rc1``, ``1.1.0.dev3``) are chosen only when the reference names one
(``@2.0.0rc1``, ``@>=2.0.0b1``); a bare reference means the newest final release. Unlike
pip, resolution does not fall back to a pre-release when no final release matches: the
error lists the pre-releases so the user can ask for one explicitly.

>>> select_version(["1.0.0", "1.2.0", "1.3.0rc1"], "~=1.0")
'1.2.0'
>>> select_version(["1.0.0", "1.3.0rc1"], ">=1.3.0rc1")
'1.3.0rc1'
"""

from __future__ import annotations

from ..errors import NotFoundError, RegistryError
from .base import PublishedVersion, Ref, Registry, parse_ref


def select_version(versions, specifier: str | None) -> str | None:
    """The newest of *versions* satisfying *specifier* (None or "" = any final release)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    spec = SpecifierSet(specifier or "")
    allow_pre = bool(spec.prereleases)
    matching = [v for v in versions if spec.contains(Version(v), prereleases=allow_pre)]
    return max(matching, key=Version) if matching else None


def resolve(registry: Registry, ref: Ref | str) -> PublishedVersion:
    """The published version *ref* selects; :class:`NotFoundError` (with a hint) otherwise.

    >>> resolve(open_registry(), "alice/opsd-patch@~=1.2").version   # doctest: +SKIP
    '1.2.3'
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if isinstance(ref, str):
        ref = parse_ref(ref)
    versions = registry.versions(ref.owner, ref.name)
    if not versions:
        try:
            import difflib

            names = [n for _, n in registry.plugins(ref.owner)]
            close = difflib.get_close_matches(ref.name, names, n=3, cutoff=0.6)
            if close:
                hint = f"did you mean {' or '.join(f'{ref.owner}/{n}' for n in close)}?"
            elif names:
                shown = ", ".join(f"{ref.owner}/{n}" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
                hint = f"{ref.owner} has published {shown} (forge plugin list {ref.owner} lists them)"
            else:
                hint = f"nothing by {ref.owner} is published there; check the owner, --registry or FORGE_REGISTRY"
        except RegistryError:  # a registry without a listing (some OCI registries) still resolves names
            hint = "check the owner and name, --registry or FORGE_REGISTRY"
        raise NotFoundError(f"no plugin {ref.owner}/{ref.name} in registry {registry.url}", hint=hint)
    chosen = select_version(versions, ref.specifier)
    if chosen is None:
        available = sorted(versions, key=Version)
        spec = SpecifierSet(ref.specifier or "")
        pre_matches = [v for v in available if Version(v).is_prerelease and spec.contains(Version(v), prereleases=True)]
        asked = f"'{ref.specifier}'" if ref.specifier else "any final release"
        hint = f"available: {', '.join(available)}"
        if pre_matches:
            hint += f"; pre-releases are chosen only when asked for, e.g. {ref.owner}/{ref.name}@{pre_matches[-1]}"
        raise NotFoundError(f"no version of {ref.owner}/{ref.name} matches {asked} in registry {registry.url}", hint=hint)
    return registry.get(ref.owner, ref.name, chosen)
