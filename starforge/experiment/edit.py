"""``forge plugin add REF`` / ``forge plugin remove NAME``: edit forge.yaml and the lock together.

forge.yaml is edited as text, line by line, so its comments, blank lines, key order and
quoting survive; only the ``plugins:`` list changes:

- flow style ``plugins: [a, b]  # comment``: the bracketed list is rewritten on the key's
  line (a flow list that spanned several lines is put on one), the comment kept;
- block style (``- a`` items under ``plugins:``): one item line is added after the last
  item (same indentation), replaced in place (its comment kept) or deleted; removing the
  last item leaves ``plugins: []``;
- no ``plugins:`` key (or ``plugins:`` with nothing): ``plugins: [REF]`` is written.

The edited text is parsed again and must yield exactly the intended list, or nothing is
written. The lock is resolved first, then forge.yaml and ``plugins.lock.json`` are each
written atomically, so a request that cannot be resolved leaves both files untouched.

``add`` of a plugin already requested replaces its request in place (same load position)
and re-resolves it (an explicit upgrade); otherwise the plugin is appended (loaded last).

Laptop side.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..cluster import atomic
from ..errors import ManifestError, UsageError
from ..package_format.yamlio import load_yaml
from .config import FILENAME, Experiment, find_experiment_root, parse_experiment, parse_request
from .lock import LockResult, resolve_lock
from .lockfile import LockFile, read_lock, stale_reasons, write_lock

_KEY_RE = re.compile(r"^plugins[ \t]*:(?P<rest>.*)$")
_ITEM_RE = re.compile(r"^(?P<indent>[ \t]*)-(?P<sp>[ \t]+)(?P<value>.*?)(?P<comment>[ \t]+#.*)?$")
_TOP_KEY_RE = re.compile(r"^[^\s#-][^:]*:")


@dataclass(frozen=True)
class EditResult:
    action: str  # "added", "replaced", "removed", "unchanged"
    request: str
    lock: LockResult | None = None
    yaml_written: bool = False
    changes: list = field(default_factory=list)


# -- text editing (pure) -------------------------------------------------------------------

@dataclass
class _PluginsList:
    style: str  # "flow", "block", "empty", "absent"
    items: list  # item texts as written (unquoted)
    key_line: int | None = None  # 0-based
    end_line: int | None = None  # flow: last line of the [...] ; block: last item line
    item_lines: list = field(default_factory=list)  # block: 0-based line of each item


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _quote(ref: str, flow: bool) -> str:
    risky = (flow and any(c in ref for c in ",[]{}")) or ": " in ref or " #" in ref or ref[:1] in "!&*|>'\"%@`{[,#?-"
    return '"' + ref.replace("\\", "\\\\").replace('"', '\\"') + '"' if risky else ref


def _split_comment(rest: str) -> tuple:
    """(value, comment) of the text after a key's colon; a '#' inside quotes does not count."""
    quote = None
    for i, c in enumerate(rest):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or rest[i - 1] in " \t"):
            return rest[:i].rstrip(), rest[i:]
    return rest.rstrip(), ""


def _find(lines: list) -> _PluginsList:
    for n, line in enumerate(lines):
        m = _KEY_RE.match(line)
        if not m:
            continue
        value, _ = _split_comment(m.group("rest"))
        value = value.strip()
        if value.startswith("["):
            text = value
            end = n
            while "]" not in _split_comment(text)[0] and end + 1 < len(lines):
                end += 1
                text += " " + _split_comment(lines[end])[0].strip()
            inner = text[text.index("[") + 1 : text.rindex("]")]
            items = [_unquote(p) for p in _split_flow(inner) if p.strip()]
            return _PluginsList("flow", items, key_line=n, end_line=end)
        if value in ("", "~", "null", "Null", "NULL"):
            items, item_lines = [], []
            k = n + 1
            while k < len(lines):
                stripped = lines[k].strip()
                if not stripped or stripped.startswith("#"):
                    k += 1
                    continue
                im = _ITEM_RE.match(lines[k])
                if im and (im.group("indent") or value == ""):
                    items.append(_unquote(im.group("value")))
                    item_lines.append(k)
                    k += 1
                    continue
                break
            if items:
                return _PluginsList("block", items, key_line=n, end_line=item_lines[-1], item_lines=item_lines)
            return _PluginsList("empty", [], key_line=n, end_line=n)
        raise ManifestError(
            f"{FILENAME}:{n + 1}: plugins: cannot edit this form of the list",
            hint="write it as plugins: [a, b] or as '- a' lines, then try again",
        )
    return _PluginsList("absent", [])


