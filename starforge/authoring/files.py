"""Which files of a plugin directory are packed, and which trees are refused.

``plugin_files(root)`` walks *root* once and returns the regular files a package would
hold, as relative POSIX paths sorted by their UTF-8 bytes (the order of the tree digest).
Tool debris is never packed (:data:`DEFAULT_EXCLUDES`, not overridable), and the root's
``.forgeignore`` (gitignore syntax) excludes more. Anything that could make the packed
bytes differ from the checked ones, or that would not survive the trip to another file
system, raises :class:`CheckError` naming the path.

>>> plugin_files("opsd-patch")                                     # doctest: +SKIP
['opsd_patch/__init__.py', 'plugin.yaml']

Standard library only.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Iterable

from ..cluster.digest import case_collision, path_problem, tree_digest
from ..errors import CheckError

IGNORE_FILE = ".forgeignore"
# A plugin is a patch, and every process of a job checks what it runs (SPEC §3).
DEFAULT_MAX_BYTES = 16 * 2**20
DEFAULT_MAX_FILES = 1_000
MAX_BYTES_ENV = "FORGE_MAX_PLUGIN_BYTES"
MAX_FILES_ENV = "FORGE_MAX_PLUGIN_FILES"

# Bytecode, VCS metadata, caches, virtualenvs and build metadata, at any depth. ``build/``
# and ``dist/`` are deliberately absent: a plugin may hold a real package of that name,
# and silently dropping source is worse than packing a stray directory (list them in
# .forgeignore when they are debris).
DEFAULT_EXCLUDES = (
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    ".git/",
    ".hg/",
    ".svn/",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".ipynb_checkpoints/",
    ".tox/",
    ".nox/",
    ".venv/",
    "*.egg-info/",
    ".DS_Store",
)


# -- gitignore patterns -------------------------------------------------------------------

@dataclass(frozen=True)
class IgnoreRule:
    """One compiled pattern line: ``regex`` matches a path relative to the root."""

    pattern: str
    regex: re.Pattern
    negate: bool
    dir_only: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        return (is_dir or not self.dir_only) and self.regex.fullmatch(rel) is not None


def _strip_trailing_spaces(line: str) -> str:
    """Drop unescaped trailing spaces (``foo\\ `` keeps one)."""
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        backslashes = 0
        i = end - 2
        while i >= 0 and line[i] == "\\":
            backslashes += 1
            i -= 1
        if backslashes % 2:
            break
        end -= 1
    return line[:end]


# POSIX classes git's wildmatch accepts inside brackets, as regex class members (ASCII).
_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}
_POSIX_CLASS_RE = re.compile(r"\[:([a-z]+):\]")


def _class_member(body: str, i: int) -> tuple[str, int]:
    """One literal member of a class body at *i* (backslash escapes) as regex text."""
    c = body[i]
    if c == "\\" and i + 1 < len(body):
        i += 1
        c = body[i]
    return ("\\" + c if c in "\\]^-[" else c), i + 1


def _class_to_regex(body: str) -> str:
    """A gitignore ``[...]`` body (without brackets) as a regex class that never matches '/'.

    Raises ``ValueError`` for an unknown ``[:name:]`` class.
    """
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    out = []
    i = 0
    while i < len(body):
        named = _POSIX_CLASS_RE.match(body, i)
        if named:
            if named.group(1) not in _POSIX_CLASSES:
                raise ValueError(f"unknown character class [:{named.group(1)}:]")
            out.append(_POSIX_CLASSES[named.group(1)])
            i = named.end()
            continue
        first, i = _class_member(body, i)
        out.append(first)
        # a range a-z: a dash between two members
        if i + 1 < len(body) and body[i] == "-":
            last, i = _class_member(body, i + 1)
            out.append("-" + last)
    inner = "".join(out)
    return f"[^/{inner}]" if negate else f"(?:(?!/)[{inner}])"


def _find_class_end(pat: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at *start*, or -1."""
    i = start + 1
    if i < len(pat) and pat[i] in "!^":
        i += 1
    if i < len(pat) and pat[i] == "]":  # a leading ']' is a member
        i += 1
    while i < len(pat):
        named = _POSIX_CLASS_RE.match(pat, i)
        if named:
            i = named.end()
            continue
        if pat[i] == "\\":
            i += 2
            continue
        if pat[i] == "]":
            return i
        i += 1
    return -1


