"""``forge plugin publish [DIR] [--owner OWNER] [--registry URL] [--insecure] [--sign [--key NAME|FILE]]``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from ..errors import UsageError
from .completion import complete_key_names
from .registry_options import registry_options


def read_passphrase(passphrase_file: str | None) -> str | None:
    """The key passphrase: ``--passphrase-file`` (first line), else ``FORGE_KEY_PASSPHRASE``, else None."""
    if passphrase_file:
        try:
            text = Path(passphrase_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read passphrase file {passphrase_file}: {exc.strerror}") from None
        return text.splitlines()[0] if text.strip() else None
    return os.environ.get("FORGE_KEY_PASSPHRASE") or None


@click.command("publish")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--owner", metavar="OWNER", help="Publishing owner (default: FORGE_OWNER, config 'owner:', the login name).")
@registry_options()
@click.option("--sign", is_flag=True, help="Sign the published version (DSSE envelope over an in-toto statement).")
@click.option("--key", "key_file", metavar="NAME|FILE", shell_complete=complete_key_names,
              help="Key for --sign: one of your keys by name (forge key list), or a path holding '/' (default: the key named after the owner, else 'default').")
@click.option("--passphrase-file", type=click.Path(dir_okay=False), help="File holding the key's passphrase (else FORGE_KEY_PASSPHRASE).")
@click.option("--strict", is_flag=True, help="Treat check warnings as errors (as plugin check and pack do): nothing is published.")
@click.option("--json", "as_json", is_flag=True, help="Print the published version as JSON.")
def publish(directory, owner, registry, insecure, ca_file, sign, key_file, passphrase_file, strict, as_json) -> None:
    """Check, pack and publish a plugin as OWNER/NAME@VERSION.

    Published versions are immutable: publishing the same files again is a no-op success;
    other files under a published version are refused (bump the version in plugin.yaml).
    With --sign, a key the trust file does not list for OWNER is refused when it lists
    others (nothing is published); publishing again with --sign adds your signature to the
    version (a no-op when your key signed it already) only when the registry serves these
    files, in an archive that holds them (else nothing is signed, exit 9); a requested
    signature that was not attached is an error.

    \b
    Example:
      forge plugin publish opsd-patch --owner alice --sign
    """
    from ..registry.factory import open_registry
    from ..registry.progress import transfer_progress
    from ..registry.publish import LOGIN_NAME, owner_and_source, publish_plugin
    from .output import note

    if key_file and not sign:
        raise UsageError("--key goes with --sign", hint="forge plugin publish --sign --key NAME")
    owner, owner_source = owner_and_source(owner)
    if owner_source == LOGIN_NAME:
        note(f"publishing as owner '{owner}' (your login name); choose the owner with --owner, FORGE_OWNER or 'owner:' in config.yaml")
    sign_key: Path | None = None
    passphrase = None
    listed = False
    if sign:
        sign_key, passphrase, listed = signing_key(owner, key_file, passphrase_file)
    reg = open_registry(registry, insecure=insecure, ca_file=ca_file)
    with transfer_progress("publish", 0) as update:
        result = publish_plugin(directory, reg, owner, sign_key=sign_key, passphrase=passphrase, progress=update, strict=strict)
    info = result.version
    if as_json:
        from dataclasses import asdict

        out = {"created": result.created, "registry": reg.url, **asdict(info), "ref": info.ref}
        if sign:
            out["signature_attached"] = result.signature_attached
            out["signature_kept"] = result.signature_kept
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        if result.created:
            click.echo(f"published {info.ref} {info.tree_digest}")
        else:
            click.echo(f"already published {info.ref} {info.tree_digest} (same content)")
    if sign_key is not None:
        report_signature(info, result.signature_attached, result.signature_kept, sign_key, passphrase, listed,
                         quiet=as_json)
    else:
        warn_if_refused_unsigned(reg, info, directory)


def signing_key(owner: str, key_file, passphrase_file) -> tuple:
    """``(key path, passphrase, listed)`` for ``--sign``: the key exists and decrypts, and the
    trust file does not list other keys for *owner* (:func:`starforge.signatures.signing.check_signing_key`)."""
    from ..registry.store import PluginStore
    from ..signatures.signing import check_signing_key, load_private_key, signing_key_for, signing_key_option

    sign_key = signing_key_option(key_file) if key_file else signing_key_for(owner)
    if not sign_key.exists():
        raise UsageError(f"no signing key at {sign_key}", hint="'forge key list' shows your keys")
    passphrase = read_passphrase(passphrase_file)
    if passphrase is None and b"ENCRYPTED" in sign_key.read_bytes()[:64] and sys.stdin is not None and sys.stdin.isatty():
        passphrase = click.prompt(f"passphrase for {sign_key}", hide_input=True, err=True)
    public = load_private_key(sign_key, passphrase).public_key()
    return sign_key, passphrase, check_signing_key(owner, public, sign_key, PluginStore().trust)


def report_signature(info, attached: bool, kept: bool, sign_key: Path, passphrase, listed: bool, *, quiet=False,
                     signed_tree: str | None = None) -> None:
    """What signing did (with *signed_tree*: naming the version and the tree digest the
    signature vouches for); a requested signature that is not served is an error (exit 9)."""
    from ..errors import SignatureError
    from ..signatures.signing import key_id, load_private_key, public_path_for
    from .output import note

    mine = key_id(load_private_key(sign_key, passphrase).public_key())
    if not attached and not kept:
        raise SignatureError(f"{info.ref}: your signature (key {mine}) was not attached",
                             hint=f"the registry no longer serves {info.ref} as published; check it with: "
                                  f"forge plugin show {info.ref}")
    if not quiet:
        what = f" ({info.ref} {signed_tree})" if signed_tree else ""
        click.echo(f"signed with key {mine}{what}" if attached else
                   f"already signed with your key {mine}{what}; nothing attached")
    if not listed:
        note(f"no key is trusted for owner {info.owner} here; consumers trust this signature with: "
             f"forge trust add {info.owner} {public_path_for(sign_key)}")


def warn_if_refused_unsigned(reg, info, directory) -> None:
    """Published without --sign for an owner with trusted keys here: say now, not first at
    ``forge lock``, that the version is refused until it carries a signature by one of them
    (the lock's own verdict, ``PluginStore.verdict``)."""
    from ..errors import SignatureError
    from ..registry.store import PluginStore

    store = PluginStore(reg)
    if not store.trust.key_ids(info.owner):
        return
    try:
        store.verdict(info)
    except SignatureError as exc:
        click.echo(f"warning: {exc.message}: forge lock, submit and pull refuse {info.ref} until it is signed", err=True)
        from ..terminal_text import shown

        click.echo(shown(f"hint: sign it with a key trusted for {info.owner}: forge plugin sign {info.ref} --from {directory}"),
                   err=True)
