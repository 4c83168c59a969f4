"""``forge plugin list [OWNER] [--json]``: published plugins and their versions."""

from __future__ import annotations

import json

import click


def list_published(registry, owner: str | None = None) -> list:
    """``[{ref, owner, name, latest, versions}]`` for every plugin (of *owner*), sorted.

    ``latest`` is the newest final release (what a bare reference resolves to), or None
    when only pre-releases are published.
    """
    from ..registry.directory import sort_versions
    from ..registry.resolve import select_version

    rows = []
    for o, n in registry.plugins(owner):
        versions = sort_versions(registry.versions(o, n))
        rows.append({"ref": f"{o}/{n}", "owner": o, "name": n, "latest": select_version(versions, None), "versions": versions})
    return rows


@click.command("list")
@click.argument("owner", required=False)
@click.option("--registry", metavar="URL", help="Directory path or oci://host[:port]/prefix (default: FORGE_REGISTRY, config).")
@click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")
@click.option("--ca-file", metavar="FILE", help="Trust a registry certificate signed by this CA (PEM), besides the system's CAs.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_plugins(owner, registry, insecure, ca_file, as_json) -> None:
    """List published plugins (of OWNER) and their versions.

    Versions are listed oldest first.

    \b
    Example:
      forge plugin list alice
    """
    from ..registry.factory import open_registry
    from ..registry.publish import check_owner

    if owner:
        check_owner(owner, "the OWNER argument")
    reg = open_registry(registry, insecure=insecure, ca_file=ca_file)
    rows = list_published(reg, owner)
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    if not rows:
        from .output import note

        note(f"no plugins{' of ' + owner if owner else ''} in registry {reg.url}")
        return
    table = [("PLUGIN", "LATEST", "VERSIONS")]
    table += [(r["ref"], r["latest"] or "(pre-releases only)", ", ".join(r["versions"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    for row in table:
        click.echo(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