def _split_flow(inner: str) -> list:
    parts, quote, cur = [], None, ""
    for c in inner:
        if quote:
            cur += c
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
            cur += c
        elif c == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return parts


def set_plugins_text(text: str, new_items: list, *, replace_index: int | None = None) -> str:
    """Rewrite the ``plugins:`` list of forge.yaml *text* to *new_items*, keeping the rest.

    *new_items* must be the old items with one appended, one replaced (at *replace_index*)
    or one removed; the edit touches only the lines that must change.
    """
    lines = text.splitlines(keepends=True)
    eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    bare = [ln.rstrip("\r\n") for ln in lines]
    found = _find(bare)
    old = found.items
    if found.style in ("flow", "empty", "absent") or (found.style == "block" and not new_items):
        rendered = "[" + ", ".join(_quote(i, True) for i in new_items) + "]"
        if found.style == "absent":
            insert_at = _insert_point(bare)
            new_line = f"plugins: {rendered}{eol}"
            if insert_at > 0 and not lines[insert_at - 1].endswith(("\n", "\r")):
                lines[insert_at - 1] += eol
            lines.insert(insert_at, new_line)
            return "".join(lines)
        assert found.key_line is not None and found.end_line is not None  # a list that is there has both
        key = bare[found.key_line]
        m = _KEY_RE.match(key)
        assert m is not None  # _find matched this line with _KEY_RE
        head = key[: m.start("rest")]
        if found.style == "flow":
            last = bare[found.end_line]
            _, comment = _split_comment(last if found.end_line != found.key_line else m.group("rest"))
        else:
            _, comment = _split_comment(m.group("rest"))
        new_key = f"{head} {rendered}" + (f"  {comment}" if comment else "")
        end = found.end_line
        ending = eol if lines[end].endswith(("\n", "\r")) else ""
        del lines[found.key_line : end + 1]
        lines.insert(found.key_line, new_key + ending)
        return "".join(lines)
    # block style with at least one item left
    if len(new_items) == len(old) + 1 and new_items[:-1] == old:
        last = found.item_lines[-1]
        im = _ITEM_RE.match(bare[last])
        assert im is not None  # _find matched this line with _ITEM_RE
        new_line = f"{im.group('indent')}-{im.group('sp')}{_quote(new_items[-1], False)}"
        ending = eol
        if not lines[last].endswith(("\n", "\r")):
            lines[last] += eol
            ending = ""
        lines.insert(last + 1, new_line + ending)
        return "".join(lines)
    if len(new_items) == len(old) and replace_index is not None:
        k = found.item_lines[replace_index]
        im = _ITEM_RE.match(bare[k])
        assert im is not None  # _find matched this line with _ITEM_RE
        ending = lines[k][len(bare[k]) :]
        lines[k] = f"{im.group('indent')}-{im.group('sp')}{_quote(new_items[replace_index], False)}{im.group('comment') or ''}{ending}"
        return "".join(lines)
    if len(new_items) == len(old) - 1:
        gone = next(i for i in range(len(old)) if i >= len(new_items) or old[i] != new_items[i])
        del lines[found.item_lines[gone]]
        return "".join(lines)
    raise ValueError("set_plugins_text: not a single add, replace or remove")


def _insert_point(bare: list) -> int:
    """Where a new top-level ``plugins:`` line goes: right after ``entrypoint:`` and its
    value (before the comments that lead the next key), else at the end."""
    seen_entry = False
    for n, line in enumerate(bare):
        if _TOP_KEY_RE.match(line):
            if seen_entry:
                # comments and blank lines just above the next key belong to it
                while n > 0 and (not bare[n - 1].strip() or bare[n - 1].lstrip().startswith("#")):
                    n -= 1
                return n
            if line.startswith("entrypoint"):
                seen_entry = True
    return len(bare)


# -- commands ---------------------------------------------------------------------------------

