"""``forge plugin pull REF [-o DIR]``: fetch, verify and unpack one version."""

from __future__ import annotations

from pathlib import Path

import click

from .completion import complete_plugin_refs


@click.command("pull")
@click.argument("ref", shell_complete=complete_plugin_refs)
@click.option("-o", "--output", type=click.Path(file_okay=False), help="Directory to create (default: ./NAME).")
@click.option("--registry", metavar="URL", help="Directory path or oci://host[:port]/prefix (default: FORGE_REGISTRY, config).")
@click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")
@click.option("--require-signatures", is_flag=True, help="Refuse the version unless a trusted key signed it.")
@click.option("--json", "as_json", is_flag=True, help="Print what was pulled (ref, digests, directory, signature status) as JSON.")
def pull(ref, output, registry, insecure, require_signatures, as_json) -> None:
    """Download REF through the cache and unpack it into a new directory.

    The archive is checked against its digest, the unpacked files against the tree
    digest, and the signature against the trust file when the owner has trusted keys.

    \b
    Example:
      forge plugin pull alice/opsd-patch@1.2.0 -o /tmp/opsd-patch
      forge plugin pull alice/opsd-patch@~=1.2 --json
    """
    from ..registry.cache import materialize, remember_verified
    from ..registry.factory import open_registry
    from ..registry.resolve import resolve
    from ..signing import verify_published_envelope

    reg = open_registry(registry, insecure=insecure)
    from .plugin_show import with_default_owner

    ref = with_default_owner(ref)
    info = resolve(reg, ref)
    status = remember_verified(info, verify_published_envelope(reg, info, require=require_signatures))
    dest = materialize(reg, info, Path(output) if output else Path(info.name))
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
            "directory": str(Path(dest).resolve()),
            "registry": reg.url,
            "signature": {"status": status},
        }
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    click.echo(f"pulled {info.ref} {info.tree_digest} into {dest} (signature: {status})")
