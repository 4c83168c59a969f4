"""Import a plugin from the bytes that were verified, never from the disk again.

:class:`SnapshotFinder` sits on ``sys.meta_path`` ahead of the normal finders and answers
only for the plugin's own top-level names, from the snapshot of the verified tree: in the
launcher the bytes :func:`.digest.verify_tree` read and digested; in any other process a
:class:`.digest.HashedFiles`, which reads a file when it is first imported (or read through
:meth:`SnapshotLoader.get_data` or ``importlib.resources``) and hashes those very bytes against the JobSpec's
per-file hash before they are compiled or returned. Nothing can change between the check
and the use, and no bytecode is written into the plugin tree. A name below one of those top-level
names that is not in the snapshot fails to import instead of falling through to the disk
(a file added after verification is never executed).

The code is compiled from those bytes. Compiled code is kept in one place only: the job's
code directory on this node (:func:`.codedir.make_code_dir`: made by this job's node
entry under the job's ``TMPDIR``, mode 0700, this user's, checked by every process before
it imports from it), under the sha256 of the very bytes that were verified and compiled,
so the first process of the job that imports a module compiles it and the others load
that code instead of compiling it again. A process that did not import StarForge from such
a directory compiles in memory and writes nothing; nothing is ever written into the plugin
tree, no per-user cache is read, and ``sys.pycache_prefix`` is never touched.

Cluster side: standard library only.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import marshal
import os
import sys

from .codedir import code_root

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Iterable, Mapping

PLUGIN_CODE_DIR = "plugin-code"


def _job_code_dir() -> str | None:
    """The job's code directory when this runtime was imported from one (else None)."""
    return code_root(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


_CODE_DIR = _job_code_dir()
# The launcher compiles every eagerly installed module of the job: it holds that code in
# memory (hold_compiled) and writes it as one file (keep_compiled), one file created on the
# node instead of one per module; the job's other processes read it once.
_held: dict | None = None
_kept: dict | None = None


def _tag() -> str:
    return sys.implementation.cache_tag + (f".opt-{sys.flags.optimize}" if sys.flags.optimize else "")


def hold_compiled() -> None:
    """In the launcher: hold the plugin code compiled from now on, for :func:`keep_compiled`."""
    global _held
    if _CODE_DIR is not None:
        _held = {}


def keep_compiled() -> None:
    """Write the code held since :func:`hold_compiled` as one file of the code directory
    (``plugin-code/launcher.<cache tag>.bin``, atomically); code compiled later is kept one
    file per module, as in every other process."""
    global _held
    held, _held = _held, None
    if not held or _CODE_DIR is None:
        return
    from .atomic import write_file

    try:
        os.makedirs(os.path.join(_CODE_DIR, PLUGIN_CODE_DIR), mode=0o700, exist_ok=True)
        write_file(os.path.join(_CODE_DIR, PLUGIN_CODE_DIR, f"launcher.{_tag()}.bin"),
                   importlib.util.MAGIC_NUMBER + marshal.dumps(held), 0o600)
    except OSError:
        pass  # the job's other processes compile for themselves


def _kept_by_launcher(name: str):
    """The marshalled code the launcher kept under *name*, or None (the file read once per process)."""
    global _kept
    if _kept is None:
        _kept = {}
        try:
            with open(os.path.join(str(_CODE_DIR), PLUGIN_CODE_DIR, f"launcher.{_tag()}.bin"), "rb") as f:
                data = f.read()
            if data.startswith(importlib.util.MAGIC_NUMBER):
                kept = marshal.loads(data[len(importlib.util.MAGIC_NUMBER):])
                _kept = kept if isinstance(kept, dict) else {}
        except (OSError, ValueError, EOFError, TypeError):
            pass
    found = _kept.get(name)
    return found if isinstance(found, bytes) else None


def compile_verified(source: bytes, filename: str):
    """The code object of the verified *source* as *filename*, compiled once per job and node.

    Kept in the job's code directory under the sha256 of *source* (and of *filename*, which
    the code carries for tracebacks, and the interpreter's cache tag and optimization
    level); read back only there and only when it starts with this interpreter's magic
    number. Without a code directory: compiled here, nothing written.
    """
    cache = None
    if _CODE_DIR is not None:
        name = (f"{hashlib.sha256(source).hexdigest()}-{hashlib.sha256(filename.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"
                f".{_tag()}.pyc")
        cache = os.path.join(_CODE_DIR, PLUGIN_CODE_DIR, name)
        kept = _kept_by_launcher(name)
        try:
            if kept is not None:
                return marshal.loads(kept)
            with open(cache, "rb") as f:
                data = f.read()
            if data.startswith(importlib.util.MAGIC_NUMBER):
                return marshal.loads(data[len(importlib.util.MAGIC_NUMBER):])
        except (OSError, ValueError, EOFError, TypeError):
            pass
    code = compile(source, filename, "exec", dont_inherit=True)
    if cache is not None and _held is not None:
        _held[name] = marshal.dumps(code)
    elif cache is not None:
        from .atomic import write_file

        try:
            os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
            write_file(cache, importlib.util.MAGIC_NUMBER + marshal.dumps(code), 0o600)
        except OSError:
            pass  # compiled here all the same
    return code


class SnapshotLoader:
    """Loads modules of one plugin from its verified snapshot."""

    def __init__(self, root: str, contents: Mapping[str, bytes], modules: Mapping[str, tuple]) -> None:
        self.root = root
        self.contents = contents
        self.modules = modules  # fullname -> (relpath of the source or None, is_package)

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    # The importlib.abc interfaces, duck-typed: importing importlib.abc costs every
    # process of the job several milliseconds (it pulls in importlib.resources).

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        code = self.get_code(module.__name__)
        exec(code, module.__dict__)

    def is_package(self, fullname: str) -> bool:
        return self.modules[fullname][1]

    def get_source(self, fullname: str):
        rel = self.modules[fullname][0]
        if rel is None:
            return ""
        return importlib.util.decode_source(self.contents[rel])

    def get_filename(self, fullname: str) -> str:
        rel = self.modules[fullname][0]
        if rel is None:
            raise ImportError(f"{fullname} is a namespace directory", name=fullname)
        return self._path(rel)

    def get_code(self, fullname: str):
        rel = self.modules[fullname][0]
        if rel is None:
            return compile("", f"<namespace {fullname}>", "exec", dont_inherit=True)
        return compile_verified(self.contents[rel], self._path(rel))

    def get_resource_reader(self, fullname: str):
        """Resources of a package (``importlib.resources.files(pkg)``), from the snapshot."""
        rel, is_package = self.modules.get(fullname, (None, False))
        if not is_package:
            return None
        prefix = rel.rpartition("/")[0] if rel else fullname.replace(".", "/")
        return SnapshotResources(self.contents, prefix + "/" if prefix else "")

    def get_data(self, path: str) -> bytes:
        """Bytes of a file of the plugin, from the snapshot (``importlib.resources``, ``pkgutil``)."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        rel = rel.replace(os.sep, "/")
        if rel in self.contents:
            return self.contents[rel]
        raise FileNotFoundError(f"{path}: not part of the verified plugin tree")


class SnapshotResources:
    """``importlib.resources`` for a package of the snapshot: the files below its directory,
    read through the snapshot (hashed there in a worker), never through a disk path.

    ``files()`` makes it a reader importlib.resources uses natively, so nested resources
    (``files(pkg) / "data" / "x.json"``) work; without it, importlib wraps the legacy
    methods below, which know only the package's own directory ("Can't open orphan path").
    """

    def __init__(self, contents: Mapping[str, bytes], prefix: str) -> None:
        self._snapshot = contents
        self.prefix = prefix  # the package directory's relative path and "/", or ""

    def files(self) -> "SnapshotPath":
        return SnapshotPath(self._snapshot, self.prefix.rstrip("/"))

    def open_resource(self, resource: str):
        import io

        rel = self.prefix + resource
        if rel not in self._snapshot:
            raise FileNotFoundError(f"{resource}: not part of the verified plugin tree")
        return io.BytesIO(self._snapshot[rel])

    def resource_path(self, resource: str) -> str:
        # No path: a reader of the path would read the disk, not the checked bytes.
        raise FileNotFoundError(f"{resource}: plugin resources are read through the snapshot only")

    def is_resource(self, name: str) -> bool:
        return (self.prefix + name) in self._snapshot

    def contents(self):
        names = set()
        for rel in self._snapshot:
            if rel.startswith(self.prefix):
                names.add(rel[len(self.prefix):].partition("/")[0])
        return iter(sorted(names))


class SnapshotPath:
    """A file or directory of the verified snapshot, as ``importlib.resources`` traverses it
    (the ``Traversable`` protocol, duck-typed). Every read goes through the snapshot; it has
    no file-system path (``importlib.resources.as_file`` makes a copy of the checked bytes)."""

    def __init__(self, snapshot: Mapping[str, bytes], rel: str) -> None:
        self._snapshot = snapshot
        self._rel = rel  # "a/b/c.json", "" for the plugin's root; never with a leading or trailing "/"

    @property
    def name(self) -> str:
        return self._rel.rpartition("/")[2]

    def _below(self) -> str:
        return self._rel + "/" if self._rel else ""

    def is_file(self) -> bool:
        return self._rel in self._snapshot

    def is_dir(self) -> bool:
        below = self._below()
        return not self.is_file() and any(rel.startswith(below) for rel in self._snapshot)

    def iterdir(self):
        if not self.is_dir():
            raise NotADirectoryError(f"{self._rel or '.'}: not a directory of the verified plugin tree")
        below = self._below()
        names = sorted({rel[len(below):].partition("/")[0] for rel in self._snapshot if rel.startswith(below)})
        return iter([SnapshotPath(self._snapshot, below + name) for name in names])

    def joinpath(self, *descendants: str) -> "SnapshotPath":
        import posixpath

        rel = posixpath.normpath(posixpath.join(self._rel or ".", *[str(d) for d in descendants]))
        if rel == ".":
            rel = ""
        if rel.startswith(("../", "/")) or rel == "..":
            rel = "\0outside"  # names nothing of the tree: reads fail as not found
        return SnapshotPath(self._snapshot, rel)

    def __truediv__(self, child: str) -> "SnapshotPath":
        return self.joinpath(child)

    def open(self, mode: str = "r", *args, **kwargs):
        import io

        if mode not in ("r", "rb", "rt"):
            raise ValueError(f"{self._rel}: plugin resources are read-only (mode {mode!r})")
        if not self.is_file():
            raise FileNotFoundError(f"{self._rel or '.'}: not a file of the verified plugin tree")
        stream = io.BytesIO(self._snapshot[self._rel])
        return stream if "b" in mode else io.TextIOWrapper(stream, *args, **kwargs)

    def read_bytes(self) -> bytes:
        with self.open("rb") as f:
            return f.read()

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        with self.open("r", encoding=encoding, errors=errors) as f:
            return f.read()

    def __repr__(self) -> str:
        return f"<verified plugin resource {self._rel or '.'!r}>"


class SnapshotFinder:
    """Finds the modules of one verified plugin tree; placed at the front of ``sys.meta_path``."""

    def __init__(self, root: str, contents: Mapping[str, bytes], top_level: Iterable[str] = (), label: str = "") -> None:
        self.root = os.path.abspath(root)
        self.label = label or self.root
        modules: dict[str, tuple] = {}
        for rel in contents:
            if not rel.endswith(".py"):
                continue
            parts = rel[:-3].split("/")
            if not all(p.isidentifier() for p in parts):
                continue
            if parts[-1] == "__init__":
                if len(parts) > 1:
                    modules[".".join(parts[:-1])] = (rel, True)
            else:
                modules.setdefault(".".join(parts), (rel, False))
            for i in range(1, len(parts) - (1 if parts[-1] == "__init__" else 0)):
                # a directory holding Python files without __init__.py: a namespace package
                modules.setdefault(".".join(parts[:i]), (None, True))
        self.modules = modules
        self.top_level = frozenset(top_level) | {name.partition(".")[0] for name in modules}
        self.loader = SnapshotLoader(self.root, contents, modules)

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname.partition(".")[0] not in self.top_level:
            return None
        info = self.modules.get(fullname)
        if info is None:
            # Never fall through to the disk for the plugin's own names.
            raise ModuleNotFoundError(
                f"No module named '{fullname}' in the verified tree of {self.label}", name=fullname
            )
        rel, is_package = info
        origin = os.path.join(self.root, *rel.split("/")) if rel else None
        spec = importlib.machinery.ModuleSpec(fullname, self.loader, origin=origin, is_package=is_package)  # type: ignore[arg-type]  # a duck-typed loader
        if rel is not None:
            spec.has_location = True
        if is_package:
            if origin is not None:
                pkg_dir = os.path.dirname(origin)
            else:
                pkg_dir = os.path.join(self.root, *fullname.split("."))
            spec.submodule_search_locations = [pkg_dir]
        return spec

    def __repr__(self) -> str:
        return f"<SnapshotFinder {self.label}>"
