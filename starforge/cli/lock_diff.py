"""``forge lock diff [OLD NEW | LOCK] [--git REV] [--files] [--json]`` and the text both diffs print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from .registry_options import registry_options


def _lock_path(arg: str) -> Path:
    """A lock file, or a directory holding ``plugins.lock.json``."""
    from ..experiment.lockfile import FILENAME

    p = Path(arg)
    return p / FILENAME if p.is_dir() else p


@click.command("diff")
@click.argument("locks", nargs=-1, metavar="[OLD NEW | LOCK]")
@click.option("--git", "rev", metavar="REV", help="Compare LOCK (default ./plugins.lock.json) with the lock committed at REV (default: HEAD).")
@click.option("--files", "with_files", is_flag=True, help="Add the file-level unified diff of each changed plugin (cache first, else the registry).")
@registry_options("With --files: where to fetch versions the cache does not hold (default: FORGE_REGISTRY, config).")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as one JSON document.")
def diff(locks, rev, with_files, registry, insecure, ca_file, as_json) -> None:
    """Show what changed between two locks.

    Without arguments: plugins.lock.json as committed at git HEAD against the working
    file (review a lock bump before committing it). LOCK (a file or an experiment
    directory) with --git REV: the lock at REV against LOCK. OLD NEW: two lock files.
    Lists plugins added, removed, re-versioned, re-digested (the same version with other
    content: a moved tag or an edited lock, always loud), signer changes, and the
    manifest fields that changed (params and defaults, targets, requires, load), plus the
    files added, removed or changed (from the lock's per-file hashes). Exit 0 when the
    locks are equal, 20 when they differ, another code on an error (docs/errors.md).

    \b
    Example:
      forge lock diff                          # HEAD vs the working file
      forge lock diff --git origin/main        # in a pull request's CI
      forge lock diff old/plugins.lock.json plugins.lock.json --files
    """
    from ..errors import DIFFERS_EXIT
    from ..experiment.lockdiff import check_schema, diff_locks, file_diffs, lock_at_revision, read_lock_file
    from ..experiment.lockfile import FILENAME

    if len(locks) > 2:
        raise UsageError(f"expected at most two locks, got {len(locks)}", hint="forge lock diff [OLD NEW | LOCK --git REV]")
    note = None
    if len(locks) == 2:
        if rev:
            raise UsageError("--git compares one lock with a revision; two locks were given", hint="forge lock diff OLD NEW, or forge lock diff LOCK --git REV")
        old_path, new_path = _lock_path(locks[0]), _lock_path(locks[1])
        old, new = read_lock_file(old_path), read_lock_file(new_path)
        old_label, new_label = str(old_path), str(new_path)
    else:
        if locks:
            new_path = _lock_path(locks[0])
        else:  # the experiment of this directory or the nearest parent, as every command finds it
            from ..experiment.config import find_experiment_root

            root = find_experiment_root(".")
            new_path = Path(FILENAME) if root == Path.cwd().resolve() else root / FILENAME
        rev = rev or "HEAD"
        old, existed = lock_at_revision(new_path, rev)
        new = read_lock_file(new_path)
        old_label, new_label = f"{new_path} at {rev}", f"{new_path} (working file)"
        if not existed:
            note = f"{new_path} is not in {rev}: every plugin shows as added"
    check_schema(old, old_label)
    check_schema(new, new_label)
    doc: dict[str, Any] = {"old_label": old_label, "new_label": new_label, **diff_locks(old, new)}
    if note:
        doc["note"] = note
    if with_files and not doc["equal"]:
        reg = None
        try:
            from ..registry.factory import open_registry

            reg = open_registry(registry, insecure=insecure, ca_file=ca_file)
        except Exception:  # noqa: BLE001 - the cache may hold everything; a missing tree says so
            if registry:
                raise
        file_diffs(doc, old, new, reg)
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        for line in render_text(doc, sys.stdout):
            click.echo(line)
    if not doc["equal"]:
        raise click.exceptions.Exit(DIFFERS_EXIT)



def _short(digest: str | None) -> str:
    from ..experiment.lockdiff import short_digest

    return short_digest(digest)


def _value(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def field_lines(fields: dict) -> list:
    """One line per changed field, as a reviewer reads them (control and bidirectional
    characters of the registry's or the lock's text spelled out)."""
    from ..terminal_text import shown

    lines: list = []
    for key in ("owner", "request", "kind", "load", "entrypoint"):
        if key in fields:
            lines.append(f"{key}: {fields[key]['old']} -> {fields[key]['new']}")
    if "params" in fields:
        p = fields["params"]
        for k, decl in p["added"].items():
            default = f", default {_value(decl['default'])}" if isinstance(decl, dict) and "default" in decl else ""
            lines.append(f"params: + {k} ({decl.get('type') if isinstance(decl, dict) else decl}{default})")
        for k in p["removed"]:
            lines.append(f"params: - {k}")
        for k, ch in p["changed"].items():
            o, n = ch["old"], ch["new"]
            if isinstance(o, dict) and isinstance(n, dict):
                for attr in sorted(set(o) | set(n)):
                    if o.get(attr) != n.get(attr):
                        before = _value(o[attr]) if attr in o else "(none)"
                        after = _value(n[attr]) if attr in n else "(none)"
                        lines.append(f"params: {k} {attr} {before} -> {after}")
            else:
                lines.append(f"params: {k} {_value(o)} -> {_value(n)}")
    for key in ("targets", "top_level"):
        if key in fields:
            ch = fields[key]
            parts = [f"+ {x}" for x in ch["added"]] + [f"- {x}" for x in ch["removed"]]
            lines.append(f"{key}: {', '.join(parts) if parts else 'reordered: ' + ', '.join(ch['new'])}")
    if "requires" in fields:
        r = fields["requires"]
        for k, v in r["added"].items():
            lines.append(f"requires: + {k} {v}".rstrip())
        for k, v in r["removed"].items():
            lines.append(f"requires: - {k} {v}".rstrip())
        for k, ch in r["changed"].items():
            lines.append(f"requires: {k} {ch['old']} -> {ch['new']}")
    if "signature" in fields:
        lines.append("signature: " + signature_line(fields["signature"]["old"], fields["signature"]["new"]))
    if "files" in fields:
        f = fields["files"]
        parts = []
        for word in ("changed", "added", "removed"):
            if f[word]:
                names = ", ".join(f[word][:5]) + (f", … {len(f[word]) - 5} more" if len(f[word]) > 5 else "")
                parts.append(f"{len(f[word])} {word} ({names})")
        lines.append("files: " + "; ".join(parts))
    return [shown(line) for line in lines]


def signature_line(old: dict | None, new: dict | None) -> str:
    def who(s: dict | None) -> str:
        if s is None:
            return "unsigned"
        kid = s.get("key_id")
        return f"key {kid[:12]}…" if kid else "signed (key not recorded)"

    if old is not None and new is not None and old.get("key_id") == new.get("key_id"):
        return f"re-signed by the same {who(new)} (envelope {_short(old.get('envelope_digest'))} -> {_short(new.get('envelope_digest'))})"
    return f"{who(old)} -> {who(new)}"


SYMBOLS = {"added": "+", "removed": "-", "re-versioned": "~", "re-digested": "!", "changed": "~"}
COLOURS: dict[str, dict] = {"added": {"fg": "green"}, "removed": {"fg": "red"}, "re-versioned": {"fg": "yellow"},
           "re-digested": {"fg": "red", "bold": True}, "changed": {"fg": "yellow"}}


def plugin_heading(item: dict) -> str:
    o, n = item["old"], item["new"]
    change = item["change"]
    if change == "added":
        return f"{n['ref']}  {_short(n['digest'])}  (added)"
    if change == "removed":
        return f"{o['ref']}  {_short(o['digest'])}  (removed)"
    if change == "re-versioned":
        return f"{n['ref'].rsplit('@', 1)[0]} {o['version']} -> {n['version']}  ({item.get('direction', 'other version')})"
    if change == "re-digested":
        return (f"{n['ref']} RE-DIGESTED: same version, other content ({_short(o['digest'])} -> {_short(n['digest'])}); "
                "a moved tag or an edited lock")
    return f"{n['ref']}  (same content; recorded facts changed)"


def render_text(diff: dict, stream=None) -> list:
    """The terminal lines of a diff document (coloured where :func:`~starforge.cli.output.colour_on`);
    the locks' and the registry's text with control and bidirectional characters spelled out."""
    from ..terminal_text import shown
    from .output import paint

    lines = [paint(shown(f"--- {diff['old_label']}"), stream, bold=True),
             paint(shown(f"+++ {diff['new_label']}"), stream, bold=True)]
    if diff.get("note"):
        lines.append(shown(f"note: {diff['note']}"))
    for item in diff["plugins"]:
        change = item["change"]
        lines.append(paint(shown(f"{SYMBOLS[change]} {plugin_heading(item)}"), stream, **COLOURS[change]))
        for line in field_lines(item["fields"]):
            lines.append(f"    {line}")
        lines.extend(diff_lines(item.get("diff") or "", "    ", stream))
    if diff.get("load_order"):
        o = diff["load_order"]
        lines.append(paint(shown(f"~ load order: {', '.join(o['old'])} -> {', '.join(o['new'])}"), stream, fg="yellow"))
    if diff["equal"]:
        lines.append("no changes")
    else:
        counts = ", ".join(f"{v} {k}" for k, v in diff["counts"].items())
        lines.append(counts + ("; load order changed" if diff.get("load_order") else "") if counts else "load order changed")
    return lines


def diff_lines(text: str, indent: str, stream=None) -> list:
    """The lines of a unified diff, added lines green and removed ones red on a terminal.

    Split at newlines only (a carriage return or a form feed in a file is shown, not a
    line break), every line with its control and bidirectional characters spelled out."""
    from ..terminal_text import shown
    from .output import paint

    out = []
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    for line in map(shown, raw):
        if line.startswith("+") and not line.startswith("+++"):
            style: dict = {"fg": "green"}
        elif line.startswith("-") and not line.startswith("---"):
            style = {"fg": "red"}
        elif line.startswith("@@"):
            style = {"fg": "cyan"}
        else:
            style = {}
        out.append(indent + (paint(line, stream, **style) if style else line))
    return out
