"""``forge plugin digest [DIR]``: the tree digest of the files ``pack`` would include."""

from __future__ import annotations

import json

import click


@click.command(name="digest")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the digest and the per-file sha256 map as JSON.")
def digest(directory: str, as_json: bool) -> None:
    """Print the tree digest (sf1:...) of a plugin directory.

    Only the files that would be packed count: tool debris (__pycache__/, *.pyc, .git/, ...)
    and paths matched by .forgeignore are left out, so local test runs do not change it.

    \b
    Example:
      forge plugin digest opsd-patch
      forge plugin digest --json . | jq -r .digest
    """
    from ..authoring.files import plugin_files
    from ..cluster.digest import digest_of_map, file_map

    files = file_map(directory, plugin_files(directory))
    value = digest_of_map(files)
    if as_json:
        click.echo(json.dumps({"digest": value, "files": files}, indent=2, sort_keys=True))
    else:
        click.echo(value)
