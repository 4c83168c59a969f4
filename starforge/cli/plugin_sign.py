"""``forge plugin sign REF [--key FILE] [--registry URL]``: sign an already-published version."""

from __future__ import annotations

import click


@click.command("sign")
@click.argument("ref")
@click.option("--key", "key_file", type=click.Path(dir_okay=False), help="Private key (default: the key named after the owner, else 'default').")
@click.option("--registry", metavar="URL", help="Directory path or oci://host[:port]/prefix (default: FORGE_REGISTRY, config).")
@click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")
@click.option("--passphrase-file", type=click.Path(dir_okay=False), help="File holding the key's passphrase (else FORGE_KEY_PASSPHRASE).")
@click.option("--model-signature", "model_signature", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write an OpenSSF model-signing signature over the plugin's files to FILE (ECDSA keys only).")
def sign(ref, key_file, registry, insecure, passphrase_file, model_signature) -> None:
    """Add your signature to the published version REF.

    For a release key after CI published, or the right key after a signing mistake: the
    version stays as it is (same files, same version number) and serves one more signature.
    The statement signed names the version's tree digest and the archive the registry
    serves. Signing again with a key that already signed it adds nothing. As with publish
    --sign, a key the trust file does not list for the owner is refused when it lists others.

    With --model-signature FILE (an ECDSA P-256 key), FILE also receives a signature over
    the plugin's unpacked files that 'model_signing verify key DIR --public_key KEY.pem
    --signature FILE' accepts for a directory DIR written by 'forge plugin pull REF -o DIR'.

    \b
    Example:
      forge plugin sign alice/opsd-patch@1.2.0 --key ~/.config/starforge/keys/release.key
      forge plugin sign alice/opsd-patch@1.2.0 --key ~/.config/starforge/keys/ecdsa.key --model-signature opsd-patch.sig
    """
    from ..errors import UsageError
    from ..registry.base import parse_ref
    from ..registry.factory import open_registry
    from ..registry.publish import sign_published, with_default_owner
    from .plugin_publish import report_signature, signing_key

    ref = with_default_owner(ref)
    parsed = parse_ref(ref)
    if parsed.specifier is None or not parsed.specifier.startswith("==") or "*" in parsed.specifier:
        raise UsageError(f"'{ref}' names no exact version; a signature is for one version",
                         hint=f"forge plugin sign {parsed.owner}/{parsed.name}@VERSION")
    sign_key, passphrase, listed = signing_key(parsed.owner, key_file, passphrase_file)
    reg = open_registry(registry, insecure=insecure)
    info = reg.get(parsed.owner, parsed.name, parsed.specifier[2:])
    private = None
    if model_signature is not None:
        from ..signing import load_private_key

        private = load_private_key(sign_key, passphrase)
        from cryptography.hazmat.primitives.asymmetric import ec

        if not isinstance(private, ec.EllipticCurvePrivateKey):
            raise UsageError(f"{sign_key} is an Ed25519 key; OpenSSF model-signing accepts only ECDSA keys",
                             hint="make one with 'forge key generate --name NAME --type ecdsa-p256' and pass it with --key")
    attached, kept = sign_published(reg, info, sign_key, passphrase)
    report_signature(info, attached, kept, sign_key, passphrase, listed)
    if private is not None:
        from ..model_signature import write_signature
        from ..registry.verified import verified_tree

        tree = verified_tree(reg, info)  # the files behind the tree digest, never the record's list
        write_signature(model_signature, private, info.name, tree.files)
        click.echo(f"model-signing signature: {model_signature} (over {len(tree.files)} files of {info.ref})")
