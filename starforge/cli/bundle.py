"""``forge bundle create|verify|push``: carry a locked experiment's plugins across an air gap."""

from __future__ import annotations

import json

import click

from .output import note, plural
from .registry_options import registry_options

BUILTINS_NOTE = "built-in plugins (common/algorithms/) are not in the bundle: they travel with the recipe"


@click.command("create")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Bundle file to write.")
@registry_options("Registry to read from (default: FORGE_REGISTRY, forge.yaml, config).")
@click.option("--json", "as_json", is_flag=True, help="Print what the bundle holds as JSON.")
def create(directory, output, registry, insecure, ca_file, as_json) -> None:
    """Write every plugin version the experiment's lock names, and the lock, into one file.

    The file is an OCI image layout in an uncompressed tar: the same manifests, config and
    archive blobs and signatures an OCI registry holds, each version named owner/name:version.
    The same lock and registry content give the same bytes. Built-in plugins travel with
    the recipe, not the bundle.

    \b
    Example:
      forge bundle create experiments/exp7 -o exp7.bundle.tar
    """
    from ..bundle.create import create_bundle
    from ..registry.progress import transfer_progress

    made = create_bundle(directory, output, registry=registry, insecure=insecure, ca_file=ca_file, progress=transfer_progress)
    if as_json:
        out = {
            "bundle": str(made.path),
            "size": made.size,
            "plugins": [p.__dict__ for p in made.plugins],
            "builtins_not_bundled": list(made.builtins),
        }
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for p in made.plugins:
        click.echo(f"bundled {p.ref} {p.tree_digest}" + (" (signed)" if p.signed else ""))
    click.echo(f"wrote {made.path} ({plural(len(made.plugins), 'plugin')} and the lock, {made.size} bytes)")
    if made.builtins:
        note(f"note: {BUILTINS_NOTE}: {', '.join(made.builtins)}")


@click.command("verify")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--require-signatures", is_flag=True, help="Refuse any plugin without a signature by a trusted key.")
@click.option("--json", "as_json", is_flag=True, help="Print what was verified as JSON.")
def verify(bundle, require_signatures, as_json) -> None:
    """Check every blob digest, every tree digest and every signature of a bundle.

    Signatures are checked against the trust file: an owner with trusted keys must have a
    valid signature; --require-signatures extends that to every owner. Needs no registry.

    \b
    Example:
      forge bundle verify exp7.bundle.tar --require-signatures
    """
    from ..bundle.verify import verify_bundle
    from ..registry.progress import transfer_progress

    checked = verify_bundle(bundle, require_signatures=require_signatures, progress=transfer_progress)
    if as_json:
        click.echo(json.dumps({"bundle": str(checked.path), "blobs": checked.blobs, "plugins": [_plugin_json(p) for p in checked.plugins]},
                              indent=2, sort_keys=True))
        return
    for p in checked.plugins:
        click.echo(f"ok {p.info.ref} {p.info.tree_digest} (signature: {p.signature})")
    click.echo(f"verified {checked.path}: {plural(len(checked.plugins), 'plugin')}, {plural(checked.blobs, 'blob')}")


@click.command("push")
@click.argument("bundle", type=click.Path(dir_okay=False))
@registry_options("Registry to import into (default: FORGE_REGISTRY, config).")
@click.option("--require-signatures", is_flag=True, help="Refuse any plugin without a signature by a trusted key.")
@click.option("--json", "as_json", is_flag=True, help="Print what was pushed as JSON.")
def push(bundle, registry, insecure, ca_file, require_signatures, as_json) -> None:
    """Verify a bundle, then publish its plugin versions to a registry.

    Published versions are immutable there too: the same content again is a no-op; other
    content under an existing version is refused, naming both digests. The experiment's lock
    then works against that registry unchanged (forge lock --check, forge submit).

    \b
    Example:
      forge bundle push exp7.bundle.tar --registry oci://registry.internal:5000/forge
    """
    from ..bundle.push import push_bundle
    from ..registry.progress import transfer_progress

    pushed = push_bundle(bundle, registry, insecure=insecure, ca_file=ca_file, require_signatures=require_signatures, progress=transfer_progress)
    if as_json:
        plugins = [{**_plugin_json(p), "created": r.created, "signature_attached": r.signature_attached}
                   for p, r in zip(pushed.bundle.plugins, pushed.results)]
        click.echo(json.dumps({"bundle": str(pushed.bundle.path), "registry": pushed.registry, "plugins": plugins},
                              indent=2, sort_keys=True))
        return
    for p, r in zip(pushed.bundle.plugins, pushed.results):
        what = "pushed" if r.created else "already there"
        extra = " (signature attached)" if r.signature_attached else ""
        click.echo(f"{what} {p.info.ref} {p.info.tree_digest}{extra}")
    created = sum(1 for r in pushed.results if r.created)
    if created:
        present = len(pushed.results) - created
        also = f" ({present} already there)" if present else ""
        click.echo(f"imported {plural(created, 'plugin')} into {pushed.registry}{also}")
    else:
        click.echo(f"nothing to import: {'the plugin is' if len(pushed.results) == 1 else f'all {len(pushed.results)} plugins are'} already in {pushed.registry}")


def _plugin_json(p) -> dict:
    return {"ref": p.info.ref, "tree_digest": p.info.tree_digest, "artifact_digest": p.info.artifact_digest,
            "manifest_digest": p.manifest_digest, "signature": {"status": p.signature}}
