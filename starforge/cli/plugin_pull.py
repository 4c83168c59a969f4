"""``forge plugin pull REF [-o DIR] [--export DIR]``: fetch, verify and unpack one version, or
put its archive, Sigstore bundle and the signer's public key on disk."""

from __future__ import annotations

from pathlib import Path

import click

from .completion import complete_plugin_refs
from .registry_options import registry_options


@click.command("pull")
@click.argument("ref", shell_complete=complete_plugin_refs)
@click.option("-o", "--output", type=click.Path(file_okay=False), help="Directory to create (default: ./NAME).")
@registry_options()
@click.option("--require-signatures", is_flag=True, help="Refuse the version unless a trusted key signed it.")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Write the archive the registry serves, its Sigstore bundle and the signer's public key (PEM) into DIR "
                   "(for cosign or sigstore-js); unpacks nothing unless -o is given too.")
@click.option("--json", "as_json", is_flag=True, help="Print what was pulled (ref, digests, directory, signature status) as JSON.")
def pull(ref, output, registry, insecure, ca_file, require_signatures, export_dir, as_json) -> None:
    """Download REF through the cache and unpack it into a new directory.

    The archive is checked against its digest, the unpacked files against the tree
    digest, and the signature against the trust file when the owner has trusted keys.
    With --export DIR, the archive (the exact bytes the registry serves), the Sigstore
    bundle of the signature that verified and the trusted public key that verified it are
    written into DIR, so that tools other than forge can check them offline.

    \b
    Example:
      forge plugin pull alice/opsd-patch@1.2.0 -o /tmp/opsd-patch
      forge plugin pull alice/opsd-patch@~=1.2 --json
      forge plugin pull alice/opsd-patch@1.2.0 --export /tmp/opsd-patch-signed
    """
    from ..registry.factory import open_registry
    from ..registry.publish import with_default_owner
    from ..registry.resolve import resolve
    from ..registry.store import PluginStore

    reg = open_registry(registry, insecure=insecure, ca_file=ca_file)
    ref = with_default_owner(ref)
    info = resolve(reg, ref)
    store = PluginStore(reg)
    fetched = store.fetch_verified(info, require=require_signatures)
    status = fetched.status
    exported = None
    if export_dir is not None:
        from .signed_export import export_signed

        exported = export_signed(store, info, fetched.envelope, export_dir)
    dest = store.unpack(info, Path(output) if output else Path(info.name)) if output or exported is None else None
    if as_json:
        import json

        out = {
            "ref": info.ref,
            "owner": info.owner,
            "name": info.name,
            "version": info.version,
            "request": ref,
            "tree_digest": info.tree_digest,
            "artifact_digest": info.artifact_digest,
            "directory": str(Path(dest).resolve()) if dest is not None else None,
            "registry": reg.url,
            "signature": {"status": status},
        }
        if exported is not None:
            out["export"] = {"archive": str(exported.archive), "bundle": exported.bundle and str(exported.bundle),
                             "public_key": exported.public_key and str(exported.public_key), "key_id": exported.key_id}
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    if dest is not None:
        click.echo(f"pulled {info.ref} {info.tree_digest} into {dest} (signature: {status})")
    if exported is not None:
        export_lines(info, status, exported)


def export_lines(info, status: str, exported) -> None:
    """What --export wrote, and the commands that check it without forge."""
    from ..cluster.dsse import PREDICATE_TYPE
    from .output import note

    click.echo(f"archive: {exported.archive} ({info.artifact_digest}; signature: {status})")
    if exported.bundle is None:
        note(f"{info.ref} is not signed: no Sigstore bundle written")
        return
    click.echo(f"bundle:  {exported.bundle}")
    if exported.public_key is None:
        note(f"no public key written: no key that signed it is trusted for owner {info.owner} here")
        return
    click.echo(f"key:     {exported.public_key} (key id {exported.key_id})")
    click.echo(f"check it with: cosign verify-blob-attestation --key {exported.public_key} --bundle {exported.bundle} "
               f"--insecure-ignore-tlog --type {PREDICATE_TYPE} {exported.archive}")
