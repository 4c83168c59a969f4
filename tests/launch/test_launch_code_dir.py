"""The job's code directory: the runtime compiled once per job on the node, never anyone else's.

The node entry (``python3 <zip> --spec …``, as every backend starts a job) makes a
directory under the job's ``TMPDIR`` holding the runtime zip's sources with their compiled
code (one zip, compiled by the entry itself) and runs the launcher from there in its own
process when the job's Python is its own; every process of the job imports that code, so
no process of the job compiles the runtime after the entry. A directory of another user,
of another job, or made from another zip is never used.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from launch_jobs import demo_plugin
from support.users import system_user

from starforge.cluster import runtime_zip
from starforge.cluster.codedir import CODE_ZIP, RUNTIME_MODULES, WORKER_MODULES, make_code_dir, make_node_code_dir, pointer_path

ZIP = Path(".forge-runtime") / "starforge-runtime.zip"
OTHER_USER = "forge-other"

# What a worker imports of StarForge at start when it imports the plugin's target (the
# plugin is checked, imported and installed there), and when it does not (nothing of the
# plugin runs). Pinned: a module added to a worker's start is a decision, not an accident.
WORKER_MODULES_WITHOUT_TARGET = [
    "starforge", "starforge.cluster", "starforge.cluster.atomic", "starforge.cluster.attempts",
    "starforge.cluster.binding", "starforge.cluster.codedir", "starforge.cluster.digest", "starforge.cluster.errors",
    "starforge.cluster.exits",
    "starforge.cluster.hyperparams_and_deferred", "starforge.cluster.import_hooks", "starforge.cluster.interpreter",
    "starforge.cluster.job", "starforge.cluster.jobdir_layout", "starforge.cluster.jobspec", "starforge.cluster.load_order",
    "starforge.cluster.names",
    "starforge.cluster.plain_specifiers", "starforge.cluster.process_job", "starforge.cluster.provenance",
    "starforge.cluster.ray_init", "starforge.cluster.recipe_imports", "starforge.cluster.record",
    "starforge.cluster.status", "starforge.cluster.utctime",
]
# ... and, once the target is imported: the snapshot loader, the requirement check and
# patching with its target language (the plugin's own `from starforge import patching`).
WORKER_MODULES_WITH_TARGET = sorted(WORKER_MODULES_WITHOUT_TARGET + [
    "starforge.cluster.loader", "starforge.cluster.patch_targets", "starforge.cluster.patching",
    "starforge.cluster.requires", "starforge.patching",
])
# The plugin's requires are plain (`>=X`) and the versions checked bare releases (the
# running Python's and starforge-core's): decided without importing packaging at all.
VENDORED_FOR_REQUIRES: list = []


def entry_launch(job, *cmd: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Start *job* as the backends do: the node entry of its runtime zip, under this interpreter."""
    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    runtime_zip.write_runtime_zip(str(zip_path))
    argv = [sys.executable, str(zip_path), "--spec", str(job.spec_path)] + (["--", *cmd] if cmd else [])
    full = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    node_tmp = job.dir.parent / "node-tmp"
    node_tmp.mkdir(exist_ok=True)
    full.update(FORGE_HOME=str(job.dir.parent / "forge-home"), TMPDIR=str(node_tmp))
    full.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, env=full, timeout=timeout, cwd=str(job.dir.parent))


def reported(result, tag: str):
    (line,) = [x for x in result.stdout.splitlines() if x.startswith(tag + " ")]
    return json.loads(line[len(tag) + 1:])