def _glob_to_regex(pat: str) -> str:
    """Translate the path part of a gitignore pattern (no leading '/', no trailing '/')."""
    out = []
    i = 0
    n = len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            j = i
            while j < n and pat[j] == "*":
                j += 1
            run = j - i
            at_start = i == 0 or pat[i - 1] == "/"
            at_end = j == n or pat[j] == "/"
            if run >= 2 and at_start and at_end:
                if j == n:
                    # 'a/**' -> everything inside a; a lone '**' -> everything
                    out.append(".*")
                else:
                    # '**/' -> zero or more directories
                    out.append("(?:.*/)?")
                    j += 1  # consume the '/'
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            end = _find_class_end(pat, i)
            if end < 0:
                out.append(re.escape(c))
            else:
                out.append(_class_to_regex(pat[i + 1 : end]))
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pat[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_rule(line: str) -> IgnoreRule | None:
    """Compile one .forgeignore line; ``None`` for blank lines and comments."""
    raw = line.rstrip("\r\n")
    if not raw.strip() or raw.startswith("#"):
        return None
    text = _strip_trailing_spaces(raw)
    negate = False
    if text.startswith("!"):
        negate, text = True, text[1:]
    elif text.startswith("\\!") or text.startswith("\\#"):
        text = text[1:]
    dir_only = text.endswith("/") and not text.endswith("\\/")
    if dir_only:
        text = text.rstrip("/")
    if not text:
        return None
    # a slash at the start or in the middle anchors the pattern to the root
    anchored = "/" in text
    text = text.lstrip("/")
    body = _glob_to_regex(text)
    if not anchored:
        body = "(?:.*/)?" + body
    return IgnoreRule(pattern=raw, regex=re.compile(body, re.DOTALL), negate=negate, dir_only=dir_only)


class IgnoreRules:
    """An ordered list of gitignore rules; the last matching rule decides.

    A pattern that cannot be compiled (a reversed range ``[z-a]``, an unknown
    ``[:name:]`` class) raises :class:`CheckError` naming *source* and the line.
    """

    def __init__(self, lines: Iterable[str] = (), source: str = IGNORE_FILE) -> None:
        self.rules = []
        for number, line in enumerate(lines, 1):
            try:
                rule = compile_rule(line)
            except (re.error, ValueError) as exc:
                raise CheckError(
                    f"{source}:{number}: bad pattern {line.strip()!r} ({exc})",
                    hint="fix or remove the line (gitignore syntax)",
                ) from None
            if rule is not None:
                self.rules.append(rule)
        # Without a negated rule the order does not matter: a path is excluded when any rule
        # matches, so the rules are also joined into one pattern per kind of entry and a
        # walk of thousands of files asks one regex per entry instead of one per rule.
        self._any: dict[bool, re.Pattern | None] | None = None
        if not any(r.negate for r in self.rules):
            self._any = {
                is_dir: re.compile("|".join(f"(?:{r.regex.pattern})" for r in self.rules if is_dir or not r.dir_only),
                                   re.DOTALL) if any(is_dir or not r.dir_only for r in self.rules) else None
                for is_dir in (False, True)
            }

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """True when *rel* (relative POSIX path) is excluded by these rules alone.

        Callers walk top-down and do not descend into ignored directories, which gives
        git's rule that a file inside an excluded directory cannot be re-included.
        """
        if self._any is not None:
            joined = self._any[is_dir]
            return joined is not None and joined.fullmatch(rel) is not None
        result = False
        for rule in self.rules:
            if rule.matches(rel, is_dir):
                result = not rule.negate
        return result


DEFAULT_RULES = IgnoreRules(DEFAULT_EXCLUDES)


def read_ignore_rules(root: str | os.PathLike) -> IgnoreRules:
    """The rules of *root*/.forgeignore (none when the file is absent)."""
    path = os.path.join(os.fspath(root), IGNORE_FILE)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return IgnoreRules()
    if not stat.S_ISREG(st.st_mode):
        raise CheckError(f"{path}: is not a regular file", hint="make .forgeignore a plain text file")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckError(f"{path}: is not valid UTF-8") from None
    return IgnoreRules(text.splitlines(), source=path)


# -- the walk -----------------------------------------------------------------------------

def _limit(value: int | None, env: str, default: int) -> int:
    if value is not None:
        return value
    raw = os.environ.get(env)
    if raw is None or raw == "":
        return default
    try:
        parsed = int(raw)
    except ValueError:
        raise CheckError(f"{env}={raw!r} is not an integer") from None
    if parsed <= 0:
        raise CheckError(f"{env}={raw!r} must be positive")
    return parsed


def _size(n: int) -> str:
    """*n* bytes as a short text: ``16 MiB`` when whole mebibytes, else ``<n> bytes``."""
    return f"{n >> 20} MiB" if n and n % (1 << 20) == 0 else f"{n} bytes"


def plugin_files(
    root: str | os.PathLike, *, max_bytes: int | None = None, max_files: int | None = None
) -> list[str]:
    """The regular files that would be packed from *root*, sorted by UTF-8 bytes of the path.

    Limits default to 16 MiB and 1,000 files, or ``FORGE_MAX_PLUGIN_BYTES`` /
    ``FORGE_MAX_PLUGIN_FILES`` when set. Raises :class:`CheckError` for symlinks, hard
    links, devices, FIFOs, sockets, bad or colliding names, an empty set, or a tree over
    the limits.
    """
    root = os.fspath(root)
    max_bytes = _limit(max_bytes, MAX_BYTES_ENV, DEFAULT_MAX_BYTES)
    max_files = _limit(max_files, MAX_FILES_ENV, DEFAULT_MAX_FILES)
    try:
        st = os.stat(root)
    except FileNotFoundError:
        raise CheckError(f"{root}: no such directory") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CheckError(f"{root}: not a directory")
    rules = read_ignore_rules(root)

    def shown(rel: str) -> str:
        return os.path.join(root, rel)

    files: list[str] = []
    total = 0
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        full_dir = os.path.join(root, rel_dir) if rel_dir else root
        try:
            entries = sorted(os.scandir(full_dir), key=lambda e: e.name)
        except PermissionError:
            raise CheckError(f"{shown(rel_dir)}: cannot read directory (permission denied)") from None
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            st = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
            if DEFAULT_RULES.ignored(rel, is_dir) or rules.ignored(rel, is_dir):
                continue
            problem = path_problem(rel)
            if problem:
                raise CheckError(f"{shown(rel)!r}: {problem}", hint="rename it, or list it in .forgeignore")
            if is_dir:
                stack.append(rel)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise CheckError(
                    f"{shown(rel)}: is a symlink; plugins hold regular files only",
                    hint="replace the link with a copy of its target, or list it in .forgeignore",
                )
            if not stat.S_ISREG(st.st_mode):
                raise CheckError(
                    f"{shown(rel)}: is a {_kind(st.st_mode)}; plugins hold regular files only",
                    hint="remove it, or list it in .forgeignore",
                )
            if st.st_nlink > 1:
                raise CheckError(
                    f"{shown(rel)}: has {st.st_nlink} hard links; plugin files must have exactly one",
                    hint="replace it with an independent copy (cp FILE tmp && mv tmp FILE)",
                )
            files.append(rel)
            total += st.st_size
            if len(files) > max_files:
                raise CheckError(
                    f"{root}: more than {max_files} files to pack (the limit per plugin)",
                    hint=f"exclude files in .forgeignore, or raise the limit with {MAX_FILES_ENV}",
                )
            if total > max_bytes:
                raise CheckError(
                    f"{root}: files to pack exceed {_size(max_bytes)}, the limit per plugin (reached {total} bytes at {rel})",
                    hint=f"exclude large files in .forgeignore, or raise the limit with {MAX_BYTES_ENV}",
                )
    if not files:
        raise CheckError(f"{root}: no files to pack", hint="a plugin needs at least plugin.yaml and its module")
    _refuse_case_collisions(root, files)
    return sorted(files, key=lambda p: p.encode("utf-8"))


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _refuse_case_collisions(root: str, files: list[str]) -> None:
    clash = case_collision(files)
    if clash:
        raise CheckError(
            f"{os.path.join(root, clash[0])} and {clash[1]}: names collide when case is ignored",
            hint="rename one of them; case-insensitive file systems (macOS, Windows) would merge them",
        )


def local_tree_digest(root: str | os.PathLike, *, workers: int | None = None) -> str:
    """The tree digest of the files that would be packed from *root* (``sf1:...``)."""
    return tree_digest(root, plugin_files(root), workers=workers)
