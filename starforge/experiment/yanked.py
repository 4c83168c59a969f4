"""Locked versions that are yanked now: refused, or run knowingly (SPEC §18).

``forge lock --check``, ``forge submit`` and ``forge plan`` call :func:`check_yanked` on
the lock they use. A yanked version runs only when the experiment acknowledges it
(``allow_yanked: true`` on its request, recorded in the lock) or for one command with
``--allow-yanked``; otherwise :class:`~starforge.errors.YankedError` (exit 18) names the
reason, as of when, and the newest version not yanked that the request admits. The yank
facts are :func:`starforge.registry.yank.yank_facts`'s: the registry's when it answers,
else the last ones this machine saw.

Laptop side.
"""

from __future__ import annotations

ACKNOWLEDGED = "forge.yaml"  # allow_yanked: true on the request, recorded in the lock
ALLOWED_ONCE = "--allow-yanked"
REPLAY = "replay"  # forge jobs replay runs what the old job ran, yanked or not, and warns


def check_yanked(lock, registry, *, allow: bool = False, trust=None, allowed_by: str = ALLOWED_ONCE) -> tuple:
    """The yanked versions of *lock* that may run, as job record entries
    (``{ref, tree_digest, reason, sequence, as_of, allowed_by}``); :class:`YankedError` for
    the first one that may not (and how many more there are). With *allow*, every yanked
    version may run, recorded as allowed by *allowed_by*."""
    from ..registry.yank import yank_facts

    ran: list = []
    refused: list = []
    for entry in lock.plugins:
        facts = yank_facts(registry, entry.owner, entry.name, entry.version, entry.tree_digest, trust=trust)
        if not facts.yanked:
            continue
        if entry.allow_yanked or allow:
            assert facts.current is not None
            ran.append({"ref": entry.ref, "tree_digest": entry.tree_digest, "reason": facts.reason,
                        "sequence": facts.current.sequence, "as_of": facts.as_of,
                        "allowed_by": ACKNOWLEDGED if entry.allow_yanked else allowed_by})
        else:
            refused.append((entry, facts))
    if refused:
        entry, facts = refused[0]
        raise yanked_error(facts, entry.request, registry, trust, more=len(refused) - 1)
    return tuple(ran)


def yanked_error(facts, request: str, registry, trust=None, *, more: int = 0):
    """:class:`YankedError` for the version of *facts* (yanked), which *request* selects."""
    from ..errors import YankedError
    from ..registry.resolve import newest_unyanked
    from ..terminal_text import shown

    instead = newest_unyanked(registry, request, trust) if registry is not None else None
    if instead is not None:
        fix = f"{instead} is the newest version that {request} admits and that is not yanked; " \
              f"'forge lock' moves {facts.name} to it"
    else:
        newest = newest_unyanked(registry, f"{facts.owner}/{facts.name}", trust) if registry is not None else None
        fix = f"no version that {request} admits is free of a yank" + (
            f"; the newest version not yanked is {newest}: request {facts.owner}/{facts.name}@{newest} in forge.yaml"
            if newest is not None else "")
    also = f" ({more} more locked version{'s are' if more > 1 else ' is'} yanked)" if more else ""
    return YankedError(
        f"{facts.ref} is yanked ({facts.when()}): {shown(facts.reason)}{also}",
        hint=f"{fix}; to run it knowingly: {{request: {request}, allow_yanked: true}} in forge.yaml, "
             "or --allow-yanked for one submit or plan",
    )


def replay_warning(ran: dict) -> str:
    """The warning of ``forge jobs replay`` for one yanked version it runs again."""
    from ..terminal_text import shown

    return shown(f"{ran['ref']} is yanked (as of {ran['as_of']}): {ran['reason']}; the replay runs it as the job ran it")
