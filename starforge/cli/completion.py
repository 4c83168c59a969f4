"""``forge completion bash|zsh|fish``: print the shell completion script (click's own)."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    Load it from your shell's startup file (click's completion machinery).

    \b
    Example:
      forge completion bash > ~/.local/share/bash-completion/completions/forge
      eval "$(forge completion zsh)"                   # in ~/.zshrc
      forge completion fish > ~/.config/fish/completions/forge.fish
    """
    from click.shell_completion import get_completion_class

    from .main import forge

    cls = get_completion_class(shell)
    assert cls is not None, f"click has no completion for {shell}"  # SHELLS lists only click's shells
    click.echo(cls(forge, {}, "forge", "_FORGE_COMPLETE").source())


# -- what a shell completes: from local state only -----------------------------------------
#
# Completion runs on every Tab: it reads files on this machine (the jobs store, the
# experiment's forge.yaml and lock, a directory registry) and never a network registry.
# Anything it cannot read completes to nothing rather than to an error.

def _matching(words, incomplete: str) -> list:
    return sorted(w for w in set(words) if w.startswith(incomplete))


def complete_job_ids(ctx, param, incomplete: str) -> list:
    """Job ids in the jobs store (``forge jobs show <Tab>``)."""
    try:
        from ..jobs.store import JobStore

        return _matching((r.id for r in JobStore().list()), incomplete)
    except Exception:
        return []


def _experiment_dir(ctx) -> str:
    directory = (ctx.params or {}).get("directory") if ctx is not None else None
    return directory or "."


def complete_plugin_refs(ctx, param, incomplete: str) -> list:
    """``owner/name@version`` of the experiment's lock and of a directory registry (the
    default one, or ``--registry DIR``); an ``oci://`` registry is not asked."""
    import os
    from pathlib import Path

    refs: list = []
    try:
        from ..experiment.lockfile import read_lock

        lock = read_lock(Path(_experiment_dir(ctx)) / "plugins.lock.json")
        refs += [e.ref for e in (lock.plugins if lock else ())]
    except Exception:
        pass
    try:
        from ..registry.directory import DirectoryRegistry
        from ..registry.factory import default_registry_url

        url = (ctx.params or {}).get("registry") if ctx is not None else None
        url = url or default_registry_url()
        if "://" not in url or url.startswith("file://"):
            registry = DirectoryRegistry(url[len("file://"):] if url.startswith("file://") else url)
            for owner, name in registry.plugins():
                refs.append(f"{owner}/{name}")
                refs += [f"{owner}/{name}@{v}" for v in registry.versions(owner, name)]
    except Exception:
        pass
    if os.environ.get("FORGE_OWNER"):  # a bare name means the owner's plugin
        owner = os.environ["FORGE_OWNER"] + "/"
        refs += [r[len(owner):] for r in refs if r.startswith(owner)]
    return _matching(refs, incomplete)


def complete_set_keys(ctx, param, incomplete: str) -> list:
    """``KEY=`` for the experiment's ``config:`` keys and the params its locked plugins declare."""
    from pathlib import Path

    keys: set = set()
    directory = Path(_experiment_dir(ctx))
    try:
        from ..experiment.config import load_experiment

        keys.update(load_experiment(directory).flat_config())
    except Exception:
        pass
    try:
        from ..experiment.lockfile import read_lock

        lock = read_lock(directory / "plugins.lock.json")
        for entry in lock.plugins if lock else ():
            keys.update(entry.plugin.params or {})
    except Exception:
        pass
    prefix = "+" if incomplete.startswith("+") else ""
    return _matching((f"{prefix}{k}=" for k in keys), incomplete)


def complete_key_names(ctx, param, incomplete: str) -> list:
    """``--key``: the names of your keys; files once the value holds a ``/`` (a path)."""
    if "/" in incomplete:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type="file")]
    try:
        from ..signatures.signing import list_keys

        return _matching((r["name"] for r in list_keys()), incomplete)
    except Exception:
        return []
