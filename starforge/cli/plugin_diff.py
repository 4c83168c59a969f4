"""``forge plugin diff REF_A REF_B [--stat] [--json]``: two versions of a plugin, file by file."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from .completion import complete_plugin_refs


@click.command("diff")
@click.argument("ref_a", shell_complete=complete_plugin_refs)
@click.argument("ref_b", shell_complete=complete_plugin_refs)
@click.option("--stat", is_flag=True, help="Only the manifest changes and the files added, removed or changed (no file contents).")
@click.option("--registry", metavar="URL", help="Directory path or oci://host[:port]/prefix (default: FORGE_REGISTRY, config).")
@click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as one JSON document.")
def diff(ref_a, ref_b, stat, registry, insecure, as_json) -> None:
    """Show what changed between two versions of a plugin.

    REF_A and REF_B are owner/name@version references (a specifier resolves as 'forge
    plugin show' does); REF_B may be just '@VERSION' for another version of REF_A's
    plugin, or a plugin directory (./DIR: what publishing it would change, as
    'helm diff upgrade ./chart' shows). Prints the manifest fields that changed (params and defaults, targets,
    requires, load) and a unified diff of their files, fetched by digest through the cache
    (else the registry). Exit 0 when the two are the same content, 20 when they differ.

    \b
    Example:
      forge plugin diff alice/opsd-patch@1.2.0 @1.3.0
      forge plugin diff alice/opsd-patch@1.2.0 alice/opsd-patch@1.3.0 --stat
      forge plugin diff alice/opsd-patch ./opsd-patch
    """
    from ..experiment.lockdiff import DIFFERENT, compare_facts, facts_of_published, tree_diff
    from ..registry.cache import materialize
    from ..registry.factory import open_registry
    from ..registry.resolve import resolve
    from .plugin_show import with_default_owner

    ref_a = with_default_owner(ref_a)
    local = Path(ref_b) if not ref_b.startswith("@") and Path(ref_b).is_dir() else None
    if ref_b.startswith("@"):
        ref_b = ref_a.partition("@")[0] + ref_b
    reg = open_registry(registry, insecure=insecure)
    a = resolve(reg, ref_a)
    b: Any
    if local is not None:
        from ..experiment.dev_plugins import checked_directory
        from ..experiment.lockdiff import facts_of_plugin

        plugin, _ = checked_directory(local)
        b = _LocalVersion(plugin.replace(owner=a.owner), local)
        fb = facts_of_plugin(b.plugin)
    else:
        b = resolve(reg, with_default_owner(ref_b))
        fb = facts_of_published(b)
    fa = facts_of_published(a)
    fields = compare_facts(fa, fb)
    doc: dict = {
        "old": {"ref": a.ref, "digest": a.tree_digest},
        "new": {"ref": b.ref, "digest": b.tree_digest},
        "equal": a.tree_digest == b.tree_digest and not fields,
        "fields": fields,
    }
    if not stat and fields.get("files"):
        tmp = Path(tempfile.mkdtemp(prefix="forge-plugin-diff-"))
        try:
            root_a = materialize(reg, a, tmp / "a")
            root_b = b.root if isinstance(b, _LocalVersion) else materialize(reg, b, tmp / "b")
            label_a, label_b = f"{a.name}@{a.version}", f"{b.name}@{b.version}"
            if label_a == label_b:
                label_a, label_b = "a/" + label_a, "b/" + label_b
            doc["diff"] = tree_diff(root_a, root_b, label_a, label_b, fields["files"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        from ..terminal_text import shown
        from .lock_diff import diff_lines, field_lines
        from .output import paint

        click.echo(paint(shown(f"--- {a.ref}  {a.tree_digest}"), sys.stdout, bold=True))
        click.echo(paint(shown(f"+++ {b.ref}  {b.tree_digest}"), sys.stdout, bold=True))
        for line in field_lines(fields):
            click.echo(f"  {line}")
        for line in diff_lines(doc.get("diff") or "", "", sys.stdout):
            click.echo(line)
        if doc["equal"]:
            click.echo("no changes")
    if not doc["equal"]:
        raise click.exceptions.Exit(DIFFERENT)


class _LocalVersion:
    """A plugin directory on the diff's new side, shown as ``owner/name@version (DIR)``."""

    def __init__(self, plugin, root: Path) -> None:
        self.plugin = plugin
        self.root = root
        self.name, self.version, self.tree_digest = plugin.name, plugin.version, plugin.tree_digest
        self.ref = f"{plugin.ref} ({root})"
