"""``forge plugin pack [DIR] [-o FILE]``: check, then write the deterministic archive."""

from __future__ import annotations

import json

import click


@click.command(name="pack")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Archive path (default: <name>-<version>.tar.gz here).")
@click.option("--strict", is_flag=True, help="Treat check warnings as errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def pack(directory: str, output: str | None, strict: bool, as_json: bool) -> None:
    """Check a plugin directory and pack it into a deterministic tar.gz.

    Packing the same files twice gives byte-identical archives. Prints the archive path,
    the tree digest (the plugin's identity) and the archive's own sha256.

    \b
    Example:
      forge plugin pack opsd-patch -o /tmp/opsd-patch.tar.gz
    """
    from ..authoring.pack import pack_plugin

    packed = pack_plugin(directory, output, strict=strict)
    if as_json:
        click.echo(json.dumps(packed.to_dict(), indent=2, sort_keys=True))
        return
    for warning in packed.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(packed.path)
    click.echo(f"tree digest:     {packed.tree_digest}")
    click.echo(f"artifact digest: {packed.artifact_digest}")
