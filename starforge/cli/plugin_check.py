"""``forge plugin check [DIR] [--strict] [--json]``: the static checks, alone."""

from __future__ import annotations

import json

import click

from ..errors import CheckError
from .output import plural


@click.command("check")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--strict", is_flag=True, help="Treat every warning as an error.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(directory: str, strict: bool, as_json: bool) -> None:
    """Check a plugin directory without importing or running its code.

    Validates plugin.yaml, the entrypoint and its signature, that every source compiles
    on the oldest Python requires.python admits, that no top-level name shadows a real
    module, and the file rules. Exits non-zero when there is an error.

    \b
    Example:
      forge plugin check opsd-patch --strict
    """
    from ..authoring.checks import check_plugin

    report = check_plugin(directory, strict=strict)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        if not report.ok:
            n = len(report.errors)
            raise CheckError(f"{directory}: {n} check{'s' if n > 1 else ''} failed", hint="see \"errors\" in the JSON report")
        return
    for finding in report.warnings:
        click.echo(f"warning: {finding.describe(directory)}", err=True)
        if finding.hint:
            click.echo(f"  hint: {finding.hint}", err=True)
    for finding in report.errors:
        click.echo(f"error: {finding.describe(directory)}", err=True)
        if finding.hint:
            click.echo(f"  hint: {finding.hint}", err=True)
    if not report.ok:
        n = len(report.errors)
        raise CheckError(
            f"{directory}: {n} check{'s' if n > 1 else ''} failed",
            hint="fix the errors above and run 'forge plugin check' again",
        )
    m = report.manifest
    assert m is not None  # the checks passed
    names = ", ".join(report.top_level) or "-"
    click.echo(f"ok: {m.name} {m.version} ({m.kind}, {m.load}); {plural(len(report.files), 'file')}; top-level: {names}")
    click.echo(f"digest: {report.digest}")
