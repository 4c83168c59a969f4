"""Which jobs ran a plugin version, a yanked version, or a parameter value (``forge jobs list
--plugin/--yanked/--param``, SPEC §18): the job index asked, the answer described.

Laptop side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import UsageError

DIGEST_RE = re.compile(r"^sf1:[0-9a-f]{64}$")
PLUGIN_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*(@[^@\s/]+)?$")


@dataclass
class FoundJobs:
    """The jobs a query found, oldest first."""

    matches: list  # IndexedJob
    unknown: list  # IndexedJob whose pins are not known
    ran: dict = field(default_factory=dict)  # job id -> lines saying what it ran that matched
    notes: list = field(default_factory=list)  # for stderr: an index rebuilt, records that cannot be read
    described: str = ""  # "ran alice/x@1.0" — for "no job …"


def check_plugin_query(text: str) -> str:
    """*text* as given to ``--plugin``, refused unless ``owner/name[@version]`` or ``sf1:<64 hex>``."""
    text = text.strip()
    if DIGEST_RE.match(text) or PLUGIN_RE.match(text):
        return text
    raise UsageError(f"--plugin '{text}': expected owner/name, owner/name@version or sf1:<64 hex digits>",
                     hint="e.g. forge jobs list --plugin starforge/opsd-patch@1.2.0")


def check_param_query(text: str) -> tuple:
    """``(key, raw value)`` of a ``--param KEY=VALUE``."""
    from ..package_format.manifest import PARAM_KEY_RE

    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not PARAM_KEY_RE.match(key):
        raise UsageError(f"--param '{text}': expected KEY=VALUE with a dotted key", hint="e.g. --param opsd.scale=0.5")
    return key, raw


def find_jobs(*, plugin: str | None = None, yanked: bool = False, params: tuple = (), store=None,
              registry: dict | None = None, yank_check=None) -> FoundJobs:
    """The jobs that ran *plugin* (and, with *yanked*, a version yanked now) and had *params*.

    *yank_check* (default: the yank facts of the registry *registry* opens — ``{registry,
    insecure, ca_file}``, default the configured one) maps the pins seen to the yanked ones:
    ``({digest: line}, notes)``.
    """
    from ..jobs.jobindex import JobIndex

    wanted_plugin = check_plugin_query(plugin) if plugin else None
    wanted_params = [check_param_query(p) for p in params]
    index = JobIndex(store)
    sync, matches, unknown = index.query(plugin=wanted_plugin, params=wanted_params)
    notes = sync_notes(sync)
    ran: dict = {}
    if wanted_plugin:
        from ..jobs.jobindex import pin_matches

        for job in matches:
            ran[job.record.id] = [f"ran {p['ref']} {p['digest']}" for p in job.record.plugins if pin_matches(p, wanted_plugin)]
    if yanked:
        pins = {(p["ref"], p["digest"]) for job in matches for p in job.record.plugins}
        if yank_check is None:
            yanked_lines, yank_notes = _current_yanks(sorted(pins), **(registry or {}))
        else:
            yanked_lines, yank_notes = yank_check(sorted(pins))
        notes.extend(yank_notes)
        kept = []
        for job in matches:
            lines = [yanked_lines[p["digest"]] for p in job.record.plugins if p["digest"] in yanked_lines]
            if lines:
                ran[job.record.id] = ran.get(job.record.id, []) + lines
                kept.append(job)
        matches = kept
    said = [f"ran {wanted_plugin}" if wanted_plugin else "", "ran a version yanked now" if yanked else "",
            " and ".join(f"had {k}={v}" for k, v in wanted_params)]
    return FoundJobs(matches=matches, unknown=unknown, ran=ran, notes=notes,
                     described=" and ".join(s for s in said if s))


def sync_notes(sync) -> list:
    """The index's one-line notes: rebuilt (and why), answered from the records, unreadable records."""
    notes = []
    if sync.rebuilt and (sync.rebuilt != "missing" or sync.read):
        notes.append(f"note: job index {sync.rebuilt}: rebuilt from {sync.read} job record(s)")
    if sync.where.startswith("records"):
        notes.append(f"note: no job index: read the {sync.where}")
    for path, problem in sync.unreadable:
        notes.append(f"warning: {path}: {problem}; the other jobs are listed (forge jobs rm removes it)")
    return notes


def _current_yanks(pins: list, registry: str | None = None, insecure: bool = False, ca_file: str | None = None) -> tuple:
    """``({digest: line}, notes)`` for the versions among *pins* (``(ref, digest)``) yanked now:
    the configured registry's word when it answers, else the last facts this machine saw
    (:func:`starforge.registry.yank.yank_facts`); built-ins have no owner and are never yanked."""
    from ..errors import ForgeError
    from ..jobs.jobindex import pin_parts
    from ..registry.factory import open_registry
    from ..registry.store import PluginStore

    try:
        opened = open_registry(registry, insecure=insecure, ca_file=ca_file)
    except ForgeError:
        opened = None
    store = PluginStore(opened)
    yanked, notes, offline = {}, [], set()
    for ref, digest in pins:
        owner, name, version = pin_parts({"ref": ref})
        if not owner:
            continue
        facts = store.yank(owner, name, version, digest)
        if not facts.live:
            offline.add(f"{ref} (as of {facts.as_of or 'never'})")
        if facts.yanked:
            yanked[digest] = f"ran {ref} {digest}: yanked: {facts.reason}"
    if offline:
        notes.append("note: the registry did not answer; the last yank facts seen here decide for "
                     + ", ".join(sorted(offline)))
    return yanked, notes
