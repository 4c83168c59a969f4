"""Several callers racing on one thing (a registry tag, a referrers list), released together."""

from __future__ import annotations

import threading


def all_at_once(run, items: list) -> list:
    """``run(item, go)`` for each of *items*, each in a thread of its own: a call does what it
    must before the race, then calls ``go()``, which returns once every call has called it.
    Returns what the calls raised (an empty list: none failed)."""
    barrier = threading.Barrier(len(items))
    errors: list = []

    def one(item):
        try:
            run(item, barrier.wait)
        except Exception as exc:  # noqa: BLE001 - collected for the test to assert on
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(item,)) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