def test_the_launcher_runs_in_the_entrys_own_interpreter_from_the_jobs_code_directory(builder):
    trainer = """
    import json, os, stat, sys
    import starforge
    from app import algo
    code = os.environ["FORGE_CODE_DIR"]
    st = os.lstat(code)
    runtime = {m: sys.modules[m].__file__ for m in sys.modules if m.startswith("starforge")}
    compiled_as = {m: sys.modules["starforge.cluster." + m].__loader__.get_code("starforge.cluster." + m).co_filename
                   for m in ("codedir", "interpreter", "job")}
    print("TRAINER " + json.dumps({"orig_argv": sys.orig_argv, "starforge": starforge.__file__, "code": code,
                                   "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "compute": algo.compute(1),
                                   "runtime": runtime, "compiled_as": compiled_as}))
    """
    job = builder.job(plugins=[demo_plugin()], trainer=textwrap.dedent(trainer))
    result = entry_launch(job)
    assert result.returncode == 0, result.stderr
    seen = reported(result, "TRAINER")
    # One interpreter start: the trainer runs in the very interpreter that ran the entry
    # (an exec would have replaced its argv with `-m starforge.launch`).
    assert seen["orig_argv"] == [sys.executable, str(job.dir / ZIP), "--spec", str(job.spec_path)]
    assert seen["compute"] == 20
    code = Path(seen["code"])
    assert code.parent == job.dir.parent / "node-tmp" and code.name.startswith("forge-code-")  # under the job's TMPDIR
    assert seen["mode"] == 0o700 and seen["uid"] == os.getuid()
    assert seen["starforge"] == str(code / CODE_ZIP / "starforge" / "__init__.pyc")
    # Every module of StarForge the launcher imported is the entry's compiled code (zipimport
    # names a module after its .pyc only when it loaded that code, not the source).
    assert len(seen["runtime"]) > 25
    for module, file in seen["runtime"].items():
        assert file.startswith(str(code / CODE_ZIP) + os.sep) and file.endswith(".pyc"), (module, file)
        assert module in RUNTIME_MODULES
    # The entry's own modules were compiled once, by the entry, from the runtime zip (their
    # code names it); the others by the code directory, for the code zip.
    assert seen["compiled_as"] == {"codedir": str(job.dir / ZIP / "starforge" / "cluster" / "codedir.py"),
                                   "interpreter": str(job.dir / ZIP / "starforge" / "cluster" / "interpreter.py"),
                                   "job": str(code / CODE_ZIP / "starforge" / "cluster" / "job.py")}
    assert "runtime : starforge-core" in result.stderr and "from the job's runtime zip" in result.stderr
    assert not code.exists()  # the launcher that made it removed it when it ended
    assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]


SPAWNING_TRAINER = """
import json, multiprocessing, os, sys

def compiled():
    folder = os.environ["FORGE_CODE_DIR"]
    return {os.path.relpath(os.path.join(d, n), folder): os.stat(os.path.join(d, n)).st_mtime_ns
            for d, _, names in os.walk(folder) for n in names}

def work(queue, import_target):
    if import_target:
        from app import algo
        value = algo.compute(1)
    else:
        value = None
    mods = {m: sys.modules[m].__file__ for m in sys.modules if m.startswith("starforge")}
    others = sorted(m for m in sys.modules if m.startswith(("cryptography", "packaging")))
    queue.put((value, mods, others, sys.dont_write_bytecode))

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    before = compiled()
    out = []
    for import_target in (True, True, False):
        p = ctx.Process(target=work, args=(queue, import_target))
        p.start()
        out.append(queue.get())
        p.join()
        out.append(compiled())
    print("SPAWNED " + json.dumps({"before": before, "runs": out, "code": os.environ["FORGE_CODE_DIR"]}))
"""


