"""``forge plugin add REF`` / ``forge plugin remove NAME``: edit forge.yaml and plugins.lock.json together."""

from __future__ import annotations

import json

import click

from .registry_options import registry_options


def _report(result, directory: str, as_json: bool = False) -> None:
    if as_json:
        from pathlib import Path

        out = {
            "action": result.action,
            "request": result.request,
            "forge_yaml_written": result.yaml_written,
            "lock_written": bool(result.lock is not None and result.lock.written),
            "changes": list(result.changes),
            "directory": str(Path(directory).resolve()),
        }
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for line in result.changes:
        click.echo(line)
    if result.lock is not None:
        state = "wrote" if result.lock.written else "unchanged:"
        click.echo(f"{'wrote' if result.yaml_written else 'unchanged:'} forge.yaml; {state} plugins.lock.json")


@click.command("add")
@click.argument("ref")
@click.option("--dir", "directory", default=".", type=click.Path(file_okay=False), help="Experiment directory (default: .).")
@registry_options("Registry to resolve against.")
@click.option("--require-signatures", is_flag=True, help="Refuse any plugin without a signature by a trusted key.")
@click.option("--json", "as_json", is_flag=True, help="Print {action, request, changes, forge_yaml_written, lock_written} as JSON.")
def add(ref: str, directory: str, registry: str | None, insecure: bool, ca_file: str | None, require_signatures: bool, as_json: bool) -> None:
    """Request a plugin in forge.yaml and lock it.

    forge.yaml keeps its comments and layout.

    A new plugin is appended (loaded last); a plugin already requested gets the new
    request in its place and is re-resolved.

    \b
    Example:
      forge plugin add alice/opsd-patch@~=1.2
      forge plugin add alice/opsd-patch@1.3.0 --dir examples/quickstart
    """
    from ..experiment.edit import add_plugin

    result = add_plugin(directory, ref, registry, insecure=insecure, ca_file=ca_file, require_signatures=require_signatures)
    if result.action == "unchanged" and not as_json:
        click.echo(f"{result.request} is already requested")
    _report(result, directory, as_json)


@click.command("remove")
@click.argument("name")
@click.option("--dir", "directory", default=".", type=click.Path(file_okay=False), help="Experiment directory (default: .).")
@registry_options("Registry to resolve against, when the lock must be redone.")
@click.option("--json", "as_json", is_flag=True, help="Print {action, request, changes, forge_yaml_written, lock_written} as JSON.")
def remove(name: str, directory: str, registry: str | None, insecure: bool, ca_file: str | None, as_json: bool) -> None:
    """Remove a plugin from forge.yaml and the lock.

    forge.yaml keeps its comments and layout.

    \b
    Example:
      forge plugin remove opsd-patch
    """
    from ..experiment.edit import remove_plugin

    _report(remove_plugin(directory, name, registry, insecure=insecure, ca_file=ca_file), directory, as_json)
