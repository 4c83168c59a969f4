"""``forge plugin sign REF [--key FILE] [--registry URL]``: sign an already-published version."""

from __future__ import annotations

import click


@click.command("sign")
@click.argument("ref")
@click.option("--key", "key_file", type=click.Path(dir_okay=False), help="Private key (default: the key named after the owner, else 'default').")
@click.option("--registry", metavar="URL", help="Directory path or oci://host[:port]/prefix (default: FORGE_REGISTRY, config).")
@click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")
@click.option("--passphrase-file", type=click.Path(dir_okay=False), help="File holding the key's passphrase (else FORGE_KEY_PASSPHRASE).")
def sign(ref, key_file, registry, insecure, passphrase_file) -> None:
    """Add your signature to the published version REF.

    For a release key after CI published, or the right key after a signing mistake: the
    version stays as it is (same files, same version number) and serves one more signature.
    The statement signed names the version's tree digest and the archive the registry
    serves. Signing again with a key that already signed it adds nothing. As with publish
    --sign, a key the trust file does not list for the owner is refused when it lists others.

    \b
    Example:
      forge plugin sign alice/opsd-patch@1.2.0 --key ~/.config/starforge/keys/release.key
    """
    from ..errors import UsageError
    from ..registry.base import parse_ref
    from ..registry.factory import open_registry
    from ..registry.publish import sign_published
    from .plugin_publish import report_signature, signing_key
    from .plugin_show import with_default_owner

    ref = with_default_owner(ref)
    parsed = parse_ref(ref)
    if parsed.specifier is None or not parsed.specifier.startswith("==") or "*" in parsed.specifier:
        raise UsageError(f"'{ref}' names no exact version; a signature is for one version",
                         hint=f"forge plugin sign {parsed.owner}/{parsed.name}@VERSION")
    sign_key, passphrase, listed = signing_key(parsed.owner, key_file, passphrase_file)
    reg = open_registry(registry, insecure=insecure)
    info = reg.get(parsed.owner, parsed.name, parsed.specifier[2:])
    attached, kept = sign_published(reg, info, sign_key, passphrase)
    report_signature(info, attached, kept, sign_key, passphrase, listed)
