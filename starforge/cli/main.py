"""Entry point of ``forge``: a lazy click group so ``forge --help`` imports no command's code.

Each command lives in its own module under ``starforge.cli`` and is imported only when
invoked. User errors (:class:`ForgeError`) become one ``error: …`` line plus a hint and the
error's exit code; tracebacks only with ``--debug`` or ``FORGE_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from .. import __version__
from ..errors import ForgeError, UsageError

# command path -> "module:attribute" (modules relative to starforge.cli)
COMMANDS = {
    "plugin": {
        "init": "plugin_init:init",
        "check": "plugin_check:check",
        "digest": "plugin_digest:digest",
        "pack": "plugin_pack:pack",
        "publish": "plugin_publish:publish",
        "list": "plugin_list:list_plugins",
        "show": "plugin_show:show",
        "pull": "plugin_pull:pull",
        "add": "plugin_edit:add",
        "remove": "plugin_edit:remove",
    },
    "lock": "lock:lock",
    "submit": "submit:submit",
    "jobs": {
        "list": "jobs:list_jobs",
        "show": "jobs:show",
        "status": "jobs:status",
        "logs": "jobs:logs",
        "cancel": "jobs:cancel",
        "rm": "jobs:rm",
        "prune": "jobs:prune",
    },
    "key": {"generate": "keys:generate", "list": "keys:list_keys"},
    "trust": {"add": "trust:add", "remove": "trust:remove", "list": "trust:list_trust"},
}

GROUP_EXAMPLES = {
    "plugin": "forge plugin init opsd-patch && forge plugin publish opsd-patch",
    "jobs": "forge jobs list --json && forge jobs logs JOB_ID -f",
    "key": "forge key generate --name release",
    "trust": "forge trust add alice ~/.config/starforge/keys/release.pub",
}

HELP = {
    "plugin": "Author, check, pack, publish and fetch plugins.",
    "plugin init": "Create a plugin from a template.",
    "plugin check": "Run the static checks on a plugin directory.",
    "plugin digest": "Print the tree digest of a plugin directory.",
    "plugin pack": "Write the deterministic package archive of a plugin.",
    "plugin publish": "Check, pack and publish a plugin to a registry.",
    "plugin list": "List published plugins.",
    "plugin show": "Show one published plugin version.",
    "plugin pull": "Fetch a plugin version, verified, into a directory.",
    "plugin add": "Add a plugin request to forge.yaml and the lock.",
    "plugin remove": "Remove a plugin from forge.yaml and the lock.",
    "lock": "Resolve forge.yaml's plugins into plugins.lock.json.",
    "submit": "Build a JobSpec from the locked experiment and run it on a backend.",
    "jobs": "List, inspect, follow and cancel submitted jobs.",
    "jobs list": "List submitted jobs.",
    "jobs show": "Show a job's status, exit code and provenance.",
    "jobs logs": "Print (or follow) a job's log.",
    "jobs cancel": "Cancel a running job.",
    "jobs status": "Print a job's status and exit code.",
    "jobs rm": "Delete ended jobs.",
    "jobs prune": "Delete ended jobs older than an age.",
    "key": "Manage signing keys.",
    "key generate": "Generate an Ed25519 signing key pair.",
    "key list": "List signing keys with their ids.",
    "trust": "Manage which keys are trusted for which owners.",
    "trust add": "Trust a public key for an owner.",
    "trust remove": "Stop trusting an owner's key (or all its keys).",
    "trust list": "List trusted keys by owner.",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args, table: dict, path: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.table = table
        self.path = path

    def _key(self, name: str) -> str:
        return f"{self.path} {name}".strip()

    def list_commands(self, ctx):
        return sorted(self.table)

    def get_command(self, ctx, name):
        target = self.table.get(name)
        if target is None:
            return None
        if isinstance(target, dict):
            key = self._key(name)
            example = f"\n\n\b\nExample:\n  {GROUP_EXAMPLES[key]}" if key in GROUP_EXAMPLES else ""
            return LazyGroup(name=name, table=target, path=key, help=HELP.get(key, "") + example)
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(f"starforge.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"starforge.cli.{module_name}":
                raise
            return _unavailable(name, HELP.get(self._key(name), ""))
        return getattr(module, attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, HELP.get(self._key(name), "")) for name in sorted(self.table)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _unavailable(name: str, help_text: str) -> click.Command:
    def run() -> None:
        raise ForgeError(f"'{name}' is not available in this build of starforge-core {__version__}")

    return click.Command(name=name, callback=run, help=help_text)


@click.group(cls=LazyGroup, table=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="forge", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors (also FORGE_DEBUG=1).")
def forge(debug: bool) -> None:
    """StarForge: declared, versioned, digest-locked plugins for RL training jobs.

    \b
    Example:
      forge plugin init opsd-patch && forge plugin check opsd-patch
    """
    if debug:
        os.environ["FORGE_DEBUG"] = "1"


def report(exc: ForgeError) -> int:
    """Print one ``error:`` line (and a ``hint:`` line) to stderr; return the exit code."""
    click.echo(f"error: {exc.message}", err=True)
    if exc.hint:
        click.echo(f"hint: {exc.hint}", err=True)
    return exc.exit_code


def main(argv: list | None = None) -> int:
    debug = os.environ.get("FORGE_DEBUG") == "1" or "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        code = forge.main(args=argv, prog_name="forge", standalone_mode=False)
        # without standalone mode click returns the code of click.exceptions.Exit instead of exiting
        if isinstance(code, int) and not isinstance(code, bool) and code:
            sys.exit(code)
    except ForgeError as exc:
        if debug:
            raise
        sys.exit(report(exc))
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "forge"
        sys.exit(report(UsageError(exc.format_message(), hint=f"see '{command} --help'")))
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    return 0


if __name__ == "__main__":  # pragma: no cover
    main()
