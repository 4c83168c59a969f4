"""``forge key generate [--name NAME]`` and ``forge key list``: the user's Ed25519 signing keys."""

from __future__ import annotations

import json
import re

import click

from ..errors import UsageError

KEY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@click.command("generate")
@click.option("--name", default="default", show_default=True, help="Key name: writes keys/NAME.key and keys/NAME.pub.")
@click.option("--passphrase-file", type=click.Path(dir_okay=False), help="Encrypt the private key with the passphrase in this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the paths and key id as JSON.")
def generate(name, passphrase_file, as_json) -> None:
    """Make an Ed25519 key pair for 'forge plugin publish --sign'.

    The private key is written with mode 0600 under the StarForge config directory
    (FORGE_HOME); it is encrypted when a passphrase is given through --passphrase-file or
    FORGE_KEY_PASSPHRASE. The key id is the sha256 of the raw public key.

    \b
    Example:
      forge key generate --name laptop
      forge trust add alice ~/.config/starforge/keys/laptop.pub
    """
    from ..home import home
    from ..signing import generate_key
    from .plugin_publish import read_passphrase

    if not KEY_NAME_RE.match(name):
        raise UsageError(f"'{name}' is not a key name", hint="letters, digits, '.', '_' and '-'")
    pair = generate_key(home().keys_dir / f"{name}.key", passphrase=read_passphrase(passphrase_file))
    if as_json:
        click.echo(json.dumps({"private": str(pair.private), "public": str(pair.public), "key_id": pair.key_id}, indent=2))
        return
    click.echo(f"private key: {pair.private} (mode 0600; keep it secret)")
    click.echo(f"public key:  {pair.public}")
    click.echo(f"key id:      {pair.key_id}")
    click.echo(f"others trust it with: forge trust add OWNER {pair.public}")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, key_id, private, public, encrypted}.")
def list_keys(as_json) -> None:
    """List your signing keys and their key ids.

    The keys live in the StarForge config directory (FORGE_HOME).

    'forge plugin publish --sign' uses the key named after the publishing owner, else
    the one named 'default' (or --key FILE).

    \b
    Example:
      forge key list
    """
    from ..signing import list_keys as keys_on_disk

    rows = keys_on_disk()
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    if not rows:
        from .output import note

        note("no signing keys (make one with: forge key generate --name NAME)")
        return
    table = [("NAME", "KEY ID", "PRIVATE KEY")] + [
        (r["name"], r["key_id"] or "-", r["private"] + (" (encrypted)" if r["encrypted"] else "")) for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    for row in table:
        click.echo(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
