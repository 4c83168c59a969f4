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
