"""``forge prep REF|DIR --input IN.jsonl --output OUT.jsonl [--set KEY=VALUE]... [--python PATH]``."""

from __future__ import annotations

import json
import sys

import click

from .registry_options import registry_options


@click.command("prep")
@click.argument("plugin", metavar="REF|DIR")
@click.option("--input", "-i", "input_path", required=True, metavar="IN.jsonl", help="JSONL file to read: one JSON object per line.")
@click.option("--output", "-o", "output", required=True, metavar="OUT.jsonl",
              help="JSONL file to write (atomically), with OUT.jsonl.provenance.json beside it.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a param the plugin declares (repeatable).")
@click.option("--python", "python", metavar="PATH", help="Interpreter to run the plugin under (default: forge's own).")
@registry_options("Registry of REF (default: FORGE_REGISTRY, config).")
@click.option("--require-signatures", is_flag=True, help="Refuse REF unless a trusted key signed it (as forge lock does).")
@click.option("--json", "as_json", is_flag=True, help="Print the provenance record as JSON.")
def prep(plugin, input_path, output, sets, python, registry, insecure, ca_file, require_signatures, as_json) -> None:
    """Run a data-prep plugin over a JSONL file, on this machine.

    REF|DIR is a published data-prep plugin (owner/name@VERSION, pulled and verified,
    its signature judged as forge lock judges it) or a plugin directory (digested
    first). The plugin runs in a child process without forge's credential variables,
    under forge's Python or --python, imported from the verified bytes. Its entrypoint
    gets the params (declared defaults, then --set) and returns the function applied to
    each record: a JSON object in, a JSON object or None (dropped) out. A record that is
    not a JSON object, that the function raises on or turns into something else stops
    the run naming the input line, and nothing is written. JSONL only: convert to parquet
    (verl) or a Hugging Face dataset (TRL) afterwards.

    \b
    Example:
      forge plugin init my-prep --kind data-prep
      forge prep my-prep --input raw.jsonl --output clean.jsonl --set my_prep.max_chars=512
      forge prep alice/dedup-prompts@1.0 -i raw.jsonl -o dedup.jsonl --python .venv-data/bin/python
    """
    from ..prep.run import looks_like_directory, plugin_from_directory, plugin_from_registry, prep_params, run_prep
    from ..registry.progress import transfer_progress
    from .output import note

    if looks_like_directory(plugin):
        verified = plugin_from_directory(plugin)
        origin = "directory digested"
    else:
        verified = plugin_from_registry(plugin, registry, insecure=insecure, ca_file=ca_file, require_signatures=require_signatures)
        origin = f"signature: {verified.signature}"
    params = prep_params(verified, list(sets))
    note(f"prep    : {verified.label} ({verified.tree_digest}, {origin})")
    with transfer_progress(f"prep {verified.label}", 0) as update:
        try:
            result = run_prep(verified, params, input_path, output, python=python, progress=update)
        except Exception as exc:
            detail = getattr(exc, "detail", "")
            if detail:
                from .output import verbosity

                if verbosity() > 0:
                    sys.stderr.write(detail)
            raise
    rec = result.record
    if as_json:
        click.echo(json.dumps(rec, indent=2, sort_keys=True))
        return
    dropped = f" ({rec['dropped']} dropped)" if rec["dropped"] else ""
    click.echo(f"prep    : {rec['input']['records']} records in, {rec['output']['records']} out{dropped} "
               f"-> {result.output}, {result.provenance_path}")
