"""``forge key generate [--name NAME] [--type TYPE]``, ``forge key list`` and ``forge key export``:
the user's signing keys (Ed25519 by default, or ECDSA P-256)."""

from __future__ import annotations

import json

import click

from ..errors import UsageError


@click.command("generate")
@click.option("--name", default="default", show_default=True, help="Key name: writes keys/NAME.key and keys/NAME.pub.")
@click.option("--type", "key_type", type=click.Choice(["ed25519", "ecdsa-p256"]), default="ed25519", show_default=True,
              help="Key type: ecdsa-p256 where a policy or a tool (OpenSSF model-signing) requires ECDSA.")
@click.option("--passphrase-file", type=click.Path(dir_okay=False), help="Encrypt the private key with the passphrase in this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the paths, key type and key id as JSON.")
def generate(name, key_type, passphrase_file, as_json) -> None:
    """Make a signing key pair (Ed25519, or --type ecdsa-p256) for 'forge plugin publish --sign'.

    The private key is written with mode 0600 under the StarForge config directory
    (FORGE_HOME); it is encrypted when a passphrase is given through --passphrase-file or
    FORGE_KEY_PASSPHRASE. The key id is the sha256 of the raw public key (Ed25519) or of
    its DER SubjectPublicKeyInfo (ECDSA).

    \b
    Example:
      forge key generate --name laptop
      forge key generate --name release --type ecdsa-p256
      forge trust add alice ~/.config/starforge/keys/laptop.pub
    """
    from ..signatures.signing import KEY_NAME_RE, generate_key
    from ..state.home import home
    from .plugin_publish import read_passphrase

    if not KEY_NAME_RE.match(name):
        raise UsageError(f"'{name}' is not a key name", hint="letters, digits, '.', '_' and '-'")
    pair = generate_key(home().keys_dir / f"{name}.key", passphrase=read_passphrase(passphrase_file), key_type=key_type)
    if as_json:
        click.echo(json.dumps({"private": str(pair.private), "public": str(pair.public), "key_id": pair.key_id,
                               "type": key_type}, indent=2))
        return
    click.echo(f"private key: {pair.private} (mode 0600; keep it secret)")
    click.echo(f"public key:  {pair.public}")
    click.echo(f"key id:      {pair.key_id}")
    click.echo(f"others trust it with: forge trust add OWNER {pair.public}")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, key_id, type, private, public, encrypted}.")
def list_keys(as_json) -> None:
    """List your signing keys and their key ids.

    The keys live in the StarForge config directory (FORGE_HOME).

    'forge plugin publish --sign' uses the key named after the publishing owner, else
    the one named 'default' (or --key NAME, or --key PATH/TO/FILE.key).

    \b
    Example:
      forge key list
    """
    from ..signatures.signing import list_keys as keys_on_disk

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


@click.command("export")
@click.argument("name", default="default")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the PEM to this file (default: print it).")
def export(name, output) -> None:
    """Print (or write) the public key of your key NAME as PEM, for 'forge trust add' or cosign.

    The PEM is the SubjectPublicKeyInfo that cosign's and sigstore-js's --key take. Only
    the public key is ever exported.

    \b
    Example:
      forge key export release -o release.pem
    """
    from cryptography.hazmat.primitives import serialization

    from ..cluster import atomic
    from ..errors import NotFoundError
    from ..signatures.signing import KEY_NAME_RE, load_public_key
    from ..state.home import home

    if not KEY_NAME_RE.match(name):
        raise UsageError(f"'{name}' is not a key name", hint="letters, digits, '.', '_' and '-'")
    public = home().keys_dir / f"{name}.pub"
    try:
        data = public.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"no public key {public}", hint="'forge key list' shows your keys") from None
    pem = load_public_key(data).public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    if output is None:
        click.echo(pem.decode("ascii"), nl=False)
        return
    atomic.write_file(output, pem, 0o644, fsync=True)
    click.echo(f"wrote {output}")