def test_workers_compile_nothing_the_first_process_compiled_and_import_a_pinned_list(builder):
    plugin = demo_plugin(targets=["app.algo"], requires={"core": ">=0.1", "python": ">=3.10"})
    plugin["files"]["demo_patch_helpers.py"] = "SCALE_NAME = 'demo.scale'\n"
    plugin["files"]["demo_patch.py"] = plugin["files"]["demo_patch.py"].replace(
        "def install(params):", "import demo_patch_helpers\n\ndef install(params):")
    job = builder.job(plugins=[plugin], trainer=SPAWNING_TRAINER)
    result = entry_launch(job)
    assert result.returncode == 0, result.stderr
    seen = reported(result, "SPAWNED")
    before = seen["before"]
    plugin_code = sorted(k for k in before if k.startswith("plugin-code/"))
    # demo_patch and its helper, compiled by the launcher and kept as one file (the workers
    # below load it: they write no file of their own)
    assert [k.split("/")[1].split(".")[0] for k in plugin_code] == ["launcher"]
    assert sorted(k for k in before if not k.startswith("plugin-code/")) == ["forge-code.json", CODE_ZIP]
    (v1, mods1, others1, nowrite1), after1, (v2, mods2, _, _), after2, (v3, mods3, others3, _), after3 = seen["runs"]
    assert (v1, v2, v3) == (20, 20, None) and nowrite1 is False  # the workers could have written code
    # Nothing new and nothing rewritten in the code directory after the first process: no
    # worker compiled a module of StarForge or of the plugin.
    assert after1 == before and after2 == before and after3 == before
    assert sorted(m for m in mods1 if "_vendor" not in m) == WORKER_MODULES_WITH_TARGET
    assert sorted(m for m in mods1 if "_vendor" in m) == VENDORED_FOR_REQUIRES  # requires checked here
    assert sorted(m for m in mods3 if "_vendor" not in m) == WORKER_MODULES_WITHOUT_TARGET
    assert not [m for m in mods3 if "_vendor" in m]  # no target imported: requires not checked, no packaging
    assert others1 == [] and others3 == []  # neither the trainer's packaging nor cryptography
    for module, file in {**mods1, **mods3}.items():  # every module of StarForge: the entry's compiled code
        assert file.startswith(os.path.join(seen["code"], CODE_ZIP) + os.sep) and file.endswith(".pyc"), (module, file)


def foreign_code_dir(kind: str, job, tmp_path: Path) -> Path:
    """A code directory this job's worker must refuse, of the kind named, holding a planted starforge."""
    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    runtime_zip.write_runtime_zip(str(zip_path))
    if kind == "another user":
        # Made and written by a real second user, holding this job's runtime and a key
        # that names this job and this zip: only its owner is wrong.
        system_user(OTHER_USER, "to make a directory of another user")
        made = subprocess.run(["runuser", "-u", OTHER_USER, "--", "mktemp", "-d", "/tmp/forge-code-XXXXXXXX"],
                              capture_output=True, text=True, check=True)
        path = Path(made.stdout.strip())
        source = Path(make_code_dir(str(zip_path), str(job.dir), job.spec["id"]))
        _plant(source)
        pack = subprocess.run(["tar", "-C", str(source), "-cf", "-", "."], capture_output=True, check=True).stdout
        subprocess.run(["runuser", "-u", OTHER_USER, "--", "tar", "-C", str(path), "-xf", "-"], input=pack, check=True)
        shutil.rmtree(source)
        assert path.stat().st_uid != os.getuid() and stat.S_IMODE(path.stat().st_mode) == 0o700
        return path
    if kind == "another job":
        other = job.dir.parent / "other-job"
        other.mkdir(exist_ok=True)
        path = Path(make_code_dir(str(zip_path), str(other), "another-job-id"))
    elif kind == "another zip":
        older = tmp_path / "older.zip"
        older.write_bytes(zip_path.read_bytes() + b"\0")  # another runtime (one byte more)
        path = Path(make_code_dir(str(older), str(job.dir), job.spec["id"]))
    elif kind == "a mode others can enter":
        path = Path(make_code_dir(str(zip_path), str(job.dir), job.spec["id"]))
        os.chmod(path, 0o755)
    else:  # a symlink to a good directory
        target = Path(make_code_dir(str(zip_path), str(job.dir), job.spec["id"]))
        path = tmp_path / "forge-code-link"
        path.symlink_to(target)
        _plant(target)
        return path
    _plant(path)
    return path


