"""Every `forge ...` command shown in the docs runs (a doc-test), so the docs stay true.

Convention for docs/*.md and README.md:

- Commands are taken from fenced ```bash and ```console blocks only. In a ```bash block
  every line is a command (a trailing backslash continues it); in a ```console block only
  lines starting with ``$ `` are. Use ```text (or a plain fence) for synopses and sample
  output, which are not run.
- Of those, the test runs what invokes ``forge`` (also inside a loop, ``$(...)`` or after
  ``&&``), plus ``export`` and ``cd`` lines, which set the state the following commands
  see. Anything else (``python3 -m venv``, ``pip install``, ``jq``) is not run.
- ``<!-- doc-test: skip (why) -->`` on the line before a block leaves the whole block out;
  SKIP below lists single commands that cannot run here, each with its reason.
- The commands of one file run in order in one ``bash`` process, in the world a reader
  makes with ``bash examples/docs-world.sh DIR`` (each page that needs it says so): a
  fresh ``FORGE_HOME`` where the reference plugins (``forge_plugins/*``) are published as
  ``alice`` and as ``starforge``, ``FORGE_OWNER=alice``, and as the working directory a copy
  of the quickstart experiment (locked) holding ``forge_plugins/``, ``examples/``,
  ``opsd-patch/`` (the reference plugin) and ``alice-laptop.pub`` (a public key); here
  ``HOME`` is inside the scratch directory too. Each command must exit 0.
- A job id in the docs (``quickstart-20261129-120000-3fa2``) stands for the id the docs'
  ``forge submit`` printed: the newest job's id is put in its place.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
BIN = Path(sys.executable).parent
SKIP_MARK = re.compile(r"<!--\s*doc-test:\s*skip\b")
FORGE_CALL = re.compile(r"(^|[;&|(]\s*|\bdo\s+|\bthen\s+|\$\()\s*forge\s")
JOB_ID = re.compile(r"\bquickstart-\d{8}-\d{6}-[0-9a-f]{4}\b")

# (file, command) -> why it cannot run here; keep this short: prefer runnable docs
SKIP: dict = {}


def commands(doc: Path) -> list:
    """``[(line number, command)]`` of the runnable commands of *doc*, in order."""
    out = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    lang, skip_block, pending = None, False, None
    for number, line in enumerate(lines, 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence and lang is None:
            lang = fence.group(1) or "text"
            previous = next((lines[i] for i in range(number - 2, -1, -1) if lines[i].strip()), "")
            skip_block = bool(SKIP_MARK.search(previous))
            continue
        if fence:
            lang, pending = None, None
            continue
        if lang not in ("bash", "console") or skip_block:
            continue
        text = line.strip()
        if lang == "console":
            if not text.startswith("$ "):
                continue
            text = text[2:]
        if pending is not None:
            pending = (pending[0], pending[1] + "\n" + text)
        else:
            pending = (number, text)
        if text.endswith("\\"):
            continue
        number_first, command = pending
        pending = None
        if FORGE_CALL.search(command) or re.match(r"^(export|cd)\s", command):
            out.append((number_first, command))
    return out


def documented() -> list:
    return [(doc, cmds) for doc in DOCS if doc.exists() for cmds in [commands(doc)] if cmds]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """The scratch world every doc starts from (copied per doc): made by examples/docs-world.sh,
    the script the docs tell a reader to run, so a page runs for them as it runs here."""
    root = tmp_path_factory.mktemp("docs-world")
    home, forge_home = root / "home", root / "forge-home"
    env = scratch_env(root, home, forge_home)
    proc = subprocess.run(["bash", str(REPO / "examples" / "docs-world.sh"), str(root)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"export FORGE_HOME={forge_home} FORGE_OWNER=alice", f"cd {root / 'work'}"]
    for sub in (".local/share/bash-completion/completions", ".config/fish/completions"):
        (home / sub).mkdir(parents=True)
    return root


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
        "```bash\nfor p in a b; do forge plugin check \"$p\"; done\n```\n"
    )
    assert commands(doc) == [
        (2, "forge plugin list   # a comment"),
        (3, "export A=1"),
        (5, "forge lock \\\nexp"),
        (9, "forge jobs list"),
        (21, 'for p in a b; do forge plugin check "$p"; done'),
    ]
