"""`forge prep`: a data-prep plugin run on the laptop over a JSONL file (SPEC §17), and the
rules that keep data-prep plugins out of jobs while they travel between laptops (SPEC §3)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.cli import forge, forge_process
from support.processes import is_alive
from support.users import system_user


class Laptop:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        self.env.update(FORGE_HOME=str(root / "home"), FORGE_OWNER="alice", NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")

    def forge(self, *args, ok: bool = True, env: dict | None = None, process: bool = False) -> subprocess.CompletedProcess:
        """``forge ARGS`` (in this process; with *process*, as a process of its own: its children, its /proc)."""
        proc = (forge_process if process else forge)(*args, cwd=self.root, env={**self.env, **(env or {})}, timeout=300)
        if ok:
            assert proc.returncode == 0, f"forge {' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def plugin(self, name: str, source: str, params: str = "", version: str = "1.0.0") -> Path:
        root = self.root / name
        root.mkdir()
        module = name.replace("-", "_")
        (root / "plugin.yaml").write_text(
            f"schema: forge/plugin/v1\nname: {name}\nversion: {version}\nkind: data-prep\nentrypoint: {module}:install\n"
            + (f"params:\n{textwrap.indent(textwrap.dedent(params), '  ')}" if params else ""))
        (root / f"{module}.py").write_text(textwrap.dedent(source))
        return root

    def jsonl(self, name: str, lines: list) -> Path:
        path = self.root / name
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
        return path


@pytest.fixture
def laptop(tmp_path) -> Laptop:
    return Laptop(tmp_path)


def one_error(proc: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line (plus at most a hint); never a traceback."""
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and all(ln.startswith(("error: ", "hint: ", "prep    : ")) for ln in lines), proc.stderr
    return errors[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the template, as generated -----------------------------------------------------------


def test_data_prep_template_runs_as_generated(laptop):
    laptop.forge("plugin", "init", "my-prep", "--kind", "data-prep")
    raw = laptop.jsonl("raw.jsonl", [{"id": 1, "prompt": "  say \n yes  "}, {"id": 2, "prompt": "x" * 3000}, "",
                                     {"id": 3, "prompt": "a  b"}])
    out = laptop.root / "clean.jsonl"
    done = laptop.forge("prep", "my-prep", "--input", raw, "--output", out)
    assert done.stdout.splitlines() == [f"prep    : 3 records in, 2 out (1 dropped) -> {out}, {out}.provenance.json"]
    assert [json.loads(ln) for ln in out.read_text().splitlines()] == [{"id": 1, "prompt": "say yes"}, {"id": 3, "prompt": "a b"}]

    digest = laptop.forge("plugin", "digest", "my-prep").stdout.strip()
    prov = json.loads((laptop.root / "clean.jsonl.provenance.json").read_text())
    assert prov["schema"] == "forge/prep/v1"
    assert prov["plugin"] == {"name": "my-prep", "version": "0.1.0", "tree_digest": digest, "source": "directory",
                              "directory": str(laptop.root / "my-prep")}
    assert prov["params"] == {"my_prep.max_chars": 2048}  # the declared default
    assert prov["input"] == {"path": str(raw), "sha256": sha256(raw), "records": 3, "bytes": raw.stat().st_size}
    assert prov["output"] == {"path": str(out), "sha256": sha256(out), "records": 2, "bytes": out.stat().st_size}
    assert prov["dropped"] == 1

    # --set, typed as forge submit types it
    laptop.forge("prep", "my-prep", "-i", raw, "-o", out, "--set", "my_prep.max_chars=3")
    assert [json.loads(ln)["id"] for ln in out.read_text().splitlines()] == [3]
    assert json.loads((laptop.root / "clean.jsonl.provenance.json").read_text())["params"] == {"my_prep.max_chars": 3}
    bad = laptop.forge("prep", "my-prep", "-i", raw, "-o", out, "--set", "my_prep.max_chars=many", ok=False)
    assert bad.returncode == 2
    assert one_error(bad) == "error: --set my_prep.max_chars=many: 'my_prep.max_chars' is declared as int, got a string 'many'"
    unknown = laptop.forge("prep", "my-prep", "-i", raw, "-o", out, "--set", "my_prep.max_char=3", ok=False)
    assert "unknown key 'my_prep.max_char' (closest: my_prep.max_chars)" in one_error(unknown)


# -- published, pulled, copied; never in a job --------------------------------------------


def test_a_published_data_prep_plugin_runs_by_reference_under_the_lock_signature_policy(laptop):
    laptop.forge("plugin", "init", "my-prep", "--kind", "data-prep")
    laptop.forge("plugin", "publish", "my-prep")
    raw = laptop.jsonl("raw.jsonl", [{"prompt": " a  b "}])
    out = laptop.root / "out.jsonl"
    done = laptop.forge("prep", "alice/my-prep@0.1.0", "-i", raw, "-o", out)
    assert "prep    : alice/my-prep@0.1.0 (sf1:" in done.stderr and "signature: unsigned)" in done.stderr
    prov = json.loads(Path(f"{out}.provenance.json").read_text())
    digest = laptop.forge("plugin", "digest", "my-prep").stdout.strip()
    assert prov["plugin"]["ref"] == "alice/my-prep@0.1.0" and prov["plugin"]["tree_digest"] == digest
    assert prov["plugin"]["source"] == "registry" and prov["plugin"]["signature"] == "unsigned"
    assert out.read_text() == '{"prompt": "a b"}\n'
    os.unlink(out)

    # as forge lock: --require-signatures refuses an unsigned version, nothing is written
    refused = laptop.forge("prep", "alice/my-prep@0.1.0", "-i", raw, "-o", out, "--require-signatures", ok=False)
    assert refused.returncode == 9 and "signatures are required, but no key is trusted for owner alice" in one_error(refused)
    # an owner with trusted keys: an unsigned version is refused, a signed one verified and recorded
    laptop.forge("key", "generate")
    laptop.forge("trust", "add", "alice", next((laptop.root / "home").rglob("default.pub")))
    refused = laptop.forge("prep", "alice/my-prep@0.1.0", "-i", raw, "-o", out, ok=False)
    assert refused.returncode == 9 and "has no signature, but owner alice has trusted keys" in one_error(refused)
    assert not out.exists()
    text = (laptop.root / "my-prep" / "plugin.yaml").read_text()
    (laptop.root / "my-prep" / "plugin.yaml").write_text(text.replace("version: 0.1.0", "version: 0.2.0"))
    laptop.forge("plugin", "publish", "my-prep", "--sign")
    done = laptop.forge("prep", "alice/my-prep@0.2.0", "-i", raw, "-o", out)
    assert "signature: verified)" in done.stderr
    assert json.loads(Path(f"{out}.provenance.json").read_text())["plugin"]["signature"] == "verified"


def test_data_prep_plugins_are_shared_between_laptops_but_never_enter_a_job(laptop):
    laptop.forge("plugin", "init", "my-prep", "--kind", "data-prep")
    here, there = laptop.root / "reg-a", laptop.root / "reg-b"
    laptop.forge("plugin", "publish", "my-prep", "--registry", here)
    copied = laptop.forge("plugin", "copy", "alice/my-prep", "--from", here, "--to", there)
    assert "alice/my-prep@0.1.0" in copied.stdout + copied.stderr
    pulled = laptop.forge("plugin", "pull", "alice/my-prep@0.1.0", "--registry", there, "-o", laptop.root / "pulled")
    assert "pulled alice/my-prep@0.1.0" in pulled.stdout
    raw = laptop.jsonl("raw.jsonl", [{"prompt": "x  y"}])
    laptop.forge("prep", "alice/my-prep", "--registry", there, "-i", raw, "-o", laptop.root / "out.jsonl")

    rule = "alice/my-prep@0.1.0 is a data-prep plugin; data-prep plugins never enter a job (they run on the laptop, with forge prep)"
    exp = laptop.root / "exp"
    exp.mkdir()
    yaml_text = "schema: forge/job/v1\nname: exp\nentrypoint: python -m train\nplugins: []\nbackend: local\n"
    (exp / "forge.yaml").write_text(yaml_text)
    add = laptop.forge("plugin", "add", "alice/my-prep", "--dir", exp, "--registry", there, ok=False)
    assert add.returncode == 15 and one_error(add) == f"error: {rule}"
    assert (exp / "forge.yaml").read_text() == yaml_text and not (exp / "plugins.lock.json").exists()
    (exp / "forge.yaml").write_text(yaml_text.replace("plugins: []", "plugins: [alice/my-prep]"))
    lock = laptop.forge("lock", exp, "--registry", there, ok=False)
    assert lock.returncode == 15 and one_error(lock) == f"error: {rule}"


def test_bundle_create_refuses_a_data_prep_plugin_in_a_hand_made_lock(laptop):
    # forge lock never writes one; a lock edited by hand must not smuggle it into a bundle
    from starforge.experiment.lock import entry_from_tree
    from starforge.experiment.lockfile import LockFile
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.store import PluginStore

    laptop.forge("plugin", "init", "my-prep", "--kind", "data-prep")
    reg = laptop.root / "reg"
    laptop.forge("plugin", "publish", "my-prep", "--registry", reg)
    registry = DirectoryRegistry(reg)
    info = registry.get("alice", "my-prep", "0.1.0")
    exp = laptop.root / "exp"
    exp.mkdir()
    (exp / "forge.yaml").write_text("schema: forge/job/v1\nname: exp\nentrypoint: python -m train\n"
                                    "plugins: [alice/my-prep@0.1.0]\nbackend: local\n")
    entry = entry_from_tree(info, PluginStore(registry).tree_of(info), "alice/my-prep@==0.1.0", None)
    lock = LockFile(plugins=(entry,), registry=str(reg))
    (exp / "plugins.lock.json").write_text(lock.to_json())
    refused = laptop.forge("bundle", "create", exp, "-o", laptop.root / "b.tar", "--registry", reg, ok=False)
    assert refused.returncode == 15  # the lock is read with the rules forge lock applies
    assert "alice/my-prep@0.1.0 is a data-prep plugin; data-prep plugins never enter a job" in one_error(refused)
    assert not (laptop.root / "b.tar").exists()


# -- one-line errors; nothing written -----------------------------------------------------

STRICT = """
def install(params):
    def step(record):
        if record.get("boom"):
            raise KeyError("no field 'text'")
        if record.get("as_list"):
            return [record]
        return {**record, "seen": True}
    return step
"""


@pytest.mark.parametrize("lines, message", [
    ([{"a": 1}, {"a": 2}, '{"a": 3', {"a": 4}], "raw.jsonl:3: not valid JSON (Expecting ',' delimiter at column 8)"),
    ([{"a": 1}, "[1, 2]"], "raw.jsonl:2: expected a JSON object, got a list"),
    ([{"a": 1}, "", {"boom": True}], "raw.jsonl:3: the plugin raised KeyError: \"no field 'text'\""),
    ([{"as_list": True}], "raw.jsonl:1: the plugin returned a list, not a JSON object (or None to drop the record)"),
])
def test_a_bad_record_stops_the_run_naming_the_line_and_nothing_is_written(laptop, lines, message):
    laptop.plugin("strict-prep", STRICT)
    raw = laptop.jsonl("raw.jsonl", lines)
    out = laptop.root / "out.jsonl"
    out.write_text("previous output\n")
    failed = laptop.forge("prep", "strict-prep", "-i", raw, "-o", out, ok=False)
    assert failed.returncode == 17
    assert one_error(failed) == f"error: {raw.parent / message}; nothing was written"
    assert out.read_text() == "previous output\n"
    assert sorted(p.name for p in laptop.root.iterdir() if p.is_file()) == ["out.jsonl", "raw.jsonl"]  # no temp file left


def test_missing_input_and_missing_output_directory_are_one_line_errors(laptop):
    laptop.plugin("strict-prep", STRICT)
    raw = laptop.jsonl("raw.jsonl", [{"a": 1}])
    missing = laptop.forge("prep", "strict-prep", "-i", laptop.root / "nope.jsonl", "-o", laptop.root / "out.jsonl", ok=False)
    assert missing.returncode == 2 and one_error(missing) == f"error: input {laptop.root / 'nope.jsonl'}: no such file"
    nowhere = laptop.root / "no-such-dir" / "out.jsonl"
    failed = laptop.forge("prep", "strict-prep", "-i", raw, "-o", nowhere, ok=False)
    assert failed.returncode == 2
    assert one_error(failed) == f"error: output {nowhere}: directory {nowhere.parent} does not exist"
    assert not nowhere.parent.exists()
    algo = laptop.root / "algo"
    algo.mkdir()
    (algo / "plugin.yaml").write_text("schema: forge/plugin/v1\nname: algo\nversion: 1.0.0\nkind: algorithm\nentrypoint: algo:install\n")
    (algo / "algo.py").write_text("def install(params):\n    pass\n")
    wrong = laptop.forge("prep", algo, "-i", raw, "-o", laptop.root / "out.jsonl", ok=False)
    assert wrong.returncode == 2
    assert one_error(wrong) == "error: algo@1.0.0 is an algorithm plugin; forge prep runs data-prep plugins only"


# -- where it runs ------------------------------------------------------------------------

SNOOP = """
import os, sys

def install(params):
    seen = {k: os.environ.get(k) for k in ("FORGE_REGISTRY_PASSWORD", "FORGE_KEY_PASSPHRASE", "FORGE_REGISTRY_USER",
                                           "FORGE_RAY_TOKEN", "HF_TOKEN")}
    def step(record):
        return {**record, "env": seen, "python": sys.executable, "pid": os.getpid()}
    return step
"""


def test_the_plugin_runs_in_a_child_without_credentials_under_the_chosen_python(laptop, tmp_path_factory):
    laptop.plugin("snoop-prep", SNOOP)
    raw = laptop.jsonl("raw.jsonl", [{"a": 1}])
    out = laptop.root / "out.jsonl"
    secrets = {"FORGE_REGISTRY_PASSWORD": "pw", "FORGE_KEY_PASSPHRASE": "pp", "FORGE_REGISTRY_USER": "u",
               "FORGE_RAY_TOKEN": "t", "HF_TOKEN": "hf"}
    laptop.forge("prep", "snoop-prep", "-i", raw, "-o", out, env=secrets, process=True)
    (rec,) = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert rec["env"] == {"FORGE_REGISTRY_PASSWORD": None, "FORGE_KEY_PASSPHRASE": None, "FORGE_REGISTRY_USER": None,
                          "FORGE_RAY_TOKEN": None, "HF_TOKEN": "hf"}  # the user's own variables stay
    assert rec["python"] == sys.executable

    # --python: an interpreter with nothing of StarForge installed (where the plugin's own dependencies live)
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)], check=True)
    bare = venv / "bin" / "python"
    assert subprocess.run([bare, "-c", "import starforge"], capture_output=True, cwd=str(venv)).returncode != 0
    laptop.forge("prep", "snoop-prep", "-i", raw, "-o", out, "--python", bare)
    (rec,) = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert rec["python"] == str(bare)
    assert json.loads(Path(f"{out}.provenance.json").read_text())["python"] == str(bare)
    gone = laptop.forge("prep", "snoop-prep", "-i", raw, "-o", out, "--python", laptop.root / "no-python", ok=False)
    assert gone.returncode == 2 and "not an executable interpreter" in one_error(gone)


