"""Does this source compile on the oldest Python a plugin admits? Static, never executed.

``ast.parse(..., feature_version=(3, m))`` refuses most newer syntax, but not all of it,
and it can only check what the *running* parser understands. This module adds the checks
``feature_version`` misses:

- PEP 646 star-unpacking in subscripts (``a[*b]``) and ``*args: *Ts`` (3.11);
- PEP 701 f-strings (3.12): a nested string reusing the enclosing f-string's quote, a
  backslash or a comment inside a replacement field, a replacement field of a
  single-quoted f-string spanning lines. Found through the tokenizer; on Python 3.11 and
  older such code does not parse at all, so it is refused there as a syntax error;
- PEP 758 ``except A, B:`` without parentheses and PEP 750 template strings (3.14).

Known limits: runtime differences are not syntax (a name added to a module in 3.12, an
annotation that only works with 3.14's deferred evaluation) and are not found; the
nesting-depth limit of pre-3.12 f-strings is not checked; a source using syntax newer than
the running interpreter cannot be verified and is reported as not parsing.

Standard library only, so it can be loaded on its own by any interpreter.

>>> source_problems("match x:\\n    case 1: pass\\n", (3, 10))
[]
>>> source_problems("a[*b]\\n", (3, 10))
[(1, 'star-unpacking in a subscript needs Python 3.11 (PEP 646)')]
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
import warnings

MIN_PYTHON = (3, 10)

Problem = tuple  # (line: int | None, message: str)


def python_floor(spec_text: str | None) -> tuple[int, int] | None:
    """The oldest CPython minor (>= 3.10) a ``requires.python`` specifier admits; None if none.

    >>> python_floor(None), python_floor(">=3.8"), python_floor(">=3.11.4"), python_floor("<3.10")
    ((3, 10), (3, 10), (3, 11), None)
    """
    if not spec_text:
        return MIN_PYTHON
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(spec_text)
    for minor in range(MIN_PYTHON[1], 40):
        if any(spec.contains(f"3.{minor}.{patch}", prereleases=True) for patch in range(0, 40)):
            return (3, minor)
    return None


def source_problems(source: str, floor: tuple[int, int], filename: str = "<plugin>") -> list[Problem]:
    """Reasons *source* would not compile on Python *floor*, as ``(line, message)`` pairs."""
    running = (sys.version_info[0], sys.version_info[1])
    target = min((floor[0], floor[1]), running)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(source, filename, feature_version=target)
        except SyntaxError as exc:
            message = f"does not parse for Python {_v(floor)}: {exc.msg}"
            if running < tuple(floor):
                message += f" (checked with Python {_v(running)}; run the check with Python {_v(floor)} or newer)"
            return [(exc.lineno, message)]
        except ValueError as exc:  # NUL bytes and similar
            return [(None, f"does not parse: {exc}")]
    problems: list[Problem] = []
    for line, needed, what in _newer_nodes(tree):
        if needed > target:
            problems.append((line, f"{what} needs Python {_v(needed)}"))
    if target < (3, 12):
        problems.extend(_pep701_fstrings(source))
    return sorted(set(problems), key=lambda p: (p[0] or 0, p[1]))


def _v(version) -> str:
    return f"{version[0]}.{version[1]}"


def _newer_nodes(tree: ast.AST):
    template = getattr(ast, "TemplateStr", None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            inner = node.slice
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            if any(isinstance(e, ast.Starred) for e in elts):
                yield node.lineno, (3, 11), "star-unpacking in a subscript (PEP 646)"
        elif isinstance(node, ast.arguments):
            if node.vararg is not None and isinstance(node.vararg.annotation, ast.Starred):
                yield node.vararg.lineno, (3, 11), "a starred *args annotation (PEP 646)"
        elif isinstance(node, ast.ExceptHandler):
            t = node.type
            if isinstance(t, ast.Tuple) and t.elts and (t.lineno, t.col_offset) == (t.elts[0].lineno, t.elts[0].col_offset):
                yield node.lineno, (3, 14), "'except A, B:' without parentheses (PEP 758)"
        elif template is not None and isinstance(node, template):
            yield node.lineno, (3, 14), "a template string t'...' (PEP 750)"


def _quote(token_text: str) -> str:
    body = token_text.lstrip("rRbBfFuUtT")
    return body[:3] if body[:3] in ("'''", '"""') else body[:1]


def _pep701_fstrings(source: str) -> list[Problem]:
    """F-string forms only Python 3.12+ accepts, found with the 3.12+ tokenizer."""
    start_type = getattr(tokenize, "FSTRING_START", None)
    if start_type is None:
        return []  # this tokenizer predates PEP 701: ast.parse has already refused such code
    # 3.12+ names, looked up as the start one is: the type check runs for Python 3.10
    middle_type = getattr(tokenize, "FSTRING_MIDDLE")
    end_type = getattr(tokenize, "FSTRING_END")
    stack: list[list] = []  # [quote, brace depth] per open f-string, innermost last
    found: dict[int, str] = {}

    def flag(line: int, what: str) -> None:
        found.setdefault(line, f"{what} needs Python 3.12 (PEP 701)")

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    for tok in tokens:
        if not stack:
            if tok.type == start_type:
                stack.append([_quote(tok.string), 0])
            continue
        inner = stack[-1]
        # The f-strings whose replacement fields contain this token.
        enclosing = stack[:-1] + ([inner] if inner[1] > 0 and tok.type != middle_type else [])
        if tok.type == end_type:
            stack.pop()
            continue
        if enclosing:
            if tok.type in (tokenize.STRING, start_type):
                q = _quote(tok.string)
                if any(q == e[0] if len(e[0]) == 3 else q[0] == e[0] for e in enclosing):
                    flag(tok.start[0], "a string reusing the enclosing f-string's quote")
            if "\\" in tok.string and tok.type != middle_type:
                flag(tok.start[0], "a backslash inside an f-string replacement field")
            if tok.type == tokenize.COMMENT:
                flag(tok.start[0], "a comment inside an f-string replacement field")
            if tok.type in (tokenize.NL, tokenize.NEWLINE) and any(len(e[0]) == 1 for e in enclosing):
                flag(tok.start[0], "a replacement field spanning lines in a single-quoted f-string")
        if stack[:-1] and tok.type == middle_type and "\\" in tok.string:
            flag(tok.start[0], "a backslash inside an f-string replacement field")
        if tok.type == start_type:
            stack.append([_quote(tok.string), 0])
        elif tok.type == tokenize.OP and tok.string == "{":
            inner[1] += 1
        elif tok.type == tokenize.OP and tok.string == "}":
            inner[1] -= 1
    return sorted(found.items())
