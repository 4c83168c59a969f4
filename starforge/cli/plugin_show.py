"""``forge plugin show REF [--json]``: what a reference resolves to, and its signature status."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from .completion import complete_plugin_refs
from .registry_options import registry_options


def describe(registry, ref: str) -> dict:
    """The resolved version of *ref* as a dict, with ``signature: {status, error}``."""
    from ..errors import SignatureError
    from ..registry.resolve import resolve
    from ..registry.store import PluginStore
    from ..registry.yank import summary

    info = resolve(registry, ref)
    store = PluginStore(registry)
    try:
        signature = {"status": store.fetch_verified(info).status, "error": None}
    except SignatureError as exc:
        signature = {"status": "refused", "error": exc.message}
    facts = store.yank(info.owner, info.name, info.version, info.tree_digest)
    return {**asdict(info), "ref": info.ref, "request": ref, "top_level": list(info.top_level), "signature": signature,
            "yank": {**facts.to_json(), "summary": summary(facts)}}


@click.command("show")
@click.argument("ref", shell_complete=complete_plugin_refs)
@registry_options()
@click.option("--json", "as_json", is_flag=True, help="Print every field as JSON.")
def show(ref, registry, insecure, ca_file, as_json) -> None:
    """Show the version REF resolves to.

    Digests, manifest, files, signature status and yank (the statement that counts here,
    and any shown as unverified).

    REF is owner/name[@version|@specifier]; without an owner, the default owner
    (FORGE_OWNER, config 'owner:', the login name).

    \b
    Example:
      forge plugin show alice/opsd-patch@~=1.2
    """
    from ..registry.factory import open_registry
    from ..registry.publish import with_default_owner
    from ..terminal_text import shown

    d = describe(open_registry(registry, insecure=insecure, ca_file=ca_file), with_default_owner(ref))
    if as_json:
        click.echo(json.dumps(d, indent=2, sort_keys=True))
        return
    m = d["manifest"]
    req = m.get("requires") or {}
    requires = [f"core {req['core']}"] if "core" in req else []
    requires += [f"python {req['python']}"] if "python" in req else []
    requires += [f"{k} {v}".strip() for k, v in sorted((req.get("packages") or {}).items())]
    sig = d["signature"]
    rows = [
        ("tree digest", d["tree_digest"]),
        ("artifact digest", f"{d['artifact_digest']} ({d['size']} bytes)"),
        ("kind", f"{m.get('kind')} (load: {m.get('load', 'eager')})"),
        ("entrypoint", m.get("entrypoint", "")),
        ("top-level", ", ".join(d["top_level"]) or "-"),
        ("targets", ", ".join(m.get("targets") or []) or "-"),
        ("requires", "; ".join(requires) or "-"),
        ("files", str(len(d["files"]))),
        ("signature", sig["status"] + (f": {sig['error']}" if sig["error"] else "")),
        ("yank", d["yank"]["summary"]),
    ]
    # every value is the registry's text: control and bidirectional characters spelled out
    click.echo(shown(d["ref"]))
    if m.get("description"):
        description = str(m["description"]).rstrip("\n")
        click.echo(f"  {shown(description)}")
    for label, value in rows:
        click.echo(f"  {label + ':':<17}{shown(value)}")
    params = m.get("params") or {}
    if params:
        click.echo("  params:")
        for key, decl in params.items():
            default = f", default {json.dumps(decl['default'])}" if "default" in decl else ""
            if decl.get("choices"):
                default += f", one of {', '.join(json.dumps(c) for c in decl['choices'])}"
            text = ": " + str(decl["description"]).rstrip("\n") if decl.get("description") else ""
            click.echo(shown(f"    {key} ({decl['type']}{default}){text}"))
