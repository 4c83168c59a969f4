"""``forge plugin yank REF --reason TEXT [--sign]`` and ``forge plugin unyank REF [--sign]``."""

from __future__ import annotations

import click

from .completion import complete_key_names
from .registry_options import registry_options


def _options(command):
    command = click.option("--passphrase-file", type=click.Path(dir_okay=False),
                           help="File holding the key's passphrase (else FORGE_KEY_PASSPHRASE).")(command)
    command = registry_options()(command)
    command = click.option("--key", "key_file", metavar="NAME|FILE", shell_complete=complete_key_names,
                           help="Key for --sign: one of your keys by name (forge key list), or a path holding '/' "
                                "(default: the key named after the owner, else 'default').")(command)
    command = click.option("--sign", is_flag=True, help="Sign the statement with your key (needed where the owner has "
                                                        "trusted keys).")(command)
    return click.argument("ref")(command)


@click.command("yank")
@_options
@click.option("--reason", required=True, help="What is wrong with this version (shown to everyone who meets it).")
def yank(ref, sign, key_file, registry, insecure, ca_file, passphrase_file, reason) -> None:
    """Withdraw the published version REF from being locked or run again.

    The version stays (pullable, replayable); 'forge lock' no longer resolves a range to
    it, and 'lock --check', 'submit' and 'plan' refuse it (exit 18) unless forge.yaml
    acknowledges it. Where the owner has trusted keys only a signed yank counts: use --sign.

    \b
    Example:
      forge plugin yank alice/dr-grpo@0.3.1 --reason "advantage divided by the group size twice" --sign
    """
    _record("yank", ref, reason, sign, key_file, registry, insecure, ca_file, passphrase_file)


@click.command("unyank")
@_options
def unyank(ref, sign, key_file, registry, insecure, ca_file, passphrase_file) -> None:
    """Withdraw the yank of the published version REF.

    A newer statement than the yank, signed as the yank had to be.

    \b
    Example:
      forge plugin unyank alice/dr-grpo@0.3.1 --sign
    """
    _record("unyank", ref, "", sign, key_file, registry, insecure, ca_file, passphrase_file)


def _record(action, ref, reason, sign, key_file, registry, insecure, ca_file, passphrase_file) -> None:
    from ..errors import UsageError
    from ..registry.base import parse_ref
    from ..registry.factory import open_registry
    from ..registry.publish import with_default_owner
    from ..registry.store import PluginStore
    from ..registry.yank import NOT_ENFORCED, YANK, add_statement
    from ..terminal_text import shown
    from .output import note

    ref = with_default_owner(ref)
    parsed = parse_ref(ref)
    if parsed.specifier is None or not parsed.specifier.startswith("==") or "*" in parsed.specifier:
        raise UsageError(f"'{ref}' names no exact version; a {action} is for one version",
                         hint=f"forge plugin {action} {parsed.owner}/{parsed.name}@VERSION")
    if key_file and not sign:
        raise UsageError("--key is given without --sign", hint=f"forge plugin {action} {ref} --sign --key {key_file}")
    key = None
    if sign:
        from ..signatures.signing import load_private_key
        from .plugin_publish import signing_key

        sign_key, passphrase, _ = signing_key(parsed.owner, key_file, passphrase_file)
        key = load_private_key(sign_key, passphrase)
    reg = open_registry(registry, insecure=insecure, ca_file=ca_file)
    info = reg.get(parsed.owner, parsed.name, parsed.specifier[2:])
    store = PluginStore(reg)
    before = store.yank(info.owner, info.name, info.version, info.tree_digest)
    if action != YANK and not before.yanked:
        raise UsageError(f"{info.ref} is not yanked here; there is nothing to withdraw",
                         hint=f"forge plugin show {info.ref} shows its yank statements")
    statement = add_statement(reg, info, action, reason, key=key)
    facts = store.yank(info.owner, info.name, info.version, info.tree_digest)
    signed = f"signed with key {statement.key_ids[0]}" if statement.key_ids else "unsigned"
    click.echo(f"{action}ed {shown(info.ref)} (#{statement.sequence}, {signed})"
               + (f": {shown(statement.reason)}" if statement.reason else ""))
    if any(s.envelope == statement.envelope for s in facts.unenforced):
        note(f"owner {info.owner} has trusted keys here and this statement is not signed by one of them: it is shown "
             f"as {NOT_ENFORCED} and changes nothing; sign it: forge plugin {action} {info.ref} --sign")
