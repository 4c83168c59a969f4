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


def resolve(registry: Registry, ref: Ref | str, *, skip_yanked: bool = False, trust=None) -> PublishedVersion:
    """The published version *ref* selects; :class:`NotFoundError` (with a hint) otherwise.

    With *skip_yanked* (``forge lock``), a range or bare reference never selects a yanked
    version (:func:`unyanked`); an exact one selects its version, yanked or not.

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
    if skip_yanked and not is_exact(ref.specifier):
        return unyanked(registry, ref, versions, trust)
    return registry.get(ref.owner, ref.name, chosen)


def is_exact(specifier: str | None) -> bool:
    """Whether *specifier* pins one version (``==1.2.0``, no wildcard)."""
    return bool(specifier) and str(specifier).startswith("==") and "*" not in str(specifier) and "," not in str(specifier)


def unyanked(registry: Registry, ref: Ref, versions: list, trust=None) -> PublishedVersion:
    """The newest of *versions* that *ref* admits and that is not yanked now; when every one
    is, :class:`~starforge.errors.YankedError` naming the newest and its reason."""
    from packaging.version import Version

    from ..errors import YankedError
    from .yank import yank_facts

    candidates = sorted((v for v in versions if select_version([v], ref.specifier) == v), key=Version, reverse=True)
    first = None
    for version in candidates:
        info = registry.get(ref.owner, ref.name, version)
        facts = yank_facts(registry, info.owner, info.name, info.version, info.tree_digest, trust=trust)
        if not facts.yanked:
            return info
        first = first or facts
    assert first is not None  # select_version found one
    raise YankedError(
        f"every version of {ref.owner}/{ref.name} that {ref} admits is yanked; the newest, {first.ref}, "
        f"{first.when()}: {first.reason}",
        hint=f"request another version, or pin it knowingly: {{request: {first.ref}, allow_yanked: true}} in forge.yaml",
    )


def newest_unyanked(registry: Registry, ref: Ref | str, trust=None) -> str | None:
    """The newest version that *ref* admits (an exact one included) and that is not yanked
    now; None when there is none."""
    from ..errors import ForgeError

    if isinstance(ref, str):
        ref = parse_ref(ref)
    try:
        versions = registry.versions(ref.owner, ref.name)
        if select_version(versions, ref.specifier) is None:
            return None
        return unyanked(registry, ref, versions, trust).version
    except ForgeError:
        return None
