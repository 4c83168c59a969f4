"""The one YAML loader of StarForge: safe, YAML 1.2 core-schema scalars, located errors.

PyYAML follows YAML 1.1, where ``1e-6`` is a string and ``no`` is ``False``. Here scalars
resolve as in the YAML 1.2 core schema: ``null``/``~``/empty, ``true``/``false``, decimal,
``0o`` and ``0x`` integers, floats with optional exponent, ``.inf``/``.nan``; everything
else (``no``, ``on``, ``12:30``, dates) is a string. Duplicate keys, aliases, merge keys
and non-core tags are errors naming the file and line.

Laptop side (imports PyYAML).

>>> doc = load_yaml("lr: 1e-6\\nflag: no\\n", "x.yaml")
>>> doc.data, doc.line(("flag",))
({'lr': 1e-06, 'flag': 'no'}, 2)
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from ..errors import ManifestError

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"

# Bounds on what a document may hold, so hostile input gets an error, not a crash:
MAX_DEPTH = 100  # nested collections (PyYAML and the JSON encoder recurse per level)
MAX_INT_DIGITS = 4300  # Python's own int <-> str limit; a longer integer could not be printed back
_MAX_INT_BITS = 14_000  # < 4300 decimal digits, for 0x / 0o literals (which skip Python's limit)

_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class _Core12Resolver(BaseResolver):
    yaml_implicit_resolvers: dict = {}


for _tag, _re, _first in (
    (_NULL, _NULL_RE, ["~", "n", "N", ""]),
    (_BOOL, _BOOL_RE, list("tTfF")),
    (_INT, _INT_RE, list("-+0123456789")),
    (_FLOAT, _FLOAT_RE, list("-+.0123456789")),
):
    _Core12Resolver.add_implicit_resolver(_tag, _re, _first)


class _Loader(Reader, Scanner, Parser, Composer, _Core12Resolver):
    def __init__(self, stream: str, source: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Core12Resolver.__init__(self)
        self.source = source
        self.depth = 0

    def compose_node(self, parent, index):  # noqa: D102 - PyYAML hook
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ManifestError(
                f"{self.source}:{event.start_mark.line + 1}: aliases (*{event.anchor}) are not allowed; write the value out"
            )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ManifestError(f"{self.source}:{mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class FloatRangeError(ManifestError):
    """A number written in digits that no float can hold (``1e400``): said as written."""

    def __init__(self, message: str, hint: str, written: str) -> None:
        super().__init__(message, hint=hint)
        self.written = written


@dataclass
class YamlDoc:
    """Loaded data plus the 1-based line of every key path (``("requires", "core")``, ``("targets", 0)``)."""

    data: object
    source: str
    lines: dict = field(default_factory=dict)

    def line(self, path: tuple) -> int | None:
        return self.lines.get(tuple(path))


def load_yaml(text: str, source: str) -> YamlDoc:
    """Parse one YAML document; raise :class:`ManifestError` with file and line on any problem."""
    loader = None
    try:
        loader = _Loader(text, source)  # the reader already refuses control characters
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ManifestError(f"{source}{line}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.reader.ReaderError as exc:
        where = _line_of(text, exc.position)
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise ManifestError(
            f"{source}:{where}: not valid YAML: control character {char!r} is not allowed",
            hint="remove control characters (YAML allows tab, newline and printable text)",
        ) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ManifestError(f"{source}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    doc = YamlDoc(data=None, source=source)
    if node is not None:
        doc.data = _construct(node, (), doc)
    return doc


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, max(position, 0)) + 1


def load_yaml_file(path: str | Path, max_bytes: int | None = None, kind: str = "the file",
                   hint: str | None = None) -> YamlDoc:
    """:func:`load_yaml` of the file at *path*; with *max_bytes*, a larger file is refused
    before any of it is parsed (the reader takes seconds a megabyte), naming *kind* and *hint*."""
    path = Path(path)
    try:
        if max_bytes is None:
            text = path.read_text(encoding="utf-8")
        else:
            with open(path, "rb") as file:  # at most one byte past the limit is read
                data = file.read(max_bytes + 1)
                size = max(os.fstat(file.fileno()).st_size, len(data))
            if size > max_bytes:
                limit = f"{max_bytes >> 20} MiB" if max_bytes % (1 << 20) == 0 else f"{max_bytes} bytes"
                raise ManifestError(f"{path}: {size} bytes, more than the {limit} {kind} may hold", hint=hint)
            text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads lines
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{path}: not UTF-8 text") from None
    return load_yaml(text, str(path))


def parse_scalar(text: str) -> object:
    """One YAML 1.2 core value as ``--set`` reads it: ``0.5``, ``8``, ``true``, ``null``, ``[1,2]``, strings."""
    doc = load_yaml(text if text.strip() else "''", "--set value")
    return doc.data


def _construct(node, path: tuple, doc: YamlDoc):
    line = node.start_mark.line + 1
    doc.lines.setdefault(path, line)
    if isinstance(node, ScalarNode):
        return _scalar(node, doc)
    if isinstance(node, SequenceNode):
        if node.tag != _SEQ:
            raise ManifestError(f"{doc.source}:{line}: tag {node.tag} is not allowed")
        return [_construct(child, path + (i,), doc) for i, child in enumerate(node.value)]
    if isinstance(node, MappingNode):
        if node.tag != _MAP:
            raise ManifestError(f"{doc.source}:{line}: tag {node.tag} is not allowed")
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise ManifestError(f"{doc.source}:{key_node.start_mark.line + 1}: mapping keys must be scalars")
            key = _scalar(key_node, doc)
            key_line = key_node.start_mark.line + 1
            if key == "<<" and key_node.tag != _STR or (key_node.style is None and key_node.value == "<<"):
                raise ManifestError(f"{doc.source}:{key_line}: merge keys (<<) are not allowed; write the keys out")
            try:
                hash(key)
            except TypeError:
                raise ManifestError(f"{doc.source}:{key_line}: unhashable mapping key") from None
            if key in out:
                dotted = ".".join(str(p) for p in path + (key,))
                raise ManifestError(
                    f"{doc.source}:{key_line}: duplicate key '{dotted}' (first at line {doc.lines[path + (key,)]})"
                )
            doc.lines[path + (key,)] = key_line
            out[key] = _construct(value_node, path + (key,), doc)
        return out
    raise ManifestError(f"{doc.source}:{line}: unsupported YAML node")  # pragma: no cover


def _scalar(node: ScalarNode, doc: YamlDoc):
    tag, value = node.tag, node.value
    if tag == _STR or tag == "!":
        return value
    if tag == _NULL and _NULL_RE.match(value):
        return None
    if tag == _BOOL and _BOOL_RE.match(value):
        return value.lower() == "true"
    if tag == _INT and _INT_RE.match(value):
        if len(value) > MAX_INT_DIGITS:
            raise ManifestError(
                f"{doc.source}:{node.start_mark.line + 1}: integer of {len(value)} characters is too large "
                f"(at most {MAX_INT_DIGITS} digits)"
            )
        if value.startswith("0o"):
            number = int(value[2:], 8)
        elif value.startswith("0x"):
            number = int(value[2:], 16)
        else:
            number = int(value)
        if number.bit_length() > _MAX_INT_BITS:
            raise ManifestError(f"{doc.source}:{node.start_mark.line + 1}: integer {value[:20]}... is too large")
        return number
    if tag == _FLOAT and _FLOAT_RE.match(value):
        low = value.lower()
        if low.endswith(".inf"):
            return -math.inf if low.startswith("-") else math.inf
        if low == ".nan":
            return math.nan
        real = float(value)
        if math.isinf(real):  # 1e400: say what was written, not the '.inf' it would become
            raise FloatRangeError(f"{doc.source}:{node.start_mark.line + 1}: {value} is beyond the float range (it would read as infinity)",
                                  hint="write a finite number (at most about 1.8e308)", written=value)
        return real
    raise ManifestError(f"{doc.source}:{node.start_mark.line + 1}: value {value!r} with tag {tag} is not allowed")
