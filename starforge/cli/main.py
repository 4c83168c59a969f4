"""Entry point of ``forge``: a lazy click group so ``forge --help`` imports no command's code.

Each command lives in its own module under ``starforge.cli`` and is imported only when
invoked; its docstring is its help, and the command table below carries the first
paragraph of that docstring as data for the command lists (a test keeps the two equal). A
group is an entry of ``COMMANDS`` whose value is a dict; its summary and example are in
``GROUPS``. User errors (:class:`ForgeError`) become one ``error: …`` line plus a hint and
the error's exit code; tracebacks only with ``--debug`` or ``FORGE_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NamedTuple

import click

from .. import __version__
from ..cluster.jobdir_layout import WORK_DIR
from ..errors import ForgeError, UsageError
from .output import colour_forced, error_lines


class Command(NamedTuple):
    """A command of the table: where its code is, and the one line the command lists show."""

    target: str  # "module:attribute", the module relative to starforge.cli
    summary: str  # the first paragraph of the command's docstring (a test keeps the two equal)


# command path -> Command; a group is a dict. The summaries are data, so `forge --help`
# lists every command without importing any of them.
COMMANDS = {
    "plugin": {
        "init": Command("plugin_init:init", 'Create a new plugin NAME from a template.'),
        "check": Command("plugin_check:check", 'Check a plugin directory without importing or running its code.'),
        "digest": Command("plugin_digest:digest", 'Print the tree digest (sf1:...) of a plugin directory.'),
        "pack": Command("plugin_pack:pack", 'Check a plugin directory and pack it into a deterministic tar.gz.'),
        "publish": Command("plugin_publish:publish", 'Check, pack and publish a plugin as OWNER/NAME@VERSION.'),
        "list": Command("plugin_list:list_plugins", 'List published plugins (of OWNER) and their versions.'),
        "show": Command("plugin_show:show", 'Show the version REF resolves to.'),
        "pull": Command("plugin_pull:pull", 'Download REF through the cache and unpack it into a new directory.'),
        "sign": Command("plugin_sign:sign", 'Add your signature to the published version REF.'),
        "yank": Command("plugin_yank:yank", 'Withdraw the published version REF from being locked or run again.'),
        "unyank": Command("plugin_yank:unyank", 'Withdraw the yank of the published version REF.'),
        "add": Command("plugin_edit:add", 'Request a plugin in forge.yaml and lock it.'),
        "remove": Command("plugin_edit:remove", 'Remove a plugin from forge.yaml and the lock.'),
        "copy": Command("plugin_copy:copy", 'Copy plugin versions, with their signatures, from one registry to another by digest.'),
        "diff": Command("plugin_diff:diff", 'Show what changed between two versions of a plugin.'),
    },
    "bundle": {
        "create": Command("bundle:create", "Write every plugin version the experiment's lock names, and the lock, into one file."),
        "verify": Command("bundle:verify", 'Check every blob digest, every tree digest and every signature of a bundle.'),
        "push": Command("bundle:push", 'Verify a bundle, then publish its plugin versions to a registry.'),
    },
    "lock": Command("lock:lock", "Resolve forge.yaml's plugins into plugins.lock.json."),
    "submit": Command("submit:submit", 'Stage the locked experiment as a job and run it.'),
    "plan": Command("plan:plan", 'Show what the job would patch, without running it.'),
    "prep": Command("prep:prep", 'Run a data-prep plugin over a JSONL file, on this machine.'),
    "trace": Command("trace:trace", 'Name the job(s) that wrote PATH, a file or a directory copied anywhere.'),
    "audit": Command("audit:audit", 'List every job that ran a version yanked now, with the outputs it wrote.'),
    "jobs": {
        "list": Command("jobs:list_jobs", 'List submitted jobs, newest last, with status and exit code.'),
        "show": Command("jobs:show", "Show a job's status, exit code, directory and provenance."),
        "status": Command("jobs:status", "Print a job's status (and exit code once it has ended)."),
        "logs": Command("jobs:logs", "Print (or follow) a job's output."),
        "cancel": Command("jobs:cancel", 'Cancel a running job.'),
        "rm": Command("jobs:rm", 'Delete ended jobs: their records and their staged job directories.'),
        "prune": Command("jobs:prune", 'Delete ended jobs created longer ago than AGE, or the records of jobs whose directory is gone.'),
        "replay": Command("jobs:replay", 'Run again exactly what job ID ran, as a new job.'),
        "outputs": Command("jobs_outputs:outputs", f'List the files job ID wrote: {WORK_DIR}/ and its declared outputs.'),
    },
    "key": {
        "generate": Command("keys:generate", "Make a signing key pair (Ed25519, or --type ecdsa-p256) for 'forge plugin publish --sign'."),
        "list": Command("keys:list_keys", 'List your signing keys and their key ids.'),
        "export": Command("keys:export", "Print (or write) the public key of your key NAME as PEM, for 'forge trust add' or cosign."),
    },
    "trust": {
        "add": Command("trust:add", 'Trust the public key in file PUBKEY for plugins published by OWNER.'),
        "remove": Command("trust:remove", 'Stop trusting a key (or every key) of OWNER.'),
        "list": Command("trust:list_trust", 'List owners and the key ids trusted for each.'),
    },
    "catalog": {
        "build": Command("catalog:build", 'Write a static web catalogue of a registry to DIR.'),
        "serve": Command("catalog:serve", 'Preview a built catalogue on 127.0.0.1.'),
    },
    "config": Command("config_show:config", 'Show the effective home, registry, owner, keys and trust file, and where each came from.'),
    "completion": Command("completion:completion", 'Print the shell completion script for SHELL.'),
}

# other names a user reaches for (as docker, kubectl and uv spell them): group path -> alias -> command
ALIASES = {
    "plugin": {"ls": "list", "rm": "remove"},
    "jobs": {"ls": "list", "stop": "cancel", "kill": "cancel", "delete": "rm", "remove": "rm", "log": "logs"},
    "key": {"ls": "list", "new": "generate"},
    "trust": {"ls": "list", "rm": "remove"},
}

# words of other tools that are not forge's: group path -> word -> the command meant (a
# hint, not an alias: "lint" is not quite "check"). A full command when it lives elsewhere.
NEAR_MISSES = {
    "plugin": {"lint": "check", "validate": "check", "verify": "check", "info": "show", "inspect": "show",
               "describe": "show", "build": "pack", "push": "publish", "upload": "publish", "download": "pull",
               "fetch": "pull", "new": "init", "create": "init", "search": "list"},
    "jobs": {"submit": "forge submit", "run": "forge submit", "start": "forge submit", "create": "forge submit",
             "describe": "show", "inspect": "show", "info": "show", "get": "show", "rerun": "replay",
             "restart": "replay", "tail": "logs"},
    "": {"run": "submit", "apply": "submit", "install": "lock", "sync": "lock", "template": "plan",
         "diff": "lock diff", "show": "plugin show", "publish": "plugin publish", "init": "plugin init"},
}

# group -> (summary, example); a command's summary is the first line of its docstring
GROUPS = {
    "plugin": ("Author, check, pack, publish and fetch plugins.", "forge plugin init opsd-patch && forge plugin publish opsd-patch"),
    "jobs": ("List, inspect, follow, cancel, replay and delete submitted jobs.", "forge jobs list --json && forge jobs logs JOB_ID -f"),
    "key": ("Manage signing keys.", "forge key generate --name release && forge key list"),
    "trust": ("Manage which keys are trusted for which owners.", "forge trust add alice ~/.config/starforge/keys/release.pub"),
    "catalog": ("Browse a registry as static web pages.", "forge catalog build -o site && forge catalog serve site"),
    "bundle": ("Carry a locked experiment's plugins across an air gap in one file.",
               "forge bundle create exp7 -o exp7.bundle.tar && forge bundle verify exp7.bundle.tar"),
}

def summary(entry, path: str = "") -> str:
    """The one-line help of a command (its table entry's summary) or of a group (*path*)."""
    if isinstance(entry, dict):
        return GROUPS.get(path, ("", ""))[0]
    return entry.summary


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args, table: dict, path: str = "", **kwargs) -> None:
        kwargs.setdefault("invoke_without_command", True)
        super().__init__(*args, **kwargs)
        self.table = table
        self.path = path

    def _key(self, name: str) -> str:
        return f"{self.path} {name}".strip()

    def list_commands(self, ctx):
        return sorted(self.table)

    def get_command(self, ctx, name):
        name = ALIASES.get(self.path, {}).get(name, name)
        target = self.table.get(name)
        if target is None:
            return None
        if isinstance(target, dict):
            key = self._key(name)
            text, example = GROUPS.get(key, ("", ""))
            example = f"\n\n\b\nExample:\n  {example}" if example else ""
            return LazyGroup(name=name, table=target, path=key, help=text + example, callback=help_when_bare)
        module_name, attr = target.target.split(":")
        try:
            module = importlib.import_module(f"starforge.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"starforge.cli.{module_name}":
                raise
            return _unavailable(name, summary(target))
        return getattr(module, attr)

    def resolve_command(self, ctx, args):
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in self.table and name not in ALIASES.get(self.path, {}):
            import difflib

            meant = NEAR_MISSES.get(self.path, {}).get(name)
            guesses = difflib.get_close_matches(name, list(self.table), n=1, cutoff=0.6)
            if meant is not None:
                full = meant if meant.startswith("forge ") else f"{ctx.command_path} {meant}"
                guess = f" (did you mean '{full}'?)"
            else:
                guess = f" (did you mean '{ctx.command_path} {guesses[0]}'?)" if guesses else ""
            raise UsageError(f"no command '{ctx.command_path} {name}'{guess}", hint=f"see '{ctx.command_path} --help'")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx, formatter):
        rows = [(name, summary(self.table[name], self._key(name))) for name in sorted(self.table)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def help_when_bare() -> None:
    """A group run without a subcommand prints its help (exit 0)."""
    ctx = click.get_current_context()
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _unavailable(name: str, help_text: str) -> click.Command:
    def run() -> None:
        raise ForgeError(f"'{name}' is not available in this build of starforge-core {__version__}")

    return click.Command(name=name, callback=run, help=help_text)


@click.group(cls=LazyGroup, table=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="forge", message="%(prog)s %(version)s")
@click.option("-q", "--quiet", is_flag=True, help="Print results and errors only (no notes, no progress bars).")
@click.option("-v", "--verbose", is_flag=True, help="Also say where state lives and which class an error's exit code is.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors (also FORGE_DEBUG=1).")
def forge(quiet: bool, verbose: bool, debug: bool) -> None:
    """StarForge: declared, versioned, digest-locked plugins for RL training jobs.

    Errors, hints and the launcher's plugin lines are coloured on a terminal unless
    NO_COLOR is set (FORCE_COLOR=1 colours piped output too). Shell completion: forge
    completion bash|zsh|fish. 'forge config' shows where settings come from.

    \b
    Example:
      forge plugin init opsd-patch && forge plugin check opsd-patch
    """
    if debug:
        os.environ["FORGE_DEBUG"] = "1"
    if quiet and verbose:
        raise UsageError("-q and -v contradict each other", hint="give one of them")
    if quiet or verbose:
        os.environ["FORGE_VERBOSITY"] = "-1" if quiet else "1"
    if verbose:
        from ..state.home import home
        from .output import detail

        h = home()
        detail(f"forge {__version__}: config {h.config_dir}, data {h.data_dir}, cache {h.cache_dir}")
    help_when_bare()


def report(exc: ForgeError) -> int:
    """Print one ``error:`` line (and a ``hint:`` line) to stderr; return the exit code."""
    from .output import detail

    for line in error_lines(exc.message, exc.hint):
        click.echo(line, err=True, color=True if colour_forced() else None)
    detail(f"exit {exc.exit_code}: {type(exc).__name__} (docs/errors.md lists every code)")
    return exc.exit_code


def command_path(argv: list) -> str:
    """``forge submit`` for ``['submit', '.', '--set']``: the deepest command *argv* names."""
    path = ["forge"]
    table: object = COMMANDS
    for token in argv:
        if token.startswith("-"):
            continue
        target = table.get(token) if isinstance(table, dict) else None
        if target is None:
            break
        path.append(token)
        table = target
    return " ".join(path)


def disk_error(exc: OSError) -> ForgeError:
    """One line for an :class:`OSError` no command turned into its own error."""
    import errno

    from ..state.directories import disk_hint

    where = f"{exc.filename}: " if exc.filename else ""
    named = disk_hint(exc)  # which file system is full or read-only, when the error names a path
    if named:
        return ForgeError(f"{where}{exc.strerror or exc}", hint=named)
    hints = {
        errno.ENOSPC: "the disk is full; free some space and run the command again (nothing was half-written)",
        errno.EDQUOT: "the disk quota is used up; free some space and run the command again (nothing was half-written)",
        errno.EROFS: "that file system is read-only; point FORGE_HOME (or the experiment) at a writable directory",
        errno.EACCES: "you may not write there; check its permissions, or point FORGE_HOME at a directory of yours",
        errno.EPERM: "you may not write there; check its permissions, or point FORGE_HOME at a directory of yours",
    }
    return ForgeError(f"{where}{exc.strerror or exc}", hint=hints.get(exc.errno or 0, "run with --debug for the details"))


GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose", "--debug")


def leaf_command(argv: list) -> tuple[int, object]:
    """Where the command's own arguments start in *argv*, and the command's table entry
    (``None`` when *argv* names no command). Global options before the command are skipped."""
    table: object = COMMANDS
    path = ""
    for index, token in enumerate(argv):
        if token == "--":
            return index, None
        if token.startswith("-"):
            continue
        name = ALIASES.get(path, {}).get(token, token) if isinstance(table, dict) else token
        target = table.get(name) if isinstance(table, dict) else None
        if target is None:
            return index, None
        if not isinstance(target, dict):
            return index + 1, target
        table, path = target, f"{path} {name}".strip()
    return len(argv), None


def _command_options(target: Command) -> tuple[set, set]:
    """The option strings of *target*'s command: those that take a value (``--set KEY=VALUE``), and the flags."""
    module_name, attr = target.target.split(":")
    try:
        command = getattr(importlib.import_module(f"starforge.cli.{module_name}"), attr)
    except (ImportError, AttributeError):
        return set(), set()
    names: set = set()
    flags: set = set()
    for param in command.params:
        if isinstance(param, click.Option):
            (flags if param.is_flag or param.count else names).update(param.opts + param.secondary_opts)
    return names, flags


def normalize_argv(argv: list) -> list:
    """Spellings users bring from other tools, as the command line click parses:

    - ``forge help [CMD…]`` is ``forge CMD… --help``; ``forge version`` is ``forge --version``;
    - the global ``-q``, ``-v`` and ``--debug`` are accepted after the command too, as helm and
      uv accept them: they move to the front. Nothing after ``--`` moves, and neither does
      the value of an option that takes one (``--set -q`` keeps ``-q`` as the value);
    - helm's ``--set a=1,b=2`` and ``-o json`` (:mod:`.spellings`).
    """
    args = list(argv)
    leading = 0
    while leading < len(args) and args[leading] in GLOBAL_FLAGS:
        leading += 1
    rest = args[leading:]
    if rest[:1] == ["help"]:
        return args[:leading] + rest[1:] + ["--help"]
    if rest == ["version"]:
        return args[:leading] + ["--version"]
    start, target = leaf_command(args)
    if not isinstance(target, Command):
        return args
    takes_value, flags = _command_options(target)
    from .spellings import rewrite

    args = rewrite(args, start, takes_value, "--json" in flags, command_path(args))
    hoisted = [token for token in args[:start] if token in GLOBAL_FLAGS]
    kept = [token for token in args[:start] if token not in GLOBAL_FLAGS]
    index = start
    while index < len(args):
        token = args[index]
        if token == "--":
            kept.extend(args[index:])
            break
        if token in GLOBAL_FLAGS:
            hoisted.append(token)
        elif token in takes_value:
            kept.extend(args[index:index + 2])
            index += 1
        else:
            kept.append(token)
        index += 1
    return hoisted + kept


def scrubbed_traceback(exc: BaseException) -> str:
    """The traceback Python would print for *exc* (chained ones included), URL credentials masked.

    ``--debug`` shows tracebacks; a message inside one may hold a registry URL as the
    user typed it, so the text goes through the same masking as every ``error:`` line.
    """
    import traceback

    from ..urls import mask_url

    return mask_url("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def debug_exit(exc: BaseException, code: int) -> int:
    sys.stderr.write(scrubbed_traceback(exc))
    sys.stderr.flush()
    return code


def main(argv: list | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    own = args[:args.index("--")] if "--" in args else args  # --debug may come after the command too
    debug = os.environ.get("FORGE_DEBUG") == "1" or "--debug" in own
    try:
        args = normalize_argv(args)
        code = forge.main(args=args, prog_name="forge", standalone_mode=False, color=True if colour_forced() else None)
        # without standalone mode click returns the code of click.exceptions.Exit instead of exiting
        if isinstance(code, int) and not isinstance(code, bool) and code:
            sys.exit(code)
    except ForgeError as exc:
        if debug:
            sys.exit(debug_exit(exc, exc.exit_code))
        sys.exit(report(exc))
    except OSError as exc:
        # A full disk, a read-only FORGE_HOME, a directory without permission: whatever was
        # being written went through a temp file, so nothing half-written is left.
        if debug:
            sys.exit(debug_exit(exc, 1))
        sys.exit(report(disk_error(exc)))
    except (click.exceptions.Abort, KeyboardInterrupt):  # Ctrl-C, also before click has started
        click.echo(err=True)
        report(ForgeError("aborted"))
        sys.exit(130)
    except click.UsageError as exc:
        # click reports some option errors of a subcommand from its parent's context: name
        # the deepest command the arguments reach, whose --help documents the option
        command = exc.ctx.command_path if exc.ctx is not None else "forge"
        named = command_path(args)
        if len(named) > len(command):
            command = named
        sys.exit(report(UsageError(exc.format_message(), hint=f"see '{command} --help'")))
    except click.ClickException as exc:
        for line in error_lines(exc.format_message(), None):
            click.echo(line, err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        # A bug: its traceback is the report, credentials masked like everything forge prints.
        sys.exit(debug_exit(exc, 1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    main()
