"""Registry, lock, plugin and job text never drives the terminal: control and bidirectional
characters are refused at check/publish, and spelled out wherever forge prints such text.

The sequences are the ones that do harm: OSC 52 (writes the clipboard), OSC 8 (a link),
a carriage return (rewrites the line already printed) and U+202E (reverses what follows).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.cli import forge as run_forge

from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore

OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07"
OSC8 = "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07"
CR = "\rsignature: verified"
RLO = "\u202etxt.exe"
HOSTILE = {"OSC 52": OSC52, "OSC 8": OSC8, "carriage return": CR, "U+202E": RLO}
# what must never reach the terminal raw: ESC, BEL, CR, C1 controls and the bidi characters
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def yaml_quoted(text: str) -> str:
    """*text* as a YAML double-quoted scalar, its control characters as YAML escapes (as an attacker writes them)."""
    return json.dumps(text)  # JSON's \u001b escapes are YAML's too


class Laptop:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.registry = root / "registry"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(root / "home"), FORGE_OWNER="alice", FORGE_REGISTRY=str(self.registry),
                        NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")

    def forge(self, *args, ok: bool | None = True) -> subprocess.CompletedProcess:
        proc = run_forge(*args, cwd=self.root, env=self.env, timeout=300)
        if ok is True:
            assert proc.returncode == 0, f"forge {' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def plugin(self, name: str, version: str = "1.0.0", description: str = "a plugin", param: str = "a param",
               default: str = "x", source: str = "def install(params):\n    pass\n", extra: dict | None = None) -> Path:
        root = self.root / "src" / f"{name}-{version}"
        root.mkdir(parents=True)
        (root / "plugin.yaml").write_text(
            f"schema: forge/plugin/v1\nname: {name}\nversion: {version}\nkind: algorithm\n"
            f"entrypoint: {name.replace('-', '_')}:install\ndescription: {yaml_quoted(description)}\n"
            f"params:\n  p.text: {{type: str, default: {yaml_quoted(default)}, description: {yaml_quoted(param)}}}\n")
        (root / f"{name.replace('-', '_')}.py").write_text(source)
        for rel, text in (extra or {}).items():
            (root / rel).write_text(text)
        return root

    def publish_behind_forges_back(self, root: Path) -> None:
        """Publish *root* as a registry writer not running these checks would (an older forge, a script)."""
        script = textwrap.dedent("""
            import sys
            from starforge.authoring import unsafe_text
            unsafe_text.manifest_problems = lambda doc: []
            unsafe_text.file_name_problems = lambda files: []
            from starforge.registry.factory import open_registry
            from starforge.registry.publish import publish_plugin
            publish_plugin(sys.argv[1], open_registry(sys.argv[2]), "alice")
        """)
        done = subprocess.run([sys.executable, "-c", script, str(root), str(self.registry)], env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


@pytest.fixture
def laptop(tmp_path) -> Laptop:
    return Laptop(tmp_path)


def assert_nothing_raw(proc: subprocess.CompletedProcess) -> None:
    for stream in (proc.stdout, proc.stderr):
        assert not RAW.findall(stream), RAW.findall(stream)


# -- refused at check and publish ---------------------------------------------------------


@pytest.mark.parametrize("what", list(HOSTILE))
def test_control_and_bidi_characters_in_plugin_yaml_strings_are_refused_at_publish(laptop, what):
    text = HOSTILE[what]
    spelled = {"OSC 52": "^[, ^G", "OSC 8": "^[, ^G", "carriage return": "^M", "U+202E": "\\u202e"}[what]
    for field, root in (("description", laptop.plugin("desc", description="ok " + text)),
                        ("params.p.text.description", laptop.plugin("pdesc", param=text)),
                        ("params.p.text.default", laptop.plugin("pdefault", default=text))):
        published = laptop.forge("plugin", "publish", root, ok=False)
        assert published.returncode == 4, published.stderr
        assert f"{field} holds {spelled} (a control or bidirectional character) [text]" in published.stderr
        assert_nothing_raw(published)
        checked = laptop.forge("plugin", "check", root, ok=False)
        assert checked.returncode == 4 and f"{field} holds {spelled}" in checked.stderr
    assert not laptop.registry.exists() or not any(laptop.registry.rglob("*.tar*"))  # nothing published


def test_a_file_name_with_a_control_or_bidi_character_is_refused_at_publish(laptop):
    import shutil

    for name, spelled in (("report\u202etxt.py", "the file name holds \\u202e"), ("a\u2066b\u2069.txt", "the file name holds \\u2066, \\u2069"),
                          ("a\rb.txt", "control character '\\r'"), ("x\x1b]8;;.txt", "control character '\\x1b'")):
        root = laptop.plugin("names", extra={name: ""})
        published = laptop.forge("plugin", "publish", root, ok=False)
        assert published.returncode == 4
        assert spelled in published.stderr
        assert_nothing_raw(published)
        (root / name).unlink()
        laptop.forge("plugin", "check", root)  # the rest of the plugin is fine
        shutil.rmtree(root)


def test_newlines_and_tabs_stay_allowed_in_descriptions_and_values(laptop):
    root = laptop.plugin("multi", description="line one\nline two\tand a tab\n", param="a\nb", default="\n")
    laptop.forge("plugin", "check", root)


# -- spelled out wherever forge prints registry, lock, plugin and job text ------------------


def test_plugin_show_and_diff_spell_out_what_a_registry_writer_put_there(laptop):
    laptop.forge("plugin", "publish", laptop.plugin("vetted", "1.0.0", description="a clean plugin"))
    hostile = laptop.plugin("vetted", "1.1.0", description=f"fine{OSC52} {OSC8}{CR} {RLO}", param=CR, default=OSC52,
                            source=f"def install(params):\n    pass  # {OSC52}{CR}\n", extra={f"notes{RLO}": "x\n"})
    laptop.publish_behind_forges_back(hostile)

    shown = laptop.forge("plugin", "show", "alice/vetted@1.1.0")
    assert_nothing_raw(shown)
    assert "  fine^[]52;c;Y3VybCBldmlsLnNofHNo^G ^[]8;;https://evil.example/^Gclick^[]8;;^G^Msignature: verified \\u202etxt.exe" in shown.stdout
    assert '    p.text (str, default "\\u001b]52;c;Y3VybCBldmlsLnNofHNo\\u0007"): ^Msignature: verified' in shown.stdout
    assert re.search(r"^  signature: +unsigned$", shown.stdout, re.M)  # forge's own line, untouched

    diff = laptop.forge("plugin", "diff", "alice/vetted@1.0.0", "@1.1.0", ok=False)
    assert diff.returncode == 20, diff.stderr
    assert_nothing_raw(diff)
    assert "+    pass  # ^[]52;c;Y3VybCBldmlsLnNofHNo^G^Msignature: verified" in diff.stdout
    assert "notes\\u202etxt.exe" in diff.stdout


def test_lock_diff_spells_out_what_an_edited_lock_holds(laptop):
    def lock(version: str, targets: list, files: dict, key_id: str) -> Path:
        entry = {"owner": "alice", "name": "evil", "version": version, "request": "alice/evil", "digest": "sf1:" + "0" * 64,
                 "artifact_digest": "sha256:" + "0" * 64, "kind": "algorithm", "load": "eager", "entrypoint": "evil:install",
                 "targets": targets, "files": files, "signature": {"envelope_digest": "sha256:" + "1" * 64, "key_id": key_id}}
        path = laptop.root / f"lock-{len(list(laptop.root.glob('lock-*')))}.json"
        path.write_text(json.dumps({"schema": "forge/lock/v2", "plugins": [entry]}))
        return path

    old = lock("1.0.0", ["toy"], {"a.py": "sha256:" + "2" * 64}, "k" * 64)
    new = lock(f"1.0.1{CR}", ["toy", f"x{RLO}"], {"a.py": "sha256:" + "3" * 64, f"b{OSC52}.py": "sha256:" + "4" * 64},
               f"{OSC8}" + "k" * 40)
    diff = laptop.forge("lock", "diff", old, new, ok=False)
    assert diff.returncode == 20, diff.stderr
    assert_nothing_raw(diff)
    assert "~ alice/evil 1.0.0 -> 1.0.1^Msignature: verified" in diff.stdout
    assert "    targets: + x\\u202etxt.exe" in diff.stdout
    assert "b^[]52;c;Y3VybCBldmlsLnNofHNo^G.py" in diff.stdout
    assert "signature: key kkkkkkkkkkkk… -> key ^[]8;;https:/…" in diff.stdout


def test_jobs_show_and_list_spell_out_what_a_job_record_holds(laptop, tmp_path):
    store = JobStore(tmp_path / "jobs")
    laptop.env["FORGE_JOBS_DIR"] = str(tmp_path / "jobs")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "status.json").write_text(json.dumps({"phase": "install", "code": 12, "plugin": f"alice/x{RLO}",
                                                     "message": f"install raised{OSC52}{CR}"}))
    store.save(JobRecord(id="evil-20261129-120000-aaaa", name="evil", backend="local", status="failed", dir=str(job_dir),
                         created="2026-11-29T12:00:00Z", exit_code=12, message=f"the job said {OSC8}"))
    show = laptop.forge("jobs", "show", "evil-20261129-120000-aaaa")
    assert_nothing_raw(show)
    assert "message  : the job said ^[]8;;https://evil.example/^Gclick^[]8;;^G" in show.stdout
    assert "phase    : install (plugin alice/x\\u202etxt.exe): install raised^[]52;c;Y3VybCBldmlsLnNofHNo^G^Msignature: verified" in show.stdout
    listed = laptop.forge("jobs", "list")
    assert_nothing_raw(listed)


def test_forge_config_spells_out_an_invalid_owner_and_every_value_it_prints(laptop, tmp_path):
    # publish's error: line escapes FORGE_OWNER; forge config, which shows the same value, must too
    laptop.env.update(FORGE_OWNER=f"bob{OSC52}", FORGE_REGISTRY=f"{tmp_path}/reg{RLO}", FORGE_JOBS_DIR=f"{tmp_path}/jobs{CR}")
    published = laptop.forge("plugin", "publish", laptop.plugin("owned"), ok=False)
    assert published.returncode == 2 and "owner 'bob^[]52;c;Y3VybCBldmlsLnNofHNo^G' (from FORGE_OWNER)" in published.stderr
    assert_nothing_raw(published)
    shown = laptop.forge("config")
    assert_nothing_raw(shown)
    assert "from owner 'bob^[]52;c;Y3VybCBldmlsLnNofHNo^G' (from FORGE_OWNER) is not a valid owner name" in shown.stdout
    assert f"registry    : {tmp_path}/reg\\u202etxt.exe\n" in shown.stdout
    assert f"jobs_dir    : {tmp_path}/jobs^Msignature: verified\n" in shown.stdout
    as_json = laptop.forge("config", "--json")
    assert_nothing_raw(as_json)
    assert json.loads(as_json.stdout)["registry"]["value"] == f"{tmp_path}/reg{RLO}"  # JSON escapes, and keeps the value
