"""``forge plugin init NAME [--kind ...] [--load ...] [--dir PATH]``: start a plugin from a template."""

from __future__ import annotations

import click

from ..package_format.manifest import KINDS, LOADS

# how a plugin of each other kind runs (docs/kinds.md): no load mode applies to it
HOW_RUN = {
    "environment": "the trainer builds it with starforge.plugins.load_environment",
    "data-prep": "run on the laptop with forge prep",
}


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
    from ..errors import UsageError

    given = click.get_current_context().get_parameter_source("load")
    if kind != "algorithm" and given is not None and given.name == "COMMANDLINE":
        raise UsageError(f"--load applies to algorithm plugins; a {kind} plugin is never installed at job start",
                         hint=f"drop --load ({HOW_RUN[kind]})")
    dest = init_plugin(name, kind, load, directory)
    how = f"{kind}, {load}" if kind == "algorithm" else f"{kind}: {HOW_RUN[kind]}"
    click.echo(f"created {dest}/ ({how}): plugin.yaml, {module_name(name)}.py, README.md, tests/")
    click.echo(f"next: edit {dest}/{module_name(name)}.py, then 'forge plugin check {dest}'")
