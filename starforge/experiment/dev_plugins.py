"""Dev plugins: an unpublished plugin directory run in place of a locked plugin.

The plugin author's inner loop, as ``pip install -e`` or ``helm install ./chart`` give it:
``forge submit --dev opsd-patch=../opsd-patch`` (``forge plan`` too) runs the directory's
current files instead of the locked version, with no bump, publish or relock. The
directory passes the same checks as ``forge plugin check``; its packable files are
digested and staged, and every process verifies them like any other plugin's.

A dev plugin is never taken for a published version: its ref carries its own version,
``owner/name@<version>+dev.<first 12 hex of its tree digest>`` (a PEP 440 local label), in
the launcher's line, provenance, ``forge jobs show`` and ``forge plan``; it carries no
signature, so ``--require-signatures`` refuses it and a node whose trust file asks for
the owner's signature refuses it too (standing in for a signed version would be the
stripped signature SPEC §6 forbids). ``forge jobs replay`` takes it from the old job's
staged copy, by its digest.

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..cluster.digest import file_map
from ..cluster.jobspec import PluginEntry
from ..errors import LockError, UsageError

DEV_LABEL = "+dev."


@dataclass(frozen=True)
class DevPlugin:
    """An unpublished plugin directory, checked, standing in for the locked plugin *entry.name*."""

    root: Path
    files: tuple
    entry: PluginEntry  # owner of the locked plugin, version <manifest version>+dev.<digest12>
    replaces: str  # the locked ref it stands in for


def is_dev(entry) -> bool:
    """Whether a JobSpec or lock entry is a dev plugin's (its version carries the dev label)."""
    return DEV_LABEL in str(getattr(entry, "version", ""))


def parse_dev_options(values) -> dict:
    """``--dev NAME=DIR`` values as ``{name: Path}``; a malformed or repeated one is a usage error."""
    out: dict = {}
    for value in values or ():
        name, sep, directory = str(value).partition("=")
        name, directory = name.strip(), directory.strip()
        if not sep or not name or not directory:
            raise UsageError(f"--dev {value}: expected NAME=DIR", hint="e.g. --dev opsd-patch=../opsd-patch")
        if name in out:
            raise UsageError(f"--dev {name} is given twice", hint="one directory per plugin")
        out[name] = Path(os.path.expanduser(directory))
    return out


def checked_directory(root: Path):
    """``(PluginEntry, files)`` of the plugin directory *root*, checked as ``forge plugin check`` checks it."""
    from ..authoring.checks import require_valid

    if not (Path(root) / "plugin.yaml").is_file():
        raise UsageError(f"{root}: no plugin.yaml there", hint="point at the plugin's directory")
    report = require_valid(root)
    manifest = report.manifest
    assert manifest is not None and report.digest is not None  # require_valid raised otherwise
    files = tuple(report.files)
    return manifest.plugin_entry(report.digest, tuple(report.top_level), file_map(root, files)), files


def load_dev_plugins(dev: dict, locked: list) -> list:
    """Check each ``{name: directory}`` of *dev* and make its entry, in place of the locked plugin *name*.

    *locked* is the lock's entries; a name not among them is refused (a dev plugin stands in
    for a plugin the experiment declares and locked), as is a directory whose plugin.yaml
    names another plugin.
    """
    by_name = {e.name: e for e in locked}
    out = []
    for name, root in dev.items():
        entry = by_name.get(name)
        if entry is None:
            raise UsageError(
                f"--dev {name}={root}: the lock has no plugin named '{name}'"
                + (f" (locked: {', '.join(sorted(by_name))})" if by_name else ""),
                hint="a dev directory stands in for a plugin forge.yaml declares: add it to plugins: and run forge lock",
            )
        if not (root / "plugin.yaml").is_file():
            raise UsageError(f"--dev {name}={root}: no plugin.yaml there", hint="point --dev at the plugin's directory")
        plugin, files = checked_directory(root)
        if plugin.name != name:
            raise LockError(f"--dev {name}={root}: its plugin.yaml names '{plugin.name}', not '{name}'")
        digest = plugin.tree_digest
        version = f"{plugin.version}{DEV_LABEL}{digest.partition(':')[2][:12]}"
        out.append(DevPlugin(root=Path(root), files=files, entry=plugin.replace(owner=entry.owner, version=version),
                             replaces=entry.ref))
    return out


def copy_dev_plugin(dev: DevPlugin, target: Path) -> None:
    """Copy exactly the dev plugin's packable files into *target* and check their digest."""
    from ..jobs.staged import copy_checked

    copy_checked(dev.root, target, dev.files, dev.entry.tree_digest, f"dev plugin {dev.entry.ref}",
                 hint="submit again once the edit is saved")