def _remove_planted(path: Path) -> None:
    """Remove a code directory the test planted (the suite fails on any left in its TMPDIR)."""
    if path.is_symlink():
        target = Path(os.readlink(path))
        path.unlink()
        path = target
    shutil.rmtree(path, ignore_errors=True)


def _plant(path: Path) -> None:
    """A runtime that says so when it runs: in the directory's code zip (the source, its
    compiled code dropped) and as a package folder in the directory itself."""
    code_zip = path / CODE_ZIP
    with zipfile.ZipFile(code_zip) as zf:
        entries = {info.filename: zf.read(info) for info in zf.infolist()}
    init = entries.pop("starforge/__init__.py") + b"\nprint('PLANTED RUNTIME RAN')\n"
    entries.pop("starforge/__init__.pyc")
    entries["starforge/__init__.py"] = init
    code_zip.unlink()
    with zipfile.ZipFile(code_zip, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    (path / "starforge").mkdir()
    (path / "starforge" / "__init__.py").write_bytes(init)


WORKER_WITH_PLANTED_DIR = """
import os, subprocess, sys
planted = os.environ["PLANTED_CODE_DIR"]
env = dict(os.environ, FORGE_CODE_DIR=planted, PYTHONPATH=planted + os.pathsep + os.environ["PYTHONPATH"])
probe = "import starforge; from app import algo; print('worker', algo.compute(1), starforge.__file__)"
child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
print("child exit", child.returncode)
sys.stdout.write(child.stdout)
sys.stderr.write(child.stderr)
"""


@pytest.mark.parametrize("kind, reason", [
    ("another user", "owned by uid"),
    ("another job", "made for another job"),
    ("another zip", "made from another runtime zip"),
    ("a mode others can enter", "mode 755 lets others in"),
    ("a symlink", "not a directory"),
])
def test_a_code_directory_of_another_user_or_job_or_zip_is_never_used(builder, tmp_path, kind, reason):
    _check_planted_dir_refused(builder, tmp_path, WORKER_WITH_PLANTED_DIR, kind, reason)


def _check_planted_dir_refused(builder, tmp_path: Path, trainer: str, kind: str, reason: str) -> None:
    """A job whose *trainer* points its worker at a planted code directory of *kind*: the
    worker never runs the planted runtime, and the launcher says why (*reason*)."""
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    planted = foreign_code_dir(kind, job, tmp_path)
    try:
        result = entry_launch(job, env={"PLANTED_CODE_DIR": str(planted)})
    finally:
        _remove_planted(planted)
    assert result.returncode == 0, result.stderr
    assert "child exit 0" in result.stdout
    assert "PLANTED RUNTIME RAN" not in result.stdout + result.stderr
    # The worker imported the job's own runtime (the zip) and still carries the plugin.
    assert f"worker 20 {job.dir / ZIP}/starforge/__init__.py" in result.stdout
    assert f"does not use the code directory {planted} ({reason}" in result.stderr


def _made_in(tmp_path: Path, zip_path: Path, job_dir: str = "/jobs/j1", make=make_code_dir, **kwargs) -> Path:
    os.environ["TMPDIR"], old = str(tmp_path), os.environ.get("TMPDIR")
    try:
        import tempfile

        tempfile.tempdir = None
        return Path(make(str(zip_path), job_dir, "j1", **kwargs))
    finally:
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None


def test_a_worker_host_s_code_directory_holds_compiled_what_a_worker_imports(tmp_path):
    # Where no node entry ran (a Ray worker host), the job's first worker there makes the
    # code directory: it compiles what every worker imports (the pinned lists above and Ray's
    # setup hook), not the launcher's modules, which no process there imports.
    assert set(WORKER_MODULES_WITH_TARGET) | {"starforge.cluster.ray_hook"} <= set(WORKER_MODULES) < set(RUNTIME_MODULES)
    zip_path = tmp_path / "runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    job_dir = tmp_path / "job"
    (job_dir / ".forge-runtime").mkdir(parents=True)
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    path = _made_in(node_tmp, zip_path, str(job_dir), make=make_node_code_dir)
    try:
        assert path.parent == node_tmp and Path(pointer_path(str(job_dir))).read_text() == str(path)
        with zipfile.ZipFile(path / CODE_ZIP) as zf:
            names = zf.namelist()
        compiled = {n[: -len(".pyc")].replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".pyc")}
        assert compiled == set(WORKER_MODULES)
        # every source is there all the same: a module outside the list is compiled where imported
        assert "starforge/cluster/launcher.py" in names and "starforge/cluster/launcher.pyc" not in names
    finally:
        shutil.rmtree(path)


