"""``forge catalog serve``: a preview of a built catalogue over HTTP, on 127.0.0.1 only.

A preview, not a production server: the standard library's file server, bound to the
loopback address (never another interface), serving only files under the folder, with
``nosniff`` so a browser takes each file for what its name says.

Laptop side.
"""

from __future__ import annotations

import functools
import os
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..errors import UsageError
from .output import DATA, INDEX

HOST = "127.0.0.1"


class CatalogHandler(SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


def check_catalog_dir(folder: str | os.PathLike) -> Path:
    """*folder* when it holds a built catalogue; :class:`UsageError` otherwise."""
    path = Path(folder)
    if not (path / INDEX).is_file() or not (path / DATA).is_file():
        raise UsageError(f"{folder} holds no catalogue ({INDEX} and {DATA})",
                         hint=f"build one first: forge catalog build -o {folder}")
    return path


def make_server(folder: str | os.PathLike, port: int = 8000) -> ThreadingHTTPServer:
    """A server of the catalogue at *folder* on 127.0.0.1:*port* (0: a free port), not yet serving."""
    path = check_catalog_dir(folder)
    handler = functools.partial(CatalogHandler, directory=str(path))
    try:
        return ThreadingHTTPServer((HOST, port), handler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}",
                         hint="choose another port with --port N (0 picks a free one)") from None