def add_plugin(directory: str | os.PathLike, ref: str, registry_url: str | None = None, *, insecure: bool = False, ca_file: str | None = None,
               require_signatures: bool = False) -> EditResult:
    """Request *ref* in forge.yaml (append, or replace the same plugin's request) and re-lock.

    A reference without a version or specifier is written as a compatible request for the
    version it resolves to now (``alice/gspo`` -> ``alice/gspo@>=1.0.0``), as uv does.
    """
    from .lock import open_experiment_registry

    root = find_experiment_root(directory)
    path = root / FILENAME
    text = _read(path)
    exp = parse_experiment(load_yaml(text, str(path)), root)
    req = parse_request(ref.strip())
    registry = open_experiment_registry(exp, registry_url, insecure=insecure, ca_file=ca_file)
    if req.specifier is None:
        from ..registry.resolve import resolve

        ref = f"{req.owner}/{req.name}@>={resolve(registry, req.request).version}"
        req = parse_request(ref)
    items = [r.text for r in exp.plugins]
    index = next((i for i, r in enumerate(exp.plugins) if r.name == req.name), None)
    if index is not None:
        if exp.plugins[index].request == req.request:
            action, new_items, upgrade = "unchanged", items, None
        else:
            new_items = items[:index] + [ref.strip()] + items[index + 1 :]
            action, upgrade = "replaced", {req.name}
    else:
        new_items = items + [ref.strip()]
        action, upgrade = "added", None
    new_text = text if action == "unchanged" else set_plugins_text(text, new_items, replace_index=index)
    new_exp = _reparse(new_text, path, root, new_items)
    result = resolve_lock(new_exp, registry, upgrade=upgrade, require_signatures=require_signatures)
    yaml_written = new_text != text
    if yaml_written:
        _atomic_write(path, new_text)
    result = replace(result, written=write_lock(result.lock, new_exp.lock_path))
    return EditResult(
        action=action,
        request=req.request,
        lock=result,
        yaml_written=yaml_written,
        changes=result.changes,
    )


def remove_plugin(directory: str | os.PathLike, name: str, registry_url: str | None = None, *, insecure: bool = False, ca_file: str | None = None) -> EditResult:
    """Drop plugin *name* (``name`` or ``owner/name``) from forge.yaml and from the lock."""
    root = find_experiment_root(directory)
    path = root / FILENAME
    text = _read(path)
    exp = parse_experiment(load_yaml(text, str(path)), root)
    wanted = name.strip()
    index = next(
        (i for i, r in enumerate(exp.plugins) if wanted in (r.name, f"{r.owner}/{r.name}", r.text)), None
    )
    if index is None:
        names = ", ".join(r.name for r in exp.plugins) or "none"
        raise UsageError(f"forge.yaml does not request a plugin '{wanted}'", hint=f"requested: {names}")
    removed = exp.plugins[index]
    new_items = [r.text for i, r in enumerate(exp.plugins) if i != index]
    new_text = set_plugins_text(text, new_items)
    new_exp = _reparse(new_text, path, root, new_items)
    previous = read_lock(exp.lock_path)
    lock = None
    if previous is not None:
        reduced = LockFile(plugins=tuple(e for e in previous.plugins if e.name != removed.name), registry=previous.registry)
        if not stale_reasons(new_exp.plugins, reduced):
            lock = LockResult(lock=reduced, written=False, changes=[f"removed {removed.request}"])
    if lock is None:
        from .lock import open_experiment_registry

        registry = open_experiment_registry(new_exp, registry_url, insecure=insecure, ca_file=ca_file)
        lock = resolve_lock(new_exp, registry, previous=previous)
    _atomic_write(path, new_text)
    lock = replace(lock, written=write_lock(lock.lock, new_exp.lock_path))
    return EditResult(
        action="removed",
        request=removed.request,
        lock=lock,
        yaml_written=True,
        changes=lock.changes,
    )


def _reparse(new_text: str, path: Path, root: Path, expected: list) -> Experiment:
    new_exp = parse_experiment(load_yaml(new_text, str(path)), root)
    if [r.text for r in new_exp.plugins] != expected:
        raise ManifestError(
            f"{path}: could not edit the plugins list safely (got {[r.text for r in new_exp.plugins]}, wanted {expected})",
            hint="edit forge.yaml by hand and run: forge lock",
        )
    return new_exp


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{path}: no forge.yaml here") from None


def _atomic_write(path: Path, text: str) -> None:
    """Replace forge.yaml atomically, keeping its permissions."""
    mode = 0o644
    with contextlib.suppress(OSError):
        mode = os.stat(path).st_mode & 0o777
    atomic.write_file(path, text, mode)
