"""Progress bars for long transfers: rich on a terminal, nothing otherwise.

>>> with transfer_progress("pull alice/opsd-patch@1.2.0", 1 << 20) as update:
...     if update:
...         update(4096, 1 << 20)
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Iterator

from .base import Progress


@contextlib.contextmanager
def transfer_progress(description: str, total: int, stream: IO | None = None) -> Iterator[Progress | None]:
    """Yield a ``(done, total)`` callback drawing a bar on *stream* (stderr), or None off a terminal."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()) or os.environ.get("FORGE_VERBOSITY") == "-1":  # forge -q
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TransferSpeedColumn
    from rich.progress import Progress as Bar

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Bar(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task(description, total=total or None)

        def update(done: int, total_now: int) -> None:
            bar.update(task, completed=done, total=total_now or total or None)

        yield update
