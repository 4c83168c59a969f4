"""``forge lock [DIR] [--check] [--offline] [--upgrade [NAME]] [--accept-signature NAME] [--require-signatures]``."""

from __future__ import annotations

import json

import click

from ..errors import UsageError
from .output import note
from .registry_options import registry_options


class LockCommand(click.Command):
    """``forge lock`` takes a directory, and ``forge lock diff …`` is a command of its own:
    a first argument ``diff`` hands the rest to :func:`starforge.cli.lock_diff.diff`."""

    def make_context(self, info_name, args, parent=None, **extra):
        if args and args[0] == "diff":
            from .lock_diff import diff

            return diff.make_context(f"{info_name} diff", list(args[1:]), parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)


@click.command("lock", cls=LockCommand)
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--check", is_flag=True, help="Write nothing; fail when the lock is stale or the registry serves other content.")
@click.option("--offline", is_flag=True, help="With --check: compare the lock with forge.yaml alone, without the registry.")
@click.option(
    "--upgrade",
    "upgrade",
    is_flag=False,
    flag_value="*",
    default=None,
    metavar="[NAME]",
    help=(
        "Re-resolve plugin NAME (a plugin forge.yaml requests), or, without NAME, every plugin, to the "
        "newest version its request admits. The value after --upgrade is always a plugin name: "
        "write DIR before it (forge lock DIR --upgrade [NAME])."
    ),
)
@click.option(
    "--accept-signature",
    "accept_signature",
    multiple=True,
    metavar="NAME",
    help=(
        "Record the signature the registry now serves for plugin NAME (or its absence), keeping its "
        "version: after its publisher re-signed it or rotated keys. Repeatable."
    ),
)
@click.option("--require-signatures", is_flag=True, help="Refuse any plugin without a signature by a trusted key.")
@registry_options("Registry to resolve against (default: FORGE_REGISTRY, forge.yaml, config).")
@click.option("--json", "as_json", is_flag=True, help="Print the lock (and what changed) as JSON.")
def lock(directory, check, offline, upgrade, accept_signature, require_signatures, registry, insecure, ca_file, as_json) -> None:
    """Resolve forge.yaml's plugins into plugins.lock.json.

    Each plugin is pinned to an exact version and its digests.

    A locked plugin keeps its version while forge.yaml's request admits it; a request
    edited so that it no longer does is re-resolved ("request changed"); otherwise only
    --upgrade changes a locked version. The file is rewritten only when its content
    changes, and every change is printed (--json: "changes"). --check (for CI) writes
    nothing and fails, saying why and what to run, whenever 'forge lock' would change the
    file or the registry serves other content for a locked version (a moved tag). Editing
    config: never makes the lock stale. "signature verified" is decided by this machine's
    trust file and never written to the lock (--json: "signatures"). A plugin locked as
    signed by a key needs the registry to keep serving a valid signature by that key;
    --accept-signature NAME records a changed one.

    \b
    Example:
      forge lock examples/quickstart
      forge lock --check              # in CI
      forge lock --upgrade opsd-patch
      forge lock --accept-signature opsd-patch  # its publisher re-signed it
      forge lock experiments/exp7 --upgrade   # every plugin of exp7

    'forge lock diff' shows what changed between two locks (see 'forge lock diff --help').
    """
    from ..experiment.config import load_experiment
    from ..experiment.lock import ALL, check_lock, lock_experiment, open_experiment_registry

    if offline and not check:
        raise UsageError("--offline only goes with --check", hint="forge lock --check --offline")
    if check and upgrade:
        raise UsageError("--check writes nothing, so it cannot --upgrade")
    if check and accept_signature:
        raise UsageError("--check writes nothing, so it cannot --accept-signature",
                         hint=f"forge lock --accept-signature {accept_signature[0]}")
    if upgrade not in (None, "*"):
        _refuse_directory_as_upgrade_name(upgrade, directory)
    exp = load_experiment(directory)
    if check:
        reg = None if offline else open_experiment_registry(exp, registry, insecure=insecure, ca_file=ca_file)
        result = check_lock(exp, reg, require_signatures=require_signatures)
        if as_json:
            click.echo(json.dumps({"ok": True, "lock": result.to_dict()}, indent=2, sort_keys=True))
            return
        where = "forge.yaml" if reg is None else f"forge.yaml and registry {reg.url}"
        click.echo(f"ok: {exp.lock_path} matches {where} ({len(result.plugins)} plugin{'s' if len(result.plugins) != 1 else ''})")
        return
    reg = open_experiment_registry(exp, registry, insecure=insecure, ca_file=ca_file)
    locked = lock_experiment(exp, reg, upgrade=ALL if upgrade == "*" else upgrade, require_signatures=require_signatures,
                             accept_signature=set(accept_signature))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "written": locked.written,
                    "changes": locked.changes,
                    "shadowed": locked.shadowed,
                    "signatures": locked.verdicts,
                    "lock": locked.lock.to_dict(),
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    for line in locked.changes:
        click.echo(line)
    for entry in locked.lock.plugins:
        remark = f"; {entry.note}" if entry.note else ""
        verdict = locked.verdicts.get(entry.name, "unsigned")
        click.echo(f"  {entry.ref}  {entry.tree_digest}  ({entry.plugin.kind}, {entry.plugin.load}, signature {verdict}{remark})")
    for name in locked.shadowed:
        note(f"note: built-in {name} is shadowed by the locked package of the same name")
    state = "wrote" if locked.written else "unchanged:"
    click.echo(f"{state} {exp.lock_path}")


def _refuse_directory_as_upgrade_name(value: str, directory: str) -> None:
    """``--upgrade VALUE`` takes VALUE as a plugin name; when it is not one of DIRECTORY's
    plugins but names an existing directory, the user meant the experiment directory."""
    from pathlib import Path

    from ..errors import ForgeError
    from ..experiment.config import load_experiment

    if not Path(value).is_dir():
        return
    try:
        names = {r.name for r in load_experiment(directory).plugins}
    except ForgeError:
        names = set()
    if value in names:
        return
    raise UsageError(
        f"--upgrade {value}: the value after --upgrade is a plugin name, and '{value}' is a directory, "
        "not a plugin forge.yaml requests",
        hint=f"to upgrade every plugin of it: forge lock {value} --upgrade; one plugin: forge lock --upgrade NAME {value}",
    )