def test_what_the_plugin_prints_goes_to_stderr_so_json_stays_parseable(laptop):
    laptop.plugin("chatty-prep", "def install(params):\n    print('installing')\n    return lambda r: print('record', r) or r\n")
    raw = laptop.jsonl("raw.jsonl", [{"a": 1}, {"a": 2}])
    done = laptop.forge("prep", "chatty-prep", "-i", raw, "-o", laptop.root / "out.jsonl", "--json")
    record = json.loads(done.stdout)
    assert (record["input"]["records"], record["output"]["records"], record["dropped"]) == (2, 2, 0)
    assert "installing" in done.stderr and "record {'a': 2}" in done.stderr


def test_only_the_digested_files_are_imported(laptop):
    # helper.py is on disk beside the plugin but .forgeignore keeps it out of the package:
    # the child imports from the digested bytes only, so the plugin cannot reach it.
    root = laptop.plugin("picky-prep", "import helper\n\ndef install(params):\n    return dict\n")
    (root / "helper.py").write_text("")
    (root / ".forgeignore").write_text("helper.py\n")
    failed = laptop.forge("prep", "picky-prep", "-i", laptop.jsonl("raw.jsonl", [{}]), "-o", laptop.root / "o.jsonl", ok=False)
    assert failed.returncode == 17
    assert "picky-prep@1.0.0: importing 'picky_prep' raised ModuleNotFoundError: No module named 'helper'" in one_error(failed)


