"""``forge plugin list [OWNER] [--json]``: published plugins and their versions."""

from __future__ import annotations

import json

import click

from .registry_options import registry_options


def list_published(registry, owner: str | None = None) -> list:
    """``[{ref, owner, name, latest, versions, yanked}]`` for every plugin (of *owner*), sorted.

    ``latest`` is the newest final release not yanked (what a bare reference locks), or
    None when there is none; ``yanked`` maps each yanked version to its yank facts.
    """
    from ..registry.directory import sort_versions
    from ..registry.resolve import select_version
    from ..registry.store import PluginStore

    store = PluginStore(registry)
    rows = []
    for o, n in registry.plugins(owner):
        versions = sort_versions(registry.versions(o, n))
        yanked = {}
        for v in versions:
            info = registry.get(o, n, v)
            facts = store.yank(o, n, v, info.tree_digest)
            if facts.yanked:
                yanked[v] = facts.to_json()
        latest = select_version([v for v in versions if v not in yanked], None)
        rows.append({"ref": f"{o}/{n}", "owner": o, "name": n, "latest": latest, "versions": versions, "yanked": yanked})
    return rows


@click.command("list")
@click.argument("owner", required=False)
@registry_options()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_plugins(owner, registry, insecure, ca_file, as_json) -> None:
    """List published plugins (of OWNER) and their versions.

    Versions are listed oldest first; a yanked one is marked, and LATEST (what a bare
    reference locks) is never a yanked version.

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
    from ..terminal_text import shown

    table += [(r["ref"], r["latest"] or ("(all yanked)" if r["yanked"] else "(pre-releases only)"), ", ".join(v + (" (yanked)" if v in r["yanked"] else "")
                                                          for v in r["versions"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    for row in table:
        click.echo(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
    for r in rows:
        for v, facts in r["yanked"].items():
            click.echo(shown(f"{r['ref']}@{v} yanked: {facts['reason']}"))
