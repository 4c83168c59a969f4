"""The catalogue's pages: the catalogue document (:mod:`.collect`) rendered as static HTML.

``index.html`` lists every plugin (search and filters by name, kind, owner, patch target
and yanked); ``plugins/<owner>/<name>.html`` shows each version under an anchor of its own
(:func:`.escape.anchor`). Links are relative, so the folder works moved, under a sub-path
of a web server and from ``file://``. Every value from the registry goes through
:mod:`.escape`; nothing depends on the time or the order of a listing, so the same
document renders to the same bytes.

Laptop side.
"""

from __future__ import annotations

import json

from .assets import CSP, SCRIPT, STYLE
from .escape import anchor, attr, href, text


def plugin_path(owner: str, name: str) -> str:
    """The page of ``owner/name``, relative to the catalogue's root."""
    return f"plugins/{owner}/{name}.html"


def page(title: str, body: str, doc: dict, root: str) -> str:
    """A whole page: head (the policy, the style), *body*, the footer saying what it was built from, the script."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{text(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}{footer(doc, root)}"
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def footer(doc: dict, root: str) -> str:
    keys = doc["trust"]["keys"]
    listed = "".join(f"<li><code>{text(k['key_id'])}</code> for {text(k['owner'])}</li>" for k in keys)
    trust = (f"the trust file's {len(keys)} key{'s' if len(keys) != 1 else ''} "
             f"(<span class=\"mono\" id=\"trust-digest\">{text(doc['trust']['keys_digest'])}</span>)"
             if keys else "a trust file that trusts no key")
    return (
        "<footer>\n"
        f"<p>Verified when built, under {trust}, from registry <code>{text(doc['registry'])}</code> in state "
        f"<span class=\"mono\" id=\"registry-state\">{text(doc['registry_state'])}</span>. A page built from another state "
        "of the registry, or under other keys, shows other digests here. "
        f"<a href=\"{href(root + 'catalog.json')}\">catalog.json</a> holds the same content.</p>\n"
        + (f"<details><summary>Trusted key ids</summary><ul>{listed}</ul></details>\n" if keys else "")
        + "</footer>\n"
    )


def render_index(doc: dict) -> str:
    plugins = doc["plugins"]
    kinds = sorted({p["kind"] for p in plugins if p["kind"]})
    owners = sorted({p["owner"] for p in plugins})
    targets = sorted({t for p in plugins for t in p["targets"]})

    def select(name: str, label: str, values, labels=None) -> str:
        options = "".join(f"<option value=\"{attr(v)}\">{text(labels[i] if labels else v)}</option>" for i, v in enumerate(values))
        return (f"<select id=\"f-{name}\" aria-label=\"{label}\"><option value=\"\">{label}: any</option>"
                f"{options}</select>")

    items = []
    for p in plugins:
        search = " ".join([p["ref"], p["kind"] or "", p["description"] or "", *p["targets"]]).lower()
        badges = f"<span class=\"badge\">{text(p['kind'])}</span>" if p["kind"] else ""
        if p["latest_signature"] == "verified":
            badges += "<span class=\"badge ok\">signed</span>"
        if p["yanked"]:
            badges += f"<span class=\"badge warn\">{len(p['yanked'])} yanked</span>"
        if p["problems"]:
            badges += f"<span class=\"badge bad\">{len(p['problems'])} failed verification</span>"
        latest = f"{p['latest']}" if p["latest"] else "-"
        n = len(p["versions"])
        items.append(
            f"<li data-search=\"{attr(search)}\" data-kind=\"{attr(p['kind'] or '')}\" data-owner=\"{attr(p['owner'])}\" "
            f"data-targets=\"{attr(chr(10).join(p['targets']))}\" data-yanked=\"{'yes' if p['yanked'] else 'no'}\">"
            f"<a class=\"name\" href=\"{href(plugin_path(p['owner'], p['name']))}\">{text(p['ref'])}</a>{badges}"
            f"<div class=\"meta\">latest {text(latest)} · {n} version{'s' if n != 1 else ''}"
            + (f" · targets {text(', '.join(p['targets']))}" if p["targets"] else "") + "</div>"
            + (f"<p class=\"desc\">{text(p['description'].strip(), keep=chr(10))}</p>" if p["description"] else "")
            + "</li>"
        )
    body = (
        "<header class=\"top\"><h1>Plugin catalogue</h1>"
        f"<p>{len(plugins)} plugins in registry <code>{text(doc['registry'])}</code></p></header>\n<main>\n"
        "<div class=\"filters\" role=\"search\">"
        "<input id=\"q\" type=\"search\" placeholder=\"Search name, description, target\" aria-label=\"Search\" autocomplete=\"off\">"
        + select("kind", "kind", kinds) + select("owner", "owner", owners) + select("target", "patch target", targets)
        + select("yanked", "yanked", ["yes", "no"], ["has yanked versions", "no yanked version"])
        + "</div>\n<p id=\"count\" aria-live=\"polite\"></p>\n"
        f"<ul class=\"plugins\">\n{chr(10).join(items)}\n</ul>\n</main>\n"
    )
    return page("Plugin catalogue", body, doc, "")


def render_plugin(doc: dict, p: dict) -> str:
    versions = p["versions"]
    struck = ' class="yanked" title="yanked"'
    nav = "".join(f"<a href=\"#{anchor(v['version'])}\"{struck if v['yank']['yanked'] else ''}>{text(v['version'])}</a>"
                  for v in reversed(versions))
    sections = "".join(version_section(v) for v in reversed(versions))
    body = (
        f"<header class=\"top\"><p><a href=\"{href('../../index.html')}\">← all plugins</a></p>"
        f"<h1>{text(p['ref'])}</h1>"
        + (f"<p class=\"desc\">{text(p['description'].strip(), keep=chr(10))}</p>" if p["description"] else "")
        + f"</header>\n<main>\n<nav class=\"versions\" aria-label=\"versions\">{nav}</nav>\n{sections}</main>\n"
    )
    return page(p["ref"], body, doc, "../../")


def signature_html(sig: dict) -> str:
    status = sig["status"]
    cls = {"verified": "ok", "refused": "bad", "unknown": "bad"}.get(status, "warn")
    out = f"<span class=\"badge {cls} sig\">{text(status)}</span>"
    keys = [f"<code class=\"key-id\">{text(k['key_id'])}</code> ({text(k['key_type'])}"
            + ("" if k["trusted"] else ", not trusted here") + ")" for k in sig["keys"]]
    if keys:
        out += " by " + ", ".join(keys)
    if sig["error"]:
        out += f"<div class=\"alert\">{text(sig['error'])}</div>"
    return out


def value_html(value) -> str:
    return f"<code>{text(json.dumps(value, ensure_ascii=False))}</code>"


def params_html(params: dict) -> str:
    if not params:
        return "-"
    rows = []
    for key, p in params.items():
        default = value_html(p["default"]) if "default" in p else "<span class=\"meta\">none</span>"
        choices = ", ".join(value_html(c) for c in p["choices"]) if p.get("choices") is not None else "<span class=\"meta\">any</span>"
        rows.append(f"<tr data-param=\"{attr(key)}\"><td data-label=\"param\"><code>{text(key)}</code></td>"
                    f"<td data-label=\"type\">{text(p['type'])}</td><td class=\"default\" data-label=\"default\">{default}</td>"
                    f"<td class=\"choices\" data-label=\"choices\">{choices}</td>"
                    f"<td class=\"desc\" data-label=\"description\">{text(p.get('description', ''), keep=chr(10))}</td></tr>")
    return ("<div class=\"scroll\"><table class=\"params\"><thead><tr><th>param</th><th>type</th><th>default</th>"
            f"<th>choices</th><th>description</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def requires_text(req: dict) -> str:
    parts = [f"core {req['core']}"] if "core" in req else []
    parts += [f"python {req['python']}"] if "python" in req else []
    parts += [f"{k} {v}".strip() for k, v in sorted((req.get("packages") or {}).items())]
    return "; ".join(parts) or "-"


def change_html(change: dict | None) -> str:
    """The ``plugin diff --stat`` of a version against the previous one: fields and files, no contents."""
    if change is None:
        return "<span class=\"meta\">no earlier verified version to compare with</span>"
    fields = change["fields"]
    if not fields:
        return f"same content as {text(change['from'])}"
    lines = []
    for key, c in sorted(fields.items()):
        if key == "files":
            for what in ("added", "removed", "changed"):
                if c[what]:
                    shown = ", ".join(f"<code>{text(f)}</code>" for f in c[what][:20])
                    more = f" and {len(c[what]) - 20} more" if len(c[what]) > 20 else ""
                    lines.append(f"files {what} ({len(c[what])}): {shown}{more}")
        elif key in ("params", "requires"):
            for what in ("added", "removed", "changed"):
                if c[what]:
                    lines.append(f"{key} {what}: " + ", ".join(f"<code>{text(k)}</code>" for k in sorted(c[what])))
        elif "added" in c and "removed" in c:
            moved = [f"+{x}" for x in c["added"]] + [f"-{x}" for x in c["removed"]]
            lines.append(f"{key}: " + ", ".join(f"<code>{text(m)}</code>" for m in moved))
        else:
            lines.append(f"{key}: <code>{text(c.get('old'))}</code> → <code>{text(c.get('new'))}</code>")
    return f"since {text(change['from'])}:<ul class=\"change\">" + "".join(f"<li>{line}</li>" for line in lines) + "</ul>"


def version_section(v: dict) -> str:
    vid = anchor(v["version"])
    head = f"<h2><a href=\"#{vid}\">{text(v['version'])}</a>"
    yank = v["yank"]
    if yank["yanked"]:
        head += "<span class=\"badge warn\">yanked</span>"
    if not v["integrity"]["ok"]:
        head += "<span class=\"badge bad\">failed verification</span>"
    head += "</h2>"
    alerts = ""
    if not v["integrity"]["ok"]:
        alerts += f"<div class=\"alert integrity\">Not verified: {text(v['integrity']['error'])}</div>"
    if yank["yanked"]:
        alerts += (f"<div class=\"alert warn yank\">Yanked ({text(yank['standing'] or '')}): "
                   f"<span class=\"reason\">{text(yank['reason'] or '', keep=chr(10))}</span></div>")
    for st in yank.get("unverified") or []:
        alerts += (f"<div class=\"note unverified-yank\">An unverified {text(st['action'])} (#{text(st['sequence'])}, "
                   "signed by no key trusted for this owner: it changes nothing): "
                   f"<span class=\"reason\">{text(st['reason'] or 'no reason', keep=chr(10))}</span></div>")
    if yank.get("error"):
        alerts += f"<div class=\"alert yank-error\">Yank facts refused: {text(yank['error'])}</div>"
    rows = [("tree digest", f"<code>{text(v['tree_digest'] or '-')}</code>"),
            ("signature", signature_html(v["signature"])),
            ("yank", f"<span class=\"yank-summary\">{text(yank['summary'])}</span>")]
    m = v["manifest"]
    if m is not None:
        rows += [("kind", f"{text(m['kind'])} (load: {text(m['load'])})"),
                 ("targets", text(", ".join(m["targets"])) or "-"),
                 ("requires", text(requires_text(m["requires"])))]
    rows.append(("change", change_html(v["change"])))
    facts = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in rows)
    description = (f"<p class=\"desc\">{text(m['description'].strip(), keep=chr(10))}</p>"
                   if m is not None and m["description"] else "")
    params = f"<h3>params</h3>{params_html(m['params'])}" if m is not None else ""
    cid = f"add-{vid}"
    add = (f"<div class=\"add\"><code id=\"{cid}\">{text(v['add'])}</code>"
           f"<button type=\"button\" class=\"copy\" data-for=\"{cid}\">Copy</button></div>")
    return (f"<section class=\"version\" id=\"{vid}\">{head}{alerts}{description}<dl class=\"facts\">{facts}</dl>"
            f"{params}{add}</section>\n")
