"""``forge plan [DIR] [--set KEY=VALUE]... [--backend NAME] [--json]``."""

from __future__ import annotations

import json
import sys

import click

from .choices import BackendChoice
from .completion import complete_set_keys
from .registry_options import job_registry_options


@click.command("plan")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("-f", "--values", "values_files", multiple=True, metavar="FILE",
              help="YAML of config keys laid over forge.yaml's config: (repeatable; --set comes after).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", shell_complete=complete_set_keys, help="Override a hyperparameter, as forge submit does.")
@click.option("--backend", type=BackendChoice(),
              help="Run the load phase as a short CPU-only job on this backend (where the job's Python exists).")
@job_registry_options()
@click.option("--dev", "dev", multiple=True, metavar="NAME=DIR",
              help="Plan with the unpublished plugin directory DIR in place of the locked plugin NAME (repeatable).")
@click.option("--allow-yanked", is_flag=True, help="Run locked versions that are yanked, this once.")
@click.option("--json", "as_json", is_flag=True, help="Print the patch ledger as one JSON document.")
def plan(directory, values_files, sets, backend, registry, insecure, ca_file, require_signatures, dev, allow_yanked, as_json) -> None:
    """Show what the job would patch, without running it.

    Stages the locked experiment as 'forge submit' does (same checks, same JobSpec) into a
    temporary directory, runs the launcher's load phase under the job's Python in a fresh
    process without the credential variables (verify, requires, import, every eager
    install(params), then the patch targets imported as the trainer would) and stops
    before the training entrypoint. Prints the patch ledger: per plugin, in load order,
    each target patched and how (wrap, replace, registry entry, created), the deferred
    plugins (registered, not installed) and the skipped ones; then the conflicts: a
    replace hiding an earlier plugin's patch, two plugins replacing one target, an install
    that raised, a patch that never applied, a declared target no patch touched. A replace
    the experiment means is acknowledged in forge.yaml (plan: acknowledge:). Writes no job
    record and leaves nothing behind. Exit 0 when clean, 21 on an unacknowledged conflict
    (the ledger is still printed), another code on an error. --backend NAME runs the same
    load phase as a short job there, for a job's Python that exists only on the cluster.
    A yanked locked version is refused (exit 18) as submit refuses it; --allow-yanked
    plans with it.

    \b
    Example:
      forge plan examples/quickstart
      forge plan --set opsd.scale=0.5 --json | jq .conflicts
      forge plan -f sweep/lr-high.yaml
      forge plan --backend slurm      # the job's Python is in the cluster's image
    """
    from ..errors import CONFLICT_EXIT
    from ..experiment.dev_plugins import parse_dev_options
    from ..experiment.patchplan import plan_experiment, plan_on_backend
    from ..experiment.values import values_overrides
    from .output import detail, note

    sets = [ov for path in values_files for ov in values_overrides(path)] + list(sets)
    dev_dirs = parse_dev_options(dev)
    if backend:
        outcome = plan_on_backend(directory, sets, backend=backend, registry=registry, insecure=insecure, ca_file=ca_file,
                                  require_signatures=require_signatures, dev=dev_dirs, allow_yanked=allow_yanked)
    else:
        outcome = plan_experiment(directory, sets, registry=registry, insecure=insecure, ca_file=ca_file, require_signatures=require_signatures,
                                  dev=dev_dirs, allow_yanked=allow_yanked)
    for p in getattr(outcome.spec, "plugins", ()):
        if "+dev." in p.version:
            note(f"note: dev plugin {p.ref}: an unpublished directory in place of the locked version")
    for line in outcome.log.splitlines():
        detail(line)
    if as_json:
        click.echo(json.dumps(outcome.to_dict(), indent=2, sort_keys=True, ensure_ascii=False))
    else:
        for line in render(outcome.to_dict(), sys.stdout):
            click.echo(line)
    if not outcome.clean:
        raise click.exceptions.Exit(CONFLICT_EXIT)


_STATUS = {
    "loaded": "installed",
    "registered": "registered, not installed (deferred: its context exists only in training)",
    "skipped": "skipped (kind environment: left to the environment mechanism)",  # the launcher's words
    "failed": "FAILED",
}


def render(doc: dict, stream=None) -> list:
    """The ledger as a reviewer reads it; conflicts coloured on a terminal. What plugins and
    the registry wrote (refs, targets, error messages) has its control and bidirectional
    characters spelled out."""
    from ..terminal_text import shown
    from .output import paint

    py = doc.get("python") or {}
    lines = [shown(f"plan    : {doc['job']['name']} on {doc['job']['backend']} (python {py.get('executable')} {py.get('version')})")]
    for p in doc["plugins"]:
        status = p["status"]
        if status == "shadowed":
            text = f"shadowed (built-in replaced by the locked package {p.get('shadowed_by')})"
        else:
            text = _STATUS.get(status, status)
        head = shown(f"{p['ref']}  {text}")
        lines.append(paint(head, stream, fg="red", bold=True) if status == "failed" else paint(head, stream, bold=True))
        if p.get("error"):
            lines.append(shown(f"    error: {p['error'].get('message')}"))
        for r in p["patches"]:
            how = r["how"] if r["how"] in ("wrap", "replace") else f"{r['how']} ({r['mode']})"
            state = "" if r["status"] == "applied" else f"  [{r['status']}]"
            lines.append(shown(f"    {how:<24} {r['target']}{state}"))
        if status == "loaded" and p["load"] == "eager" and not p["patches"]:
            lines.append("    (no patches through starforge.patching)")
    unresolved = [i for i in doc.get("imports") or [] if not i.get("ok")]
    for i in unresolved:
        lines.append(paint(shown(f"import of {i['module']} failed: {i['error']}"), stream, fg="yellow"))
    conflicts = doc["conflicts"]
    if conflicts:
        lines.append("conflicts:")
        for c in conflicts:
            if c["acknowledged"]:
                why = f": {c['reason']}" if c.get("reason") else ""
                lines.append(shown(f"  ok {c['kind']}: {c['message']} (acknowledged in forge.yaml{why})"))
            else:
                lines.append(paint(shown(f"  !  {c['kind']}: {c['message']}"), stream, fg="red"))
        open_ = [c for c in conflicts if not c["acknowledged"]]
        replaces = [c for c in open_ if c["kind"] in ("hidden", "double-replace")]
        if replaces:
            c = replaces[0]
            name = c["plugin"].rsplit("@", 1)[0].split(":", 1)[-1].split("/")[-1]
            lines.append(shown(f"hint: a replace the experiment means goes in forge.yaml: "
                               f"plan: {{acknowledge: [{{plugin: {name}, replaces: \"{c['target']}\"}}]}}"))
        lines.append(f"{len(open_)} conflict{'s' if len(open_) != 1 else ''}"
                     f" ({len(conflicts) - len(open_)} acknowledged)")
    else:
        lines.append("no conflicts")
    return lines
