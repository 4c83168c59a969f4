# Which version specifiers a requirement check answers without packaging's SpecifierSet.
#
# requires.py checks by it; the node entry (codedir.py) asks it which modules of the
# vendored packaging a job's checks will import, to compile only those. The entry runs
# this module in its own namespace under whatever ``python3`` the node has (node_entry.py),
# so it parses on old interpreters (no f-strings, no annotations, no walrus).
#
# Standard library only.
"""Plain specifiers: clauses that packaging answers by comparing versions alone.

A clause is plain when it is ``>=``, ``<=``, ``==`` or ``!=`` and a release (digits and
dots: no wildcard, no local, no pre-, post- or dev-release, no epoch). packaging's own
``Specifier.contains`` does exactly that for these clauses when the version tested has no
local part; anything else goes to its ``SpecifierSet``, whose module (with its range
engine) costs every process that checks a ``requires`` more than the rest of the check
together.

>>> plain_clauses(">=3.10, !=3.12.0")
[('>=', '3.10'), ('!=', '3.12.0')]
>>> plain_clauses(">=3.10,<4"), plain_clauses("~=1.2")
(None, None)
>>> is_release("3.11.7"), is_release("0.2.0.dev1")
(True, False)
"""

import re

# Patterns, compiled on first use (re's cache): a process that imports this module and
# checks no requirement (every worker imports the code directory's module) compiles nothing.
_RELEASE = r"[0-9]+(?:\.[0-9]+)*"
_PLAIN = r"\s*(>=|<=|==|!=)\s*(" + _RELEASE + r")\s*"


def is_release(version):
    """Whether *version* is a bare release (``3.11.7``, ``0.1.0``): digits and dots only."""
    return re.fullmatch(_RELEASE, version) is not None


def plain_clauses(spec):
    """``[(operator, release)]`` when every clause of *spec* is plain, else None."""
    clauses = []
    for clause in spec.split(","):
        match = re.fullmatch(_PLAIN, clause)
        if match is None:
            return None
        clauses.append((match.group(1), match.group(2)))
    return clauses


def plain_text(spec):
    """How packaging's ``str(SpecifierSet(spec))`` writes a plain *spec* (each clause without
    spaces, the same clause once, sorted), or None when *spec* is not plain, or when two of its
    clauses differ only in trailing zeros (``>=1.0, >=1.0.0``: SpecifierSet keeps either one).

    >>> plain_text(" >= 3.10 , !=3.12.0")
    '!=3.12.0,>=3.10'
    """
    clauses = plain_clauses(spec)
    if clauses is None:
        return None
    texts = set(op + release for op, release in clauses)
    if len(set((op, release_numbers(release)) for op, release in clauses)) != len(texts):
        return None
    return ",".join(sorted(texts))


def release_numbers(release):
    """How PEP 440 orders a bare release: its numbers, trailing zeros dropped (``3.10`` is ``3.10.0``)."""
    parts = [int(p) for p in release.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)
