"""Everything the catalogue shows of a yank (SPEC §18): one verdict and one reason per version.

:func:`yank_of` is the only place the catalogue asks about yanks; the pages and
``catalog.json`` show what it returns. This release has no yank statements in its
registries, so it answers "no yank information" for every version: ``known`` is False and
nothing is shown as yanked.

>>> yank_of(None, None, None)["summary"]
'no yank information'

Laptop side.
"""

from __future__ import annotations

NO_INFORMATION = "no yank information"


def yank_of(registry, info, trust) -> dict:
    """What the catalogue shows of the yank of the published version *info*:
    ``{known, yanked, reason, standing, summary}``. *standing* says whose word the yank is
    (a signed yank, an unsigned one) and whether it is enforced here."""
    return {"known": False, "yanked": False, "reason": None, "standing": None, "summary": NO_INFORMATION}


def yank_state(registry, info) -> str:
    """A digest of the yank statements *registry* serves for *info* (part of what the catalogue's
    registry state covers, so a new yank makes a stale page recognisable); empty when none."""
    return ""
