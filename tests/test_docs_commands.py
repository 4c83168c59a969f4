"""Every command shown in the docs runs as written (a doc-test), so the docs stay true.

Convention for docs/*.md and README.md:

- Commands are written in fenced ```bash and ```console blocks (also inside a ``> `` quote).
  In a ```bash block every line is a command (a trailing backslash continues it; ``#``
  lines are comments); in a ```console block only lines starting with ``$ `` are, and a
  command whose shown output begins with ``error:`` is a refusal the page shows: it must
  exit non-zero. Use ```text (or a plain fence) for synopses and sample output, which are
  not run; a ``$ `` line there would be a command hiding from this test, and is refused.
- Every command of those blocks runs (``forge``, ``jq``, ``node``, ``sha256sum``, ...), in
  order, in one ``bash`` process per file, in the world a reader makes with
  ``bash examples/docs-world.sh DIR`` (each page that needs it says so, in a block marked
  ``<!-- doc-test: world -->`` that must read exactly as :data:`WORLD_LINES`): a fresh
  ``FORGE_HOME`` where the reference plugins (``forge_plugins/*``) are published as
  ``alice`` and as ``starforge``, ``FORGE_OWNER=alice``, and as the working directory a
  copy of the quickstart experiment (locked) holding ``forge_plugins/``, ``examples/``,
  ``opsd-patch/`` (the reference plugin), ``alice-laptop.pub`` (a public key) and
  ``sigstore-js/`` (the verify script of signatures.md with its pinned package files); here
  ``HOME`` is inside the scratch directory too. Each command must exit 0.
- A block that cannot run here says why on the line before it:
  ``<!-- doc-test: skip (cosign is not packaged for Debian 12) -->``; SKIP below lists the
  single commands that cannot (each with its reason). Both are counted by a test, so a new
  one is a decision, not a slip.
- A job id in the docs (``quickstart-20261129-120000-3fa2``) stands for the id the docs'
  ``forge submit`` printed: the newest job's id is put in its place.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.once import made_once

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
BIN = Path(sys.executable).parent
MARK = re.compile(r"<!--\s*doc-test:\s*(?P<kind>skip|world)\b\s*(?:\((?P<why>.*)\))?\s*-->")
JOB_ID = re.compile(r"\bquickstart-\d{8}-\d{6}-[0-9a-f]{4}\b")
RUN = ("bash", "sh", "console")
# what a page that starts from the docs world shows (the test makes the same world itself)
WORLD_LINES = [
    "bash examples/docs-world.sh ~/forge-docs      # prints the two lines below",
    "export FORGE_HOME=~/forge-docs/forge-home FORGE_OWNER=alice",
    "cd ~/forge-docs/work",
]

# (file, command) -> why it cannot run here; keep this short: prefer runnable docs
SKIP: dict = {
    ("docs/signatures.md", "npm ci --prefix sigstore-js --ignore-scripts --no-audit --no-fund"):
        "fetches sigstore-js from the npm registry (tests send no traffic beyond loopback): the world links the "
        "copy bash .ci/setup installed from the same package-lock.json",
    ("docs/signatures.md", "python3 -m venv .venv-model-signing && .venv-model-signing/bin/pip install model-signing==1.1.1 pyopenssl"):
        "fetches model-signing from PyPI: the world links the venv bash .ci/setup made with it",
}
# how many blocks are marked `doc-test: skip`: each says why; a new one changes this number
SKIPPED_BLOCKS = 24


@dataclass
class Block:
    """One fenced block of a page: where it starts, its language, its lines, how it is marked."""

    line: int
    lang: str
    mark: str | None = None  # "skip", "world" or None
    why: str = ""
    lines: list = field(default_factory=list)  # [(line number, text)]


def blocks(doc: Path) -> list:
    """Every fenced block of *doc* (``> `` quoted ones too), in order."""
    out: list = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    current = None
    for number, raw in enumerate(lines, 1):
        line = raw[2:] if raw.startswith("> ") else raw[1:] if raw == ">" else raw
        fence = re.match(r"^\s*```(\w*)", line)
        if fence and current is None:
            previous = next((lines[i] for i in range(number - 2, -1, -1) if lines[i].strip()), "")
            mark = MARK.search(previous)
            current = Block(number, fence.group(1) or "text", mark.group("kind") if mark else None,
                            (mark.group("why") or "").strip() if mark else "")
            continue
        if fence:
            out.append(current)
            current = None
            continue
        if current is not None:
            current.lines.append((number, line))
    return out


def block_commands(block: Block) -> list:
    """``[(line number, command)]`` of a bash or console block; a refusal shown in a console
    block (its output begins with ``error:``) comes as ``! command``, which must exit non-zero."""
    out: list = []
    pending = None
    for index, (number, line) in enumerate(block.lines):
        text = line.strip()
        if block.lang == "console":
            if not text.startswith("$ "):
                continue
            text = text[2:]
        elif pending is None and (not text or text.startswith("#")):
            continue
        pending = (pending[0], pending[1] + "\n" + text) if pending is not None else (number, text)
        if text.endswith("\\"):
            continue
        first, command = pending
        pending = None
        if block.lang == "console":
            shown = next((t.strip() for _, t in block.lines[index + 1:] if t.strip()), "")
            if shown.startswith("error:"):
                command = "! " + command
        out.append((first, command))
    return out


def commands(doc: Path) -> list:
    """``[(line number, command)]`` of the runnable commands of *doc*, in order."""
    return [c for b in blocks(doc) if b.lang in RUN and b.mark is None for c in block_commands(b)]


def documented() -> list:
    return [(doc, cmds) for doc in DOCS if doc.exists() for cmds in [commands(doc)] if cmds]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """The scratch world every doc starts from (copied per doc): made by examples/docs-world.sh,
    the script the docs tell a reader to run, so a page runs for them as it runs here. Made
    once per run, the xdist workers' pages reading the same (a page runs in a copy)."""
    return made_once(tmp_path_factory, "docs-world", make_world)