# -- streaming ----------------------------------------------------------------------------

PEAK = """
import json, resource, sys
from starforge.prep.run import plugin_from_directory, prep_params, run_prep
plugin = plugin_from_directory(sys.argv[1])
run_prep(plugin, prep_params(plugin, []), sys.argv[2], sys.argv[3])
print(json.dumps(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))   # KiB: the prep child's peak
"""


def test_memory_does_not_grow_with_the_input(laptop):
    laptop.forge("plugin", "init", "my-prep", "--kind", "data-prep")
    prompt = " ".join(f"word{i}" for i in range(12))

    def peak_kib(n: int) -> int:
        raw = laptop.root / f"raw-{n}.jsonl"
        # each line as json.dumps writes the record (the prompt needs no escaping), at a sixth
        # of its cost: writing the input was half of this test's time
        assert f'{{"id": 7, "prompt": "  {prompt}  7 "}}' == json.dumps({"id": 7, "prompt": f"  {prompt}  7 "})
        with open(raw, "w") as f:
            f.writelines(f'{{"id": {i}, "prompt": "  {prompt}  {i} "}}\n' for i in range(n))
        out = laptop.root / f"out-{n}.jsonl"
        proc = subprocess.run([sys.executable, "-c", PEAK, str(laptop.root / "my-prep"), str(raw), str(out)],
                              capture_output=True, text=True, env=laptop.env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert sum(1 for _ in open(out)) == n
        return int(proc.stdout.strip())

    small, large = peak_kib(20_000), peak_kib(300_000)
    # 300,000 records are about 36 MB of JSONL and over 300 MB as Python dicts; streamed,
    # the child's peak stays where 20,000 records put it (buffers of about 1 MB)
    assert large - small < 16 * 1024, (small, large)


# -- what forge reads itself; what the plugin leaves behind ---------------------------------

EXTRA_LINE = """
import os, sys

def install(params):
    # the output's descriptor is the child's second argument: a line of the plugin's own
    os.write(int(sys.argv[2]), b'{"planted": true}\\n')
    return lambda record: record
"""


def test_provenance_counts_and_hashes_the_file_forge_renames_into_place(laptop):
    laptop.plugin("extra-prep", EXTRA_LINE)
    raw = laptop.jsonl("raw.jsonl", [{"a": 1}, "", {"a": 2}])
    out = laptop.root / "out.jsonl"
    laptop.forge("prep", "extra-prep", "-i", raw, "-o", out)
    assert out.read_text().splitlines() == ['{"planted": true}', '{"a": 1}', '{"a": 2}']
    prov = json.loads(Path(f"{out}.provenance.json").read_text())
    assert prov["output"] == {"path": str(out), "sha256": sha256(out), "records": 3, "bytes": out.stat().st_size}
    assert prov["input"] == {"path": str(raw), "sha256": sha256(raw), "records": 2, "bytes": raw.stat().st_size}
    assert prov["dropped"] == -1  # one record more out than in: what was written, not what the plugin says


LINGERING = """
import os, sys, time

def install(params):
    pid = os.fork()
    if pid == 0:  # a grandchild of forge that holds every descriptor the child had
        time.sleep(120)
        os._exit(0)
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(pid))
    return lambda record: record
"""


def test_a_process_the_plugin_leaves_behind_neither_delays_prep_nor_outlives_it(laptop):
    import time

    laptop.plugin("lingering-prep", LINGERING)
    raw = laptop.jsonl("raw.jsonl", [{"a": 1}])
    pid_file = laptop.root / "grandchild.pid"
    started = time.monotonic()
    try:
        laptop.forge("prep", "lingering-prep", "-i", raw, "-o", laptop.root / "out.jsonl", env={"PID_FILE": str(pid_file)},
                     process=True)
        took = time.monotonic() - started
        grandchild = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while is_alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not is_alive(grandchild)  # ended with the plugin's process group
        assert took < 60, took  # not the grandchild's 120 s
    finally:
        if pid_file.exists() and is_alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), 9)


