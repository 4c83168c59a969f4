"""``forge plugin init NAME [--kind ...] [--load ...] [--dir PATH]``: start a plugin from a template."""

from __future__ import annotations

import click

from ..manifest import KINDS, LOADS


@click.command("init")
@click.argument("name")
@click.option("--kind", type=click.Choice(KINDS), default="algorithm", show_default=True, help="What the plugin is.")
@click.option("--load", type=click.Choice(LOADS), default="eager", show_default=True,
              help="eager: install(params) at job start; deferred: install(params, **ctx) called by the training entrypoint.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Directory to create (default: ./NAME). Must not exist or be empty.")
def init(name: str, kind: str, load: str, directory: str | None) -> None:
    """Create a new plugin NAME from a template.

    It holds plugin.yaml, a module named after it, a README and tests.

    \b
    Example:
      forge plugin init opsd-patch --load deferred && forge plugin check opsd-patch
    """
    from ..authoring.init import init_plugin, module_name

    dest = init_plugin(name, kind, load, directory)
    click.echo(f"created {dest}/ ({kind}, {load if kind == 'algorithm' else 'eager'}): plugin.yaml, {module_name(name)}.py, README.md, tests/")
    click.echo(f"next: edit {dest}/{module_name(name)}.py, then 'forge plugin check {dest}'")
