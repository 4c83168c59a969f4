"""``forge plugin copy REF --from URL --to URL [--lock DIR]``: mirror versions between registries."""

from __future__ import annotations

import json

import click

from ..errors import UsageError
from .output import plural


@click.command("copy")
@click.argument("ref", required=False)
@click.option("--from", "source", required=True, metavar="URL", help="Registry to copy from.")
@click.option("--to", "target", required=True, metavar="URL", help="Registry to copy into.")
@click.option("--lock", "lock_dir", type=click.Path(file_okay=False), help="Copy exactly the versions this experiment's lock names.")
@click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")
@click.option("--json", "as_json", is_flag=True, help="Print what was copied as JSON.")
def copy(ref, source, target, lock_dir, insecure, as_json) -> None:
    """Copy plugin versions, with their signatures, from one registry to another by digest.

    REF is owner/name (every version), owner/name@VERSION or owner/name@SPECIFIER (every
    version it admits); --lock DIR copies the versions DIR's plugins.lock.json names. The
    target's immutability rules apply: the same content is a no-op, other content under an
    existing version is refused.

    \b
    Example:
      forge plugin copy alice/opsd-patch --from oci://ghcr.io/acme/forge --to /srv/forge-registry
      forge plugin copy --lock experiments/exp7 --from oci://ghcr.io/acme/forge --to oci://mirror:5000/forge
    """
    from ..bundle.mirror import copy_versions, locked_versions, matching_versions
    from ..registry.factory import open_registry
    from ..registry.progress import transfer_progress

    if (ref is None) == (lock_dir is None):
        raise UsageError("give either REF or --lock DIR", hint="forge plugin copy alice/opsd-patch --from URL --to URL")
    src = open_registry(source, insecure=insecure)
    dst = open_registry(target, insecure=insecure)
    if lock_dir is not None:
        from ..experiment.config import load_experiment
        from ..experiment.lock import fresh_lock

        versions = locked_versions(src, fresh_lock(load_experiment(lock_dir)))
    else:
        versions = matching_versions(src, ref)
    copied = copy_versions(src, dst, versions, progress=transfer_progress)
    if as_json:
        out = [{"ref": c.version.ref, "tree_digest": c.version.tree_digest, "created": c.result.created,
                "signed": c.version.signed, "signature_attached": c.result.signature_attached} for c in copied]
        click.echo(json.dumps({"from": src.url, "to": dst.url, "copied": out}, indent=2, sort_keys=True))
        return
    for c in copied:
        what = "copied" if c.result.created else "already there"
        click.echo(f"{what} {c.version.ref} {c.version.tree_digest}" + (" (signed)" if c.version.signed else ""))
    click.echo(f"{plural(len(copied), 'version')} from {src.url} to {dst.url}")
