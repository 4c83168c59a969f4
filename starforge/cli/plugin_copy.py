"""``forge plugin copy REF --from URL --to URL [--lock DIR]``: mirror versions between registries."""

from __future__ import annotations

import json

import click

from ..errors import UsageError
from .output import plural
from .registry_options import tls_options


@click.command("copy")
@click.argument("ref", required=False)
@click.option("--from", "source", required=True, metavar="URL", help="Registry to copy from.")
@click.option("--to", "target", required=True, metavar="URL", help="Registry to copy into.")
@click.option("--lock", "lock_dir", type=click.Path(file_okay=False), help="Copy exactly the versions this experiment's lock names.")
@click.option("--require-signatures", is_flag=True,
              help="Copy only versions with a signature verified here (by a key trusted for the owner), and only those signatures.")
@tls_options
@click.option("--json", "as_json", is_flag=True, help="Print what was copied as JSON.")
def copy(ref, source, target, lock_dir, require_signatures, insecure, ca_file, as_json) -> None:
    """Copy plugin versions, with their signatures, from one registry to another by digest.

    REF is owner/name (every version), owner/name@VERSION or owner/name@SPECIFIER (every
    version it admits); --lock DIR copies the versions DIR's plugins.lock.json names. The
    target's immutability rules apply: the same content is a no-op, other content under an
    existing version is refused. Every signature is checked before it is copied: one that
    fails is refused; one whose owner has no trusted key here is copied as "signature not
    verified here"; none is dropped silently.

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
    src = open_registry(source, insecure=insecure, ca_file=ca_file)
    dst = open_registry(target, insecure=insecure, ca_file=ca_file)
    if lock_dir is not None:
        from ..experiment.config import load_experiment
        from ..experiment.lock import fresh_lock

        versions = locked_versions(src, fresh_lock(load_experiment(lock_dir)))
    else:
        versions = matching_versions(src, ref)
    copied = copy_versions(src, dst, versions, progress=transfer_progress, require_signatures=require_signatures)
    if as_json:
        out = [{"ref": c.version.ref, "tree_digest": c.version.tree_digest, "created": c.result.created,
                "signed": c.label == "signed", "signature": c.label,
                "signature_attached": c.result.signature_attached,
                "signatures": [{"key_ids": list(s.key_ids), "status": s.status, "copied": s.copied,
                                "why_not": s.why_not or None} for s in c.signatures],
                "yank_statements": c.yank_statements} for c in copied]
        click.echo(json.dumps({"from": src.url, "to": dst.url, "copied": out}, indent=2, sort_keys=True))
        return
    for c in copied:
        what = "copied" if c.result.created else "already there"
        label = "" if c.label == "unsigned" else f" ({c.label})"
        click.echo(f"{what} {c.version.ref} {c.version.tree_digest}{label}")
        for s in c.signatures:
            if not s.copied:
                click.echo(f"  signature by key {', '.join(s.key_ids) or '(no key id)'} not copied: {s.why_not}")
        if c.yank_statements:
            click.echo(f"  with its {plural(c.yank_statements, 'yank statement')}")
    click.echo(f"{plural(len(copied), 'version')} from {src.url} to {dst.url}")