# -- forge's own credentials, read through /proc ------------------------------------------

SECRETS = {"FORGE_REGISTRY_PASSWORD": "push-S3cr3t", "FORGE_KEY_PASSPHRASE": "sign-S3cr3t",
           "FORGE_REGISTRY_USER": "ci-pusher", "FORGE_RAY_TOKEN": "ray-T0ken", "HF_TOKEN": "hf-token-456"}

PROC_SNOOP = """
import json, os

def ancestors():
    # every process above this one, forge first: what its /proc/<pid>/environ and /proc/<pid>/mem give away
    seen, pid = [], os.getppid()
    while pid > 1:
        entry = {"pid": pid}
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entry["environ"] = f.read().decode("utf-8", "replace").split("\\0")
        except OSError as exc:
            entry["environ"] = f"unreadable: {exc.strerror}"
        entry["mem"] = memory_has(pid, [v[::-1].encode() for v in json.loads(os.environ["SNOOP_FOR"])])
        seen.append(entry)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return seen

def memory_has(pid, needles):
    found = set()
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if not perms.startswith("r") or line.rstrip().endswith(("[vvar]", "[vsyscall]")):
                    continue
                lo, hi = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(lo)
                    data = mem.read(hi - lo)
                except (OSError, OverflowError, ValueError):
                    continue
                found.update(n.decode() for n in needles if n in data)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return sorted(found)

def install(params):
    seen = ancestors()
    return lambda record: {"ancestors": seen}
"""


