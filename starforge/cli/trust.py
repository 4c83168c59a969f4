"""``forge trust add OWNER PUBKEY``, ``forge trust remove OWNER [KEYID]`` and ``forge trust list``."""

from __future__ import annotations

import json

import click


@click.command("add")
@click.argument("owner")
@click.argument("pubkey", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print {owner, key_id, trust_file} as JSON.")
def add(owner, pubkey, as_json) -> None:
    """Trust the public key in file PUBKEY for plugins published by OWNER.

    From then on every version of OWNER's plugins must carry a valid signature by one
    of OWNER's trusted keys; an unsigned one is refused.

    \b
    Example:
      forge trust add alice alice-laptop.pub
    """
    from ..signatures.signing import default_trust_path, trust_add

    kid = trust_add(owner, pubkey)
    if as_json:
        click.echo(json.dumps({"owner": owner, "key_id": kid, "trust_file": str(default_trust_path())}, indent=2, sort_keys=True))
        return
    click.echo(f"trusted key {kid} for {owner} ({default_trust_path()})")


@click.command("remove")
@click.argument("owner")
@click.argument("key_id", metavar="[KEYID]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print {owner, removed: [key ids], trust_file} as JSON.")
def remove(owner, key_id, as_json) -> None:
    """Stop trusting a key (or every key) of OWNER.

    KEYID may be a unique prefix; without it, every key of OWNER goes.

    Once no key is trusted for OWNER, OWNER's unsigned versions are accepted again (as
    unsigned) unless --require-signatures is given.

    \b
    Example:
      forge trust remove alice 3f2a9c
    """
    from ..signatures.signing import default_trust_path, trust_remove

    removed = trust_remove(owner, key_id)
    if as_json:
        click.echo(json.dumps({"owner": owner, "removed": removed, "trust_file": str(default_trust_path())}, indent=2, sort_keys=True))
        return
    for kid in removed:
        click.echo(f"no longer trusting key {kid} for {owner} ({default_trust_path()})")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {owner, key_id}.")
def list_trust(as_json) -> None:
    """List owners and the key ids trusted for each.

    \b
    Example:
      forge trust list --json
    """
    from ..signatures.signing import trust_list

    rows = trust_list()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        from .output import note

        note("no trusted keys (add one with: forge trust add OWNER PUBKEY)")
        return
    width = max(len(r["owner"]) for r in rows)
    for r in rows:
        click.echo(f"{r['owner']:<{width}}  {r['key_id']}")
