"""``forge config [DIR] [--registry URL] [--owner OWNER] [--json]``: the effective settings and
where each one came from (a flag, the environment, forge.yaml, the user config, a default)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from .output import note


def _home_source() -> str:
    if os.environ.get("FORGE_HOME"):
        return "FORGE_HOME"
    if os.environ.get("XDG_CONFIG_HOME"):
        return "XDG_CONFIG_HOME (config), XDG_DATA_HOME / XDG_CACHE_HOME or their defaults (data, cache)"
    return "default (~/.config, ~/.local/share, ~/.cache)"


def _experiment(directory: str):
    """The experiment forge commands run in *directory* would use, or None (no error here)."""
    from ..errors import ForgeError
    from ..experiment.config import load_experiment

    try:
        return load_experiment(directory)
    except ForgeError:
        return None


def effective_settings(directory: str = ".", registry: str | None = None, owner: str | None = None) -> dict:
    """``{setting: {"value": ..., "source": ...}}`` as a command run in *directory* would resolve them."""
    from ..jobs.store import jobs_dir
    from ..registry.publish import owner_and_source
    from ..signatures.signing import list_keys
    from ..state.home import home
    from ..state.userconfig import load_user_config

    h = home()
    where = _home_source()
    config = load_user_config(h.config_file)
    exp = _experiment(directory)
    out: dict = {
        "config_dir": {"value": str(h.config_dir), "source": where},
        "data_dir": {"value": str(h.data_dir), "source": where},
        "cache_dir": {"value": str(h.cache_dir), "source": where},
        "config_file": {"value": str(h.config_file),
                        "source": f"{where}; {'read' if h.config_file.is_file() else 'not written (no such file)'}"},
        "experiment": {"value": str(exp.path) if exp else None,
                       "source": "forge.yaml found from " + str(Path(directory).resolve()) if exp else
                       "no forge.yaml here or in a parent directory"},
    }
    if registry:
        value, source = registry, "--registry"
    elif os.environ.get("FORGE_REGISTRY"):
        value, source = os.environ["FORGE_REGISTRY"], "FORGE_REGISTRY"
    elif exp is not None and exp.registry:
        value, source = exp.registry, f"'registry' in {exp.path}"
        if "://" not in value and not Path(value).is_absolute():
            value = str((exp.root / value).resolve())
    elif config.registry is not None:
        value, source = config.registry, f"'registry' in {config.path}"
    else:
        value, source = str(h.registry_dir), "default: the embedded directory registry"
    from ..urls import mask_url

    out["registry"] = {"value": mask_url(value), "source": source}
    if value.startswith("oci://"):
        out["registry_tls"] = _registry_tls(value)
    try:
        who, source = owner_and_source(owner)
    except Exception as exc:  # an invalid owner is shown, not fatal: this command is how one finds it
        who, source = None, str(getattr(exc, "message", exc))
    out["owner"] = {"value": who, "source": source}
    keys = list_keys(h.keys_dir)
    out["keys"] = {"value": [k["name"] for k in keys], "source": f"{h.keys_dir} ({where})"}
    out["trust_file"] = {"value": str(h.trust_file),
                         "source": f"{where}; {'read' if h.trust_file.is_file() else 'none yet: no key is trusted'}"}
    jobs = jobs_dir()
    out["jobs_dir"] = {"value": str(jobs), "source": "FORGE_JOBS_DIR" if os.environ.get("FORGE_JOBS_DIR") else where}
    return out


def _registry_tls(url: str) -> dict:
    """Which CAs (and client certificate) the registry at *url* is checked with (:mod:`..registry.oci_tls`)."""
    from ..errors import ForgeError
    from ..registry.oci_location import parse_oci_url
    from ..registry.oci_tls import registry_trust

    try:
        trust = registry_trust(parse_oci_url(url).host)
    except ForgeError as exc:  # shown, not fatal: this command is how one finds it
        return {"value": None, "source": exc.message}
    value = trust.describe() + (f"; client certificate {trust.cert_file}" if trust.cert_file else "")
    sources = [s for s in (trust.ca_from, trust.cert_from) if s]
    return {"value": value, "source": "; ".join(sources) or "default (no registries: entry for this host)"}


@click.command("config")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--registry", metavar="URL", help="Show the registry as this flag would set it.")
@click.option("--owner", metavar="OWNER", help="Show the owner as this flag would set it.")
@click.option("--json", "as_json", is_flag=True, help="Print {setting: {value, source}} as JSON.")
def config(directory, registry, owner, as_json) -> None:
    """Show the effective home, registry, owner, keys and trust file, and where each came from.

    Each value is followed by its source: a flag (--registry, --owner), the environment
    (FORGE_HOME, FORGE_REGISTRY, FORGE_OWNER, FORGE_JOBS_DIR), forge.yaml (found in DIR
    or a parent directory), the user config file (config.yaml), or the default. Nothing
    is changed, and no registry is contacted.

    \b
    Example:
      forge config
      FORGE_OWNER=alice forge config --json | jq .owner
    """
    from ..terminal_text import shown

    settings = effective_settings(directory, registry, owner)
    if as_json:  # JSON escapes control characters itself
        click.echo(json.dumps(settings, indent=2, sort_keys=True))
        return
    # every value comes from outside forge (the environment, a file, a flag): spelled out
    width = max(len(k) for k in settings)
    for key, item in settings.items():
        value = item["value"]
        if isinstance(value, list):
            value = ", ".join(value) or "(none)"
        click.echo(shown(f"{key:<{width}} : {value if value is not None else '-'}"))
        click.echo(shown(f"{'':<{width}}   from {item['source']}"))
    if settings["owner"]["value"] is None:
        note("the owner is not valid; set it with --owner, FORGE_OWNER or 'owner:' in config.yaml")
