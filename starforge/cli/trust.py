"""``forge trust add OWNER PUBKEY`` and ``forge trust list``."""

from __future__ import annotations

import json

import click


@click.command("add")
@click.argument("owner")
@click.argument("pubkey", type=click.Path(dir_okay=False))
def add(owner, pubkey) -> None:
    """Trust the public key in file PUBKEY for plugins published by OWNER.

    From then on every version of OWNER's plugins must carry a valid signature by one
    of OWNER's trusted keys; an unsigned one is refused.

    \b
    Example:
      forge trust add alice alice-laptop.pub
    """
    from ..signing import default_trust_path, trust_add

    kid = trust_add(owner, pubkey)
    click.echo(f"trusted key {kid} for {owner} ({default_trust_path()})")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {owner, key_id}.")
def list_trust(as_json) -> None:
    """List owners and the key ids trusted for each.

    \b
    Example:
      forge trust list --json
    """
    from ..signing import trust_list

    rows = trust_list()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no trusted keys (add one with: forge trust add OWNER PUBKEY)", err=True)
        return
    width = max(len(r["owner"]) for r in rows)
    for r in rows:
        click.echo(f"{r['owner']:<{width}}  {r['key_id']}")
