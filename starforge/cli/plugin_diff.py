"""``forge plugin diff REF_A REF_B [--stat] [--json]``: two versions of a plugin, file by file."""

from __future__ import annotations

import json
import sys

import click

from .completion import complete_plugin_refs
from .registry_options import registry_options


@click.command("diff")
@click.argument("ref_a", shell_complete=complete_plugin_refs)
@click.argument("ref_b", shell_complete=complete_plugin_refs)
@click.option("--stat", is_flag=True, help="Only the manifest changes and the files added, removed or changed (no file contents).")
@registry_options()
@click.option("--json", "as_json", is_flag=True, help="Print the diff as one JSON document.")
def diff(ref_a, ref_b, stat, registry, insecure, ca_file, as_json) -> None:
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
    from ..errors import DIFFERS_EXIT
    from ..experiment.lockdiff import diff_versions
    from ..registry.factory import open_registry

    doc = diff_versions(open_registry(registry, insecure=insecure, ca_file=ca_file), ref_a, ref_b, stat=stat)
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        from ..terminal_text import shown
        from .lock_diff import diff_lines, field_lines
        from .output import paint

        for mark, side in (("---", doc["old"]), ("+++", doc["new"])):
            click.echo(paint(shown(f"{mark} {side['ref']}  {side['digest']}"), sys.stdout, bold=True))
        for line in field_lines(doc["fields"]):
            click.echo(f"  {line}")
        for line in diff_lines(doc.get("diff") or "", "", sys.stdout):
            click.echo(line)
        if doc["equal"]:
            click.echo("no changes")
    if not doc["equal"]:
        raise click.exceptions.Exit(DIFFERS_EXIT)
