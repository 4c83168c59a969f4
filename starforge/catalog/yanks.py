"""Everything the catalogue shows of a yank (SPEC §18): one verdict and one reason per version.

:func:`yank_of` is the only place the catalogue asks about yanks; the pages and
``catalog.json`` show what it returns. It asks the plugin store (:meth:`starforge.registry.store.PluginStore.yank`),
the one answer to "is this version yanked now": the statements the registry serves, judged
by the trust file (for an owner with trusted keys only a yank signed by one of them counts;
an unsigned one is shown as unverified and changes nothing), checked against the yanks this
machine remembers (a remembered yank the registry no longer serves is tampering, shown as
such). Nothing time-dependent is shown (the statement's own time, never "as of now"), so an
unchanged registry still renders to the same bytes.

Laptop side.
"""

from __future__ import annotations

import hashlib

from ..errors import ForgeError


def yank_of(registry, info, trust) -> dict:
    """What the catalogue shows of the yank of the published version *info*:
    ``{known, yanked, reason, standing, summary, unverified, error}``. *standing* says whose word
    the enforced statement is (``verified``, ``unsigned``, ``not verified here``);
    *unverified* lists the statements shown but not enforced (``[{action, reason}]``)."""
    from ..registry.store import PluginStore
    from ..registry.yank import NOT_ENFORCED, in_words

    if registry is None or info is None:
        return {"known": False, "yanked": False, "reason": None, "standing": None,
                "summary": "no yank information: the version could not be read", "unverified": [], "error": None}
    try:
        facts = PluginStore(registry, trust=trust).yank(info.owner, info.name, info.version, info.tree_digest)
    except ForgeError as exc:
        return {"known": False, "yanked": False, "reason": None, "standing": None,
                "summary": "yank facts refused", "unverified": [], "error": exc.message}
    summary = in_words(facts)
    if not facts.live:
        summary += " (the registry did not answer: the last facts seen on this machine)"
    unverified = [{"action": s.action, "reason": s.reason, "sequence": s.sequence, "standing": NOT_ENFORCED}
                  for s in facts.unenforced]
    return {"known": True, "yanked": facts.yanked, "reason": facts.reason, "standing": facts.current_standing,
            "summary": summary, "unverified": unverified, "error": None}


def yank_state(registry, info) -> str:
    """A digest of the yank statements *registry* serves for *info* (part of what the catalogue's
    registry state covers, so a new yank makes a stale page recognisable); empty when none."""
    try:
        served = registry.yank_statements(info.owner, info.name, info.version, info.tree_digest)
    except ForgeError as exc:
        return "unreadable: " + exc.message
    return ",".join(sorted(hashlib.sha256(e).hexdigest() for e in served))