def test_the_code_directory_holds_the_runtime_compiled_by_the_entry_itself(tmp_path):
    zip_path = tmp_path / "runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    path = _made_in(tmp_path, zip_path)
    assert path.parent == tmp_path and stat.S_IMODE(path.stat().st_mode) == 0o700
    assert sorted(p.name for p in path.iterdir()) == ["forge-code.json", CODE_ZIP]  # one file, not one per module
    key = json.loads((path / "forge-code.json").read_text())
    assert key["job_id"] == "j1" and key["job_dir"] == "/jobs/j1" and key["pid"] == os.getpid()
    import hashlib
    import importlib.util
    import marshal

    assert key["runtime_sha256"] == hashlib.sha256(zip_path.read_bytes()).hexdigest()
    with zipfile.ZipFile(zip_path) as zf:
        shipped = {name: zf.read(name) for name in zf.namelist() if name.startswith("starforge/")}
    with zipfile.ZipFile(path / CODE_ZIP) as zf:
        kept = {name: zf.read(name) for name in zf.namelist()}
    sources = {name: data for name, data in kept.items() if not name.endswith(".pyc")}
    assert sources == shipped  # the runtime's own sources, byte for byte; no __main__.py
    pycs = {name for name in kept if name.endswith(".pyc")}
    modules = {name[:-4].replace("/", ".").removesuffix(".__init__") for name in pycs}
    assert modules == set(RUNTIME_MODULES)
    for name in pycs:  # PEP 552 hash-based pycs of this interpreter, with their source's hash
        data = kept[name]
        source = kept[name[:-1]]
        assert data[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(data[4:8], "little") == 0b01
        assert data[8:16] == importlib.util.source_hash(source)
        assert marshal.loads(data[16:]).co_filename == str(path / CODE_ZIP / name[:-1])


def test_the_code_directory_reuses_code_compiled_already_only_for_the_same_bytes(tmp_path):
    # The node entry hands over the code of its own modules with the bytes it compiled it from.
    import marshal

    zip_path = tmp_path / "runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    with zipfile.ZipFile(zip_path) as zf:
        status_py = zf.read("starforge/cluster/status.py")
        job_py = zf.read("starforge/cluster/job.py")
    ready = {"starforge/cluster/status.py": (status_py, compile(status_py, "/entry/status.py", "exec")),
             "starforge/cluster/job.py": (job_py + b"\n# not what the zip holds\n", compile(job_py, "/entry/job.py", "exec"))}
    path = _made_in(tmp_path, zip_path, ready=ready)
    with zipfile.ZipFile(path / CODE_ZIP) as zf:
        status_code = marshal.loads(zf.read("starforge/cluster/status.pyc")[16:])
        job_code = marshal.loads(zf.read("starforge/cluster/job.pyc")[16:])
    assert status_code.co_filename == "/entry/status.py"
    assert job_code.co_filename == str(path / CODE_ZIP / "starforge" / "cluster" / "job.py")  # compiled from the zip's bytes


def test_a_code_directory_for_another_interpreter_holds_the_sources_unpacked(tmp_path):
    # The job's Python is not the entry's: its code is that interpreter's to compile, on import.
    zip_path = tmp_path / "runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    path = _made_in(tmp_path, zip_path, compiled=())
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    assert "forge-code.json" in files and "starforge/cluster/job.py" in files and CODE_ZIP not in files
    assert not [f for f in files if f.endswith(".pyc")] and "__main__.py" not in files


TAMPER_THEN_SPAWN = """
import multiprocessing, os, sys

def work():
    from app import algo
    print("worker computed", algo.compute(1), flush=True)

if __name__ == "__main__":
    path = os.path.join(os.environ["FORGE_JOB_DIR"], "forge_plugins", "demo-patch", "demo_patch.py")
    os.chmod(os.path.dirname(path), 0o755)
    os.chmod(path, 0o644)
    with open(path, "a") as f:
        f.write("# tampered\\n")
    p = multiprocessing.get_context("spawn").Process(target=work)
    p.start()
    p.join()
    print("worker exit", p.exitcode)
"""


def test_a_plugin_file_changed_after_verification_stops_a_worker_despite_the_kept_code(builder):
    # The launcher compiled demo_patch.py into the job's code directory; the worker still
    # reads and hashes the file before it would load that code, and stops on the change.
    job = builder.job(plugins=[demo_plugin(targets=["app.algo"])], trainer=TAMPER_THEN_SPAWN)
    result = entry_launch(job)
    assert result.returncode == 0, result.stderr
    assert "worker exit 10" in result.stdout
    assert "worker computed" not in result.stdout
    assert "verification failed" in result.stderr and "demo_patch.py" in result.stderr


def test_a_code_directory_gone_from_this_node_is_passed_over_quietly(builder, tmp_path):
    job = builder.job(plugins=[demo_plugin()], trainer=WORKER_WITH_PLANTED_DIR)
    result = entry_launch(job, env={"PLANTED_CODE_DIR": str(tmp_path / "forge-code-elsewhere")})
    assert result.returncode == 0, result.stderr
    assert f"worker 20 {job.dir / ZIP}/starforge/__init__.py" in result.stdout
    assert "does not use the code directory" not in result.stderr


def test_the_runtime_code_is_kept_even_where_the_job_writes_no_bytecode(builder):
    # Container images often set PYTHONDONTWRITEBYTECODE: the code directory is the job's
    # own, so the launcher still keeps the runtime's code there for the workers, and the
    # trainer (and every other process) keeps the job's setting for its own files.
    trainer = SPAWNING_TRAINER.replace('print("SPAWNED "', 'print("TRAINER writes", sys.dont_write_bytecode); print("SPAWNED "')
    job = builder.job(plugins=[demo_plugin(targets=["app.algo"])], trainer=trainer)
    result = entry_launch(job, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert result.returncode == 0, result.stderr
    assert "TRAINER writes True" in result.stdout
    seen = reported(result, "SPAWNED")
    before = seen["before"]
    assert CODE_ZIP in before
    (v1, mods1, _, nowrite1), after1 = seen["runs"][:2]
    assert v1 == 20 and nowrite1 is True
    assert after1 == before
    for module, file in mods1.items():  # loaded from the entry's compiled code
        assert file.startswith(os.path.join(seen["code"], CODE_ZIP) + os.sep) and file.endswith(".pyc"), (module, file)
    assert not list((job.dir / "recipe").rglob("__pycache__"))  # the job's own files: no bytecode


def test_the_entry_compiles_packaging_only_for_what_the_jobs_requirements_use():
    from starforge.cluster.codedir import modules_to_compile

    def vendored(*requires):
        spec = {"core_version": "0.1.0", "plugins": [{"requires": r} for r in requires[:1]],
                "recipe": {"plugins": [{"requires": r} for r in requires[1:]]}}
        return sorted(m.rsplit(".", 1)[-1] for m in modules_to_compile(spec) if "_vendor" in m)

    assert vendored() == [] and vendored({}) == []  # no requires: no packaging in any process
    # plain specifiers against bare releases (the running Python, a released starforge-core): none
    assert vendored({"core": ">=0.1", "python": ">=3.10,!=3.12.0"}) == []
    both = ["_ranges", "_vendor", "packaging", "specifiers", "version"]
    assert vendored({"core": ">=0.1"}, {"python": "~=3.11"}) == both  # a built-in's requires count too
    assert vendored({"packages": {"torch": ">=2"}}) == both  # installed versions may carry a local part
    dev = {"core_version": "0.2.0.dev1", "plugins": [{"requires": {"core": ">=0.1"}}]}  # not a bare release
    assert sorted(m.rsplit(".", 1)[-1] for m in modules_to_compile(dev) if "_vendor" in m) == ["_vendor", "packaging", "version"]


def test_the_compiled_code_records_its_sources_hash(tmp_path):
    # Unchecked by default (source and code are written together, in one file); an
    # interpreter told to check every hash-based pyc finds each hash right and loads the code.
    zip_path = tmp_path / "runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    path = _made_in(tmp_path, zip_path)
    probe = (f"import sys; sys.path.insert(0, {str(path / CODE_ZIP)!r}); import starforge.cluster.job as job; "
             "print(job.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "--check-hash-based-pycs", "always", "-c", probe], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(path / CODE_ZIP / "starforge" / "cluster" / "job.pyc")


WORKER_WITHOUT_THE_ENTRYS_ENVIRONMENT = """
import os, subprocess, sys
code = os.environ["FORGE_CODE_DIR"]
pointer = [n for n in os.listdir(os.path.join(os.environ["FORGE_JOB_DIR"], ".forge-runtime")) if n.startswith("code-dir@")]
print("pointer", pointer, open(os.path.join(os.environ["FORGE_JOB_DIR"], ".forge-runtime", pointer[0])).read() == code)
# As a Ray worker starts: the job's variables as they were at submission, so no FORGE_CODE_DIR
# and no code zip on PYTHONPATH.
env = {k: v for k, v in os.environ.items() if k != "FORGE_CODE_DIR"}
env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if not p.startswith(code))
probe = "import starforge; from app import algo; print('worker', algo.compute(1), starforge.__file__)"
child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
print("child exit", child.returncode, "code", code)
sys.stdout.write(child.stdout)
sys.stderr.write(child.stderr)
"""


def test_a_process_without_the_entrys_environment_finds_the_code_directory_through_the_job_directory(builder):
    job = builder.job(plugins=[demo_plugin(targets=["app.algo"])], trainer=WORKER_WITHOUT_THE_ENTRYS_ENVIRONMENT)
    result = entry_launch(job)
    assert result.returncode == 0, result.stderr
    assert "pointer ['code-dir@" in result.stdout and "'] True" in result.stdout
    assert "child exit 0" in result.stdout
    code = result.stdout.split("child exit 0 code ")[1].split()[0]
    assert f"worker 20 {code}/{CODE_ZIP}/starforge/__init__.pyc" in result.stdout  # the job's compiled code
    assert "does not use the code directory" not in result.stderr
    # The launcher removed the directory and this node's pointer to it.
    assert not Path(code).exists()
    assert not [p for p in (job.dir / ".forge-runtime").iterdir() if p.name.startswith("code-dir@")]


POINTED_AT_A_PLANTED_DIR = """
import os, subprocess, sys
runtime = os.path.join(os.environ["FORGE_JOB_DIR"], ".forge-runtime")
(pointer,) = [n for n in os.listdir(runtime) if n.startswith("code-dir@")]
with open(os.path.join(runtime, pointer), "w") as f:
    f.write(os.environ["PLANTED_CODE_DIR"])
env = {k: v for k, v in os.environ.items() if k != "FORGE_CODE_DIR"}
code = os.environ["FORGE_CODE_DIR"]
env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if not p.startswith(code))
probe = "import starforge; from app import algo; print('worker', algo.compute(1), starforge.__file__)"
child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
print("child exit", child.returncode)
sys.stdout.write(child.stdout)
sys.stderr.write(child.stderr)
"""


@pytest.mark.parametrize("kind, reason", [("another job", "made for another job"), ("another zip", "made from another runtime zip")])
def test_a_pointer_to_a_code_directory_of_another_job_or_zip_is_never_used(builder, tmp_path, kind, reason):
    _check_planted_dir_refused(builder, tmp_path, POINTED_AT_A_PLANTED_DIR, kind, reason)


def _other_uid() -> int:
    return int(subprocess.run(["id", "-u", OTHER_USER], capture_output=True, text=True, check=True).stdout)


def _as_other(*argv: str) -> str:
    return subprocess.run(["runuser", "-u", OTHER_USER, "--", *argv], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("kind", ["owned by another user", "in a folder of another user", "a link of another user",
                                  "writable by others without the sticky bit"])
def test_a_tmpdir_another_user_could_swap_the_code_directory_in_is_refused(builder, tmp_path, kind):
    # The launcher runs from the code directory made under TMPDIR: where another user could
    # rename it and put their own in its place, the job stops before anything runs from there.
    system_user(OTHER_USER, "to make a directory of another user")
    made = []
    if kind == "owned by another user":  # a predictable TMPDIR (/tmp/$USER-tmp) the other user made first
        tmpdir = Path(_as_other("mktemp", "-d", "/tmp/forge-user-tmp-XXXXXXXX"))
        _as_other("chmod", "0777", str(tmpdir))
        made.append(tmpdir)
        culprit, why = tmpdir, f"is owned by uid {_other_uid()} (not this user, not root)"
    elif kind == "in a folder of another user":  # this user's folder, inside one the other user owns
        outer = Path(_as_other("mktemp", "-d", "/tmp/forge-user-XXXXXXXX"))
        _as_other("chmod", "0755", str(outer))
        made.append(outer)
        tmpdir = outer / "tmp"
        tmpdir.mkdir(mode=0o700)
        culprit, why = outer, f"is owned by uid {_other_uid()} (not this user, not root)"
    elif kind == "a link of another user":  # a link the other user can point elsewhere at any time
        target = tmp_path / "real-tmp"
        target.mkdir(mode=0o700)
        tmpdir = Path(_as_other("mktemp", "-u", "/tmp/forge-user-link-XXXXXXXX"))
        _as_other("ln", "-s", str(target), str(tmpdir))
        made.append(tmpdir)
        culprit, why = tmpdir, f"is owned by uid {_other_uid()} (not this user, not root)"
    else:
        tmpdir = tmp_path / "shared-tmp"
        tmpdir.mkdir()
        os.chmod(tmpdir, 0o777)
        culprit, why = tmpdir, "is writable by others without the sticky bit (mode 777)"
    job = builder.job(plugins=[demo_plugin()], trainer="print('TRAINER RAN')\n")
    try:
        result = entry_launch(job, env={"TMPDIR": str(tmpdir)})
        leftover = [p.name for p in Path(os.path.realpath(tmpdir)).iterdir()]
    finally:
        for path in made:
            subprocess.run(["rm", "-rf", str(path)], check=True)
    assert result.returncode == 10, result.stdout + result.stderr
    assert "TRAINER RAN" not in result.stdout and "plugin  :" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error == [f"error: TMPDIR={tmpdir} is not safe for the job's code directory: {culprit} {why}"], result.stderr
    assert "hint: set TMPDIR to a folder only you (or root) can write" in result.stderr
    status = json.loads((job.dir / "status.json").read_text())
    assert (status["phase"], status["code"]) == ("verify", 10)
    assert leftover == []  # no code directory was made there
