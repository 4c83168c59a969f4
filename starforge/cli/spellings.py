"""Command-line spellings users bring from helm, kubectl and uv, as the forms forge parses.

- ``--set a=1,b=2`` (helm's comma form) is ``--set a=1 --set b=2``. Quoting is helm's
  exactly: quotes are ordinary characters (``note=it's`` is five characters, and a quote
  never hides a comma), and a backslash makes the next character literal and goes
  (``\\,`` is a comma inside a value, ``\\\\`` a backslash). A comma splits where a
  ``KEY=`` follows it, except inside a flow list or mapping that a value begins with
  (``--set x=[1,2]`` stays one list, as helm's ``x={1,2}`` does);
- ``-o json`` / ``--output json`` / ``-ojson`` / ``--output=json`` is ``--json`` for a
  command that has ``--json`` and no ``-o`` of its own (``bundle create -o FILE`` keeps
  its meaning); ``-o text`` is the default output;
- ``--set k = v`` (spaces around ``=``, which the shell splits into three arguments) is
  one clear error instead of click's "unexpected extra argument".

Laptop side; standard library only (the errors are starforge's).

>>> split_set("a=1,b=2")
['a=1', 'b=2']
>>> split_set("x=[1,2],name=a\\\\,b")
['x=[1,2]', 'name=a,b']
>>> split_set("note=it's,steps=99")
["note=it's", 'steps=99']
"""

from __future__ import annotations

import re

from ..errors import UsageError

_KEY_AHEAD = re.compile(r"\+?[A-Za-z_][A-Za-z0-9_.\-]*=")
OUTPUT_FORMATS = ("json", "text")
_BRACKETS = {"[": 1, "{": 1, "]": -1, "}": -1}


def split_set(text: str) -> list:
    """The ``--set`` arguments one comma-joined ``--set`` value stands for (see above)."""
    parts: list = []
    current: list = []
    value_at = None  # where this part's value begins in *current* (past its first '=')
    depth = 0  # brackets open in the flow list or mapping the value began with
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":  # helm: the next character stands for itself; the backslash goes
            current.append(text[i + 1:i + 2])
            i += 2
            continue
        if value_at is None:
            if c == "=":
                value_at = len(current) + 1
        elif depth or (c in "[{" and len(current) == value_at):
            depth += _BRACKETS.get(c, 0)
        elif c == "," and _KEY_AHEAD.match(text, i + 1):
            parts.append("".join(current))
            current, value_at = [], None
            i += 1
            continue
        current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def output_format(value: str, command: str) -> bool:
    """Whether ``-o VALUE`` asks for JSON (True) or the default text (False)."""
    if value in OUTPUT_FORMATS:
        return value == "json"
    raise UsageError(
        f"-o/--output '{value}': '{command}' prints text (the default) or json",
        hint=f"use '{command} --json' (or -o json)",
    )


def spaced_set(value: str, following: list) -> None:
    """Refuse ``--set k = v`` / ``--set k =v`` / ``--set k= v``: the shell split one setting in pieces."""
    after = following[0] if following else None
    if after is None:
        return
    if "=" not in value and after.startswith("="):
        rest = after[1:] or (following[1] if len(following) > 1 else "")
        shown = f"{value} {after}" + (f" {following[1]}" if after == "=" and len(following) > 1 else "")
    elif value.endswith("=") and value.count("=") == 1 and after == "=":
        rest, shown = "", f"{value} {after}"
    else:
        return
    raise UsageError(
        f"--set {shown}: spaces around '=' make the shell pass it as separate arguments",
        hint=f"write it as one argument without spaces: --set {value.rstrip('=').strip()}={rest}",
    )


def rewrite(args: list, start: int, takes_value: set, has_json: bool, command: str = "forge") -> list:
    """*args* with the spellings above rewritten, from *start* (the command's own arguments);
    *command* (``forge plugin list``) is named in errors."""
    out = list(args[:start])
    index = start
    own_output = "-o" in takes_value or "--output" in takes_value
    while index < len(args):
        token = args[index]
        if token == "--":
            out.extend(args[index:])
            break
        if token == "--set" and "--set" in takes_value and index + 1 < len(args):
            value = args[index + 1]
            spaced_set(value, args[index + 2:index + 4])
            for part in split_set(value):
                out += ["--set", part]
            index += 2
            continue
        if token.startswith("--set=") and "--set" in takes_value:
            spaced_set(token[len("--set="):], args[index + 1:index + 3])
            parts = split_set(token[len("--set="):])  # one part stays --set=PART: '--set=-q' is a value
            out += [f"--set={parts[0]}"] if len(parts) == 1 else [t for part in parts for t in ("--set", part)]
            index += 1
            continue
        if has_json and not own_output:
            value = None
            if token in ("-o", "--output") and index + 1 < len(args):
                value, index = args[index + 1], index + 2
            elif token.startswith("--output="):
                value, index = token[len("--output="):], index + 1
            elif token.startswith("-o") and len(token) > 2 and not token.startswith("--"):
                value, index = token[2:], index + 1
            if value is not None:
                if output_format(value, command):
                    out.append("--json")
                continue
        if token in takes_value:
            out.extend(args[index:index + 2])
            index += 2
            continue
        out.append(token)
        index += 1
    return out