def make_world(root: Path) -> None:
    home, forge_home = root / "home", root / "forge-home"
    env = scratch_env(root, home, forge_home)
    proc = subprocess.run(["bash", str(REPO / "examples" / "docs-world.sh"), str(root)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"export FORGE_HOME={forge_home} FORGE_OWNER=alice", f"cd {root / 'work'}"]
    for sub in (".local/share/bash-completion/completions", ".config/fish/completions"):
        (home / sub).mkdir(parents=True)
    # what signatures.md installs from npm and PyPI: the copies bash .ci/setup made (SKIP says why)
    for link, target in LINKED.items():
        if (REPO / target).exists():
            (root / "work" / link).symlink_to(REPO / target)


# in the world -> what it links to in the checkout (made by bash .ci/setup)
LINKED = {"sigstore-js/node_modules": ".venv-sigstore-js/node_modules", ".venv-model-signing": ".venv-model-signing"}
NEEDS = {"docs/signatures.md": ("sigstore-js/node_modules", ".venv-model-signing")}


def scratch_env(root: Path, home: Path, forge_home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "XDG_")) and k != "NO_COLOR"}
    env.update(
        HOME=str(home), FORGE_HOME=str(forge_home), FORGE_OWNER="alice", FORGE_CANCEL_GRACE="5",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1",
    )
    return env


