"""JSON from untrusted places (bundles, registries, envelopes, locks), with its nesting bounded.

``json.loads`` of ``[[[[…]]]]`` 100,000 levels deep raises :class:`RecursionError`, which
no ``except ValueError`` catches: a crafted bundle or registry answer ended ``forge`` in a
traceback. A document that parses but nests hundreds of levels would do the same later, in
a comparison or ``json.dumps``. :func:`loads` raises :class:`NestingError` — a
:class:`ValueError`, so every caller's "not valid JSON" path reports it in one line — for
either. 100 levels, as for YAML input (SPEC §12); StarForge's own documents nest fewer
than ten.

Cluster side: standard library only.

>>> loads('{"a": [1, 2]}')
{'a': [1, 2]}
>>> try:
...     loads("[" * 101 + "]" * 101)
... except ValueError as exc:
...     print(exc)
JSON nested deeper than 100 levels
"""

from __future__ import annotations

import json

MAX_DEPTH = 100


class NestingError(ValueError):
    """JSON nested deeper than :data:`MAX_DEPTH` levels."""


def loads(data: str | bytes | bytearray, max_depth: int = MAX_DEPTH):
    """``json.loads(data)``, refusing nesting deeper than *max_depth* (:class:`NestingError`)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise NestingError(f"JSON nested deeper than {max_depth} levels") from None
    if isinstance(value, (dict, list)) and _too_deep(value, max_depth):
        raise NestingError(f"JSON nested deeper than {max_depth} levels")
    return value


def _too_deep(value, max_depth: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False