def _snooped(out: Path) -> list:
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    return record["ancestors"]


def test_the_plugin_cannot_read_forges_credentials_from_its_proc_environ(laptop):
    laptop.plugin("proc-snoop", PROC_SNOOP)
    raw = laptop.jsonl("raw.jsonl", [{"a": 1}])
    out = laptop.root / "out.jsonl"
    values = [SECRETS[k] for k in SECRETS if k != "HF_TOKEN"]
    laptop.forge("prep", "proc-snoop", "-i", raw, "-o", out, env={**SECRETS, "SNOOP_FOR": json.dumps([v[::-1] for v in values])},
                 process=True)
    forge, *_ = _snooped(out)
    # The forge process's environment block, as /proc shows it: no credential variable,
    # the user's own variables still there (so the read itself worked).
    assert isinstance(forge["environ"], list), forge
    assert "HF_TOKEN=hf-token-456" in forge["environ"]
    assert not [e for e in forge["environ"] if e.startswith(tuple(k + "=" for k in SECRETS if k != "HF_TOKEN"))]
    assert not [e for e in forge["environ"] if any(v in e for v in values)]


def _python_for(user: str) -> str | None:
    """An interpreter of this Python's version that *user* can run (this one may sit in root's home)."""
    import shutil

    for candidate in (os.path.realpath(sys.executable), shutil.which(f"python{sys.version_info[0]}.{sys.version_info[1]}",
                                                                      path="/usr/local/bin:/usr/bin")):
        if candidate and subprocess.run(["runuser", "-u", user, "--", candidate, "-c", "pass"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def test_as_an_ordinary_user_the_plugin_can_read_neither_forges_environ_nor_its_memory(tmp_path):
    # As the test's own user (root) the memory of any process is readable; an ordinary user's
    # plugin must find forge's /proc/<pid>/environ and /proc/<pid>/mem closed.
    import shutil
    import site
    import tempfile

    other = "forge-other"
    system_user(other, "to act as another user")
    python = _python_for(other)
    repo = Path(__file__).resolve().parents[2]
    path = [str(repo), *site.getsitepackages()]
    if python is None or subprocess.run(["runuser", "-u", other, "--", "env", f"PYTHONPATH={os.pathsep.join(path)}",
                                         python, "-c", "import starforge.cli.main, click, yaml"],
                                        capture_output=True).returncode != 0:
        pytest.skip("the second user can reach no interpreter of this version with this checkout and its packages")
    work = Path(tempfile.mkdtemp(prefix="forge-snoop-", dir="/tmp"))
    try:
        laptop = Laptop(work)
        laptop.plugin("proc-snoop", PROC_SNOOP)
        raw = laptop.jsonl("raw.jsonl", [{"a": 1}])
        subprocess.run(["chown", "-R", other, str(work)], check=True)
        values = [SECRETS[k] for k in SECRETS if k != "HF_TOKEN"]
        env = {**laptop.env, **SECRETS, "SNOOP_FOR": json.dumps([v[::-1] for v in values]), "HOME": str(work),
               "PYTHONPATH": os.pathsep.join(path)}
        proc = subprocess.run(["runuser", "-u", other, "--", "env", *[f"{k}={v}" for k, v in env.items()],
                               python, "-m", "starforge", "prep", "proc-snoop", "-i", str(raw), "-o", str(work / "out.jsonl")],
                              cwd=work, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        forge, *_ = _snooped(work / "out.jsonl")
    finally:
        shutil.rmtree(work)
    assert forge["environ"] == "unreadable: Permission denied"
    assert forge["mem"] == "unreadable: Permission denied"