def run_forge(env: dict, cwd: Path, *args: str) -> None:
    proc = subprocess.run([str(BIN / "forge"), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"forge {' '.join(args)}: {proc.stderr}"


@pytest.mark.parametrize("doc, cmds", documented(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_documented_commands_run(doc, cmds, world, tmp_path):
    root = tmp_path / "world"
    shutil.copytree(world, root, symlinks=True)
    env = scratch_env(root, root / "home", root / "forge-home")
    rel = doc.relative_to(REPO).as_posix()
    missing = [n for n in NEEDS.get(rel, ()) if not (root / "work" / n).exists()]
    if missing:
        reason = f"{rel} needs {', '.join(LINKED[n] for n in missing)} (bash .ci/setup makes them)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    script = ["set -u -o pipefail", "newest_job() { forge jobs list --json --limit 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1][\"id\"])'; }"]
    ran = []
    for number, command in cmds:
        if (rel, command) in SKIP:
            continue
        if JOB_ID.search(command):
            command = JOB_ID.sub("$(newest_job)", command)
        where = f"{rel}:{number}"
        ran.append(where)
        script.append(
            f"{{ {command}\n}}; rc=$?; if [ $rc -ne 0 ]; then echo \"doc-test: exit $rc from {where}\" >&2; exit 1; fi"
        )
    if not ran:
        pytest.skip(f"every command of {rel} is on the skip list")
    proc = subprocess.run(["bash", "-c", "\n".join(script)], env=env, cwd=root / "work", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\n--- stdout ---\n{proc.stdout[-2000:]}"


def test_extraction_follows_the_convention(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "```bash\nforge plugin list   # a comment\nexport A=1\npython3 -m venv .venv\nforge lock \\\n  exp\n```\n"
        "```console\n$ forge jobs list\nno jobs yet\n```\n"
        "```text\nforge plugin check [DIR]\n```\n"
        "<!-- doc-test: skip (needs a real OCI registry) -->\n\n```bash\nforge plugin publish x\n```\n"
        "```bash\nfor p in a b; do forge plugin check \"$p\"; done\n# a comment line\n\njq . x.json\n```\n"
        "```console\n$ forge submit --set x.y=1\nerror: --set x.y=1: unknown key\n$ sha256sum x\nabc  x\n```\n"
        "> ```bash\n> forge config\n> ```\n"
    )
    assert commands(doc) == [
        (2, "forge plugin list   # a comment"),
        (3, "export A=1"),
        (4, "python3 -m venv .venv"),
        (5, "forge lock \\\nexp"),
        (9, "forge jobs list"),
        (21, 'for p in a b; do forge plugin check "$p"; done'),
        (24, "jq . x.json"),
        (27, "! forge submit --set x.y=1"),  # a refusal the page shows: it must fail
        (29, "sha256sum x"),
        (33, "forge config"),
    ]
    [skipped] = [b for b in blocks(doc) if b.mark]
    assert (skipped.mark, skipped.why, skipped.line) == ("skip", "needs a real OCI registry", 17)


# a synopsis names its arguments: [DIR], REF, --kind a|b, …
SYNOPSIS = re.compile(r"\[|\b[A-Z][A-Z_]{1,}\b|\||…")


def test_no_command_hides_in_a_text_block():
    hidden = [f"{doc.relative_to(REPO)}:{number}: {text.strip()}" for doc in DOCS for b in blocks(doc) if b.lang not in RUN
              for number, text in b.lines
              if text.strip().startswith("$ ") or (text.strip().startswith("forge ") and not SYNOPSIS.search(text))]
    assert not hidden, ("a command in a text block is never run: make it a bash or console block (or mark it skip, "
                        "saying why); a synopsis names its arguments ([DIR], REF)\n" + "\n".join(hidden))


def test_blocks_that_cannot_run_here_say_why_and_are_counted():
    marked = [(doc.relative_to(REPO).as_posix(), b) for doc in DOCS for b in blocks(doc) if b.mark == "skip"]
    listing = "\n".join(f"{rel}:{b.line}: {b.why}" for rel, b in marked)
    assert all(b.why for _, b in marked), "every skipped block says why, in parentheses:\n" + listing
    assert all(b.lang in RUN for _, b in marked), "only command blocks are marked skip:\n" + listing
    assert len(marked) == SKIPPED_BLOCKS, f"{len(marked)} blocks do not run here (SKIPPED_BLOCKS says {SKIPPED_BLOCKS}):\n{listing}"
    documented_commands = {(doc.relative_to(REPO).as_posix(), c) for doc in DOCS for _, c in commands(doc)}
    assert set(SKIP) <= documented_commands, "SKIP names a command no page shows any more"


def test_a_page_that_starts_from_the_docs_world_shows_how_to_make_it():
    world = [(doc.relative_to(REPO).as_posix(), b) for doc in DOCS for b in blocks(doc) if b.mark == "world"]
    assert {rel for rel, _ in world} >= {"docs/developing.md", "docs/registry.md", "docs/cli.md", "docs/before-after.md"}
    for rel, b in world:
        assert [t for _, t in b.lines] == WORLD_LINES, f"{rel}:{b.line}"
        assert b.lang == "bash", f"{rel}:{b.line}: the world's commands are a bash block"
