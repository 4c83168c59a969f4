"""``forge plugin pack``: check a plugin directory, then write its deterministic archive.

>>> packed = pack_plugin("opsd-patch")                              # doctest: +SKIP
>>> packed.path, packed.tree_digest                                 # doctest: +SKIP
('opsd-patch-1.2.0.tar.gz', 'sf1:…')
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import CheckError
from ..package_format.archive import pack_tree


@dataclass(frozen=True)
class PackedPlugin:
    """The archive written for one plugin directory."""

    path: str
    name: str
    version: str
    tree_digest: str
    artifact_digest: str
    files: dict = field(default_factory=dict)  # relpath -> sha256 hex, as packed
    warnings: tuple = ()

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "name": self.name,
            "version": self.version,
            "tree_digest": self.tree_digest,
            "artifact_digest": self.artifact_digest,
            "files": dict(self.files),
            "warnings": list(self.warnings),
        }


def default_archive_name(name: str, version: str) -> str:
    """``<name>-<canonical version>.tar.gz``."""
    from ..package_format.manifest import canonical_version

    return f"{name}-{canonical_version(version)}.tar.gz"


def pack_plugin(root: str | os.PathLike = ".", dest: str | os.PathLike | None = None, *, strict: bool = False) -> PackedPlugin:
    """Run the checks of ``forge plugin check`` on *root*, then pack the files they accepted.

    *dest* defaults to ``<name>-<version>.tar.gz`` in the current directory. Raises
    :class:`CheckError` when a check fails or when *dest* would end up inside the packed
    set of a later pack; the archive is written atomically.
    """
    from .checks import require_valid

    root = os.fspath(root)
    report = require_valid(root, strict=strict)
    manifest = report.manifest
    assert manifest is not None  # require_valid raised otherwise
    dest = os.fspath(dest) if dest is not None else default_archive_name(manifest.name, manifest.version)
    parent = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(parent):
        from ..errors import UsageError

        raise UsageError(f"{dest}: directory {parent} does not exist", hint=f"create it first (mkdir -p {parent}) or choose another -o")
    warnings = []
    rel = _relative_inside(root, dest)
    if rel is not None:
        if rel in report.files:
            raise CheckError(
                f"{dest}: a previous archive inside the plugin directory would be packed into the new one",
                hint=f"add '/{rel}' to {os.path.join(root, '.forgeignore')} or write the archive elsewhere with -o",
            )
        warnings.append(
            f"{dest} is inside the plugin directory; add '/{rel}' to .forgeignore so the next pack leaves it out"
        )
    refuse_own_archives(root, manifest.name, report.files)
    packed = pack_tree(root, report.files, dest)
    if packed.tree_digest != report.digest:
        os.unlink(dest)
        raise CheckError(
            f"{root}: files changed while packing (checked {report.digest}, packed {packed.tree_digest})",
            hint="run the command again once nothing is writing to the plugin directory",
        )
    return PackedPlugin(
        path=dest,
        name=manifest.name,
        version=str(manifest.version),
        tree_digest=packed.tree_digest,
        artifact_digest=packed.artifact_digest,
        files=packed.files,
        warnings=tuple(warnings),
    )


def refuse_own_archives(root: str | os.PathLike, name: str, files) -> None:
    """Raise :class:`CheckError` when a file to be packed is a package archive of this plugin.

    A file named ``<name>-*.tar.gz`` (at any depth) counts when it is a gzip tar holding a
    ``plugin.yaml`` whose ``name`` is *name*: an earlier ``pack -o`` into the plugin
    directory, or a download left there. Other ``.tar.gz`` files (data) are packed as usual.
    """
    found = [rel for rel in sorted(files) if _is_own_archive(os.path.join(os.fspath(root), rel), rel, name)]
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise CheckError(
            f"{root}: {shown} {'is a package archive' if len(found) == 1 else 'are package archives'} of "
            f"{name} itself and would be packed into the new one",
            hint=f"delete or move {'it' if len(found) == 1 else 'them'}, or add '/{found[0]}' (or '*.tar.gz') to "
                 f"{os.path.join(os.fspath(root), '.forgeignore')}",
        )


def _is_own_archive(path: str, rel: str, name: str) -> bool:
    import tarfile

    base = rel.rsplit("/", 1)[-1]
    if not (base.startswith(f"{name}-") and base.endswith(".tar.gz")):
        return False
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.getmember("plugin.yaml")
            handle = tar.extractfile(member) if member.isfile() and member.size <= 1 << 20 else None
            text = handle.read().decode("utf-8") if handle is not None else ""
    except (OSError, EOFError, KeyError, UnicodeDecodeError, tarfile.TarError):
        return False
    from ..errors import ForgeError
    from ..package_format.yamlio import load_yaml

    try:
        data = load_yaml(text, source=f"{rel}:plugin.yaml").data
    except ForgeError:  # not a manifest we can read: not a package of this plugin
        return False
    return isinstance(data, dict) and data.get("name") == name


def _relative_inside(root: str, path: str) -> str | None:
    """*path* relative to *root* as POSIX text when it lies inside *root*, else None."""
    real_root = os.path.realpath(root)
    real_path = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
    rel = os.path.relpath(real_path, real_root)
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.path.isabs(rel):
        return None
    return rel.replace(os.sep, "/")
