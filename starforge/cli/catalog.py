"""``forge catalog build|serve``: the registry as static web pages (SPEC §19)."""

from __future__ import annotations

import json

import click

from .registry_options import registry_options


@click.command("build")
@registry_options()
@click.option("-o", "--output", "out", required=True, metavar="DIR",
              help="The catalogue's folder: new, empty, or built before (then only new versions are verified).")
@click.option("--json", "as_json", is_flag=True, help="Print what was built as JSON.")
def build(registry, insecure, ca_file, out, as_json) -> None:
    """Write a static web catalogue of a registry to DIR.

    An index page (search and filters) and a page per plugin, each version with its tree
    digest, signature verdict (checked now, under your trust file), yank, params,
    requires, targets, the change from the previous version and a line that adds it to an
    experiment; catalog.json holds the same. Open DIR/index.html from the file system, or
    serve DIR from any web server (also under a sub-path).

    \b
    Example:
      forge catalog build --registry oci://registry.lab:5000/forge -o site
      forge catalog serve site
    """
    from ..catalog.output import build as build_catalog
    from ..registry.factory import open_registry
    from ..terminal_text import shown

    result = build_catalog(open_registry(registry, insecure=insecure, ca_file=ca_file), out)
    if as_json:
        click.echo(json.dumps({"out": str(result.out), "plugins": result.plugins, "versions": result.versions,
                               "verified": result.verified, "reused": result.reused, "problems": result.problems,
                               "registry_state": result.registry_state}, indent=2, sort_keys=True))
        return
    click.echo(f"wrote the catalogue of {result.plugins} plugins ({result.versions} versions) to {shown(result.out)}")
    click.echo(f"  verified now: {result.verified}; unchanged since the last build: {result.reused}")
    click.echo(f"  registry state: {result.registry_state}")
    if result.problems:
        click.echo(f"  failed verification (shown as such): {shown(', '.join(result.problems))}")
    click.echo(f"  open {shown(result.out / 'index.html')}, or: forge catalog serve {shown(result.out)}")


@click.command("serve")
@click.argument("folder", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port on 127.0.0.1 (0: a free one).")
def serve(folder, port) -> None:
    """Preview a built catalogue on 127.0.0.1.

    Serves DIR over HTTP on the loopback address only, until interrupted.

    \b
    Example:
      forge catalog serve site --port 8080
    """
    from ..catalog.serve import HOST, make_server
    from ..terminal_text import shown

    server = make_server(folder, port)
    click.echo(f"serving {shown(folder)} at http://{HOST}:{server.server_address[1]}/ (Ctrl-C stops)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
