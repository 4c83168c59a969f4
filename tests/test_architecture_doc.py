"""docs/architecture.md's "Where to add …" is true: the files it says a new backend, registry
kind, check and command touch exist, and the one line that registers a backend is the form
every line of the table has."""

from __future__ import annotations

import re
from pathlib import Path

from starforge.backends import BACKENDS

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
KINDS = ("a backend", "a registry kind", "a check", "a CLI command", "something every process of a job does")
PLACEHOLDER = re.compile(r"<[A-Za-z_]+>")


def where_to_add() -> dict[str, str]:
    """Entry ("a backend", …) -> its text, from the doc's "Where to add …" section."""
    section = DOC.read_text().split("\n## Where to add …\n", 1)[1].split("\n## ", 1)[0]
    return {m["what"]: m["body"] for m in re.finditer(r"^- \*\*(?P<what>[^*]+)\*\*(?P<body>.*?)(?=^- |\Z)", section, re.M | re.S)}


def touches(body: str) -> list[str]:
    found = re.search(r"Touches: (.*?)\.\s*\Z", body, re.S)
    assert found, f"no 'Touches: …' list in: {body}"
    return re.findall(r"`([^`]+)`", found.group(1))


def test_every_kind_of_addition_lists_the_files_it_touches_and_they_exist():
    entries = where_to_add()
    assert set(KINDS) <= set(entries), sorted(entries)
    for what in KINDS:
        paths = touches(entries[what])
        assert paths, what
        for path in paths:
            if PLACEHOLDER.search(path):  # a new file: its directory exists, the name is the new one's
                parent, name = path.rsplit("/", 1)
                assert (REPO / parent).is_dir() and not PLACEHOLDER.search(parent), (what, path)
                assert PLACEHOLDER.search(name), (what, path)
            else:
                assert (REPO / path).is_file(), (what, path)


def test_a_backend_is_one_module_and_the_one_line_the_doc_shows():
    body = where_to_add()["a backend"]
    assert touches(body) == ["starforge/backends/<name>.py", "starforge/backends/__init__.py"]
    assert (REPO / "tests/backends/tiny_backend.py").is_file() and "`tests/backends/tiny_backend.py`" in body
    [line] = [s for s in re.findall(r"`([^`]+)`", body) if "Registration(" in s]
    first, *rest = re.escape(line).replace(re.escape("<Name>"), "(?P<cls>[A-Z][A-Za-z0-9]*)").split(re.escape("<name>"))
    form = first + "(?P<name>[a-z][a-z0-9_]*)" + "(?P=name)".join(rest)
    table = (REPO / "starforge/backends/__init__.py").read_text().split("\nBACKENDS: dict", 1)[1].split("\n}", 1)[0]
    entries = [row.strip() for row in table.splitlines()[1:] if row.strip()]
    assert len(entries) == len([n for n, e in BACKENDS.items() if e.target.startswith("starforge.")])
    for entry in entries:
        # a backend without a forge.yaml section says so in the same line
        m = re.fullmatch(form.replace(re.escape("),"), r"(?P<no_section>, section=False)?\),"), entry)
        assert m, f"{entry!r} is not the form the doc shows: {line}"
        assert m["cls"] == m["name"].title() and (REPO / "starforge/backends" / f"{m['name']}.py").is_file()
        assert BACKENDS[m["name"]].section == (m["no_section"] is None)


def test_the_cluster_table_names_every_cluster_module():
    import starforge

    cluster = Path(starforge.__file__).parent / "cluster"
    table = DOC.read_text().split("\n## Cluster modules: one concept each\n", 1)[1].split("\n## ", 1)[0]
    named = {name for row in re.findall(r"^\| ([^|]+) \|", table, re.M) for name in re.findall(r"`([^`]+)`", row)}
    modules = {p.relative_to(cluster).as_posix() for p in cluster.rglob("*.py")
               if "_vendor" not in p.parts and p.name != "__init__.py"}
    assert sorted(modules - named) == []
