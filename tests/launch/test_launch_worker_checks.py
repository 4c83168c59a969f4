"""What a worker checks: the tree's listing, and the hash of each plugin file it imports or reads.

The launcher verifies every byte of every tree once; each later process of the job (here a
subprocess of the trainer, started through the ``sitecustomize`` bootstrap) lists the tree
and hashes a file only when it imports or reads it. Every test changes the staged tree
*after* the launcher verified it, then starts a worker.
"""

from __future__ import annotations

import json

import pytest

BIG = 8 << 20

BULKY = {
    "name": "bulky",
    "files": {
        "plugin.yaml": "schema: forge/plugin/v1\nname: bulky\n",
        "bulky/__init__.py": "def install(params):\n    pass\n",
        "bulky/helpers.py": "VALUE = 'helpers'\n",
        "bulky/data.txt": "data\n",
        "bulky/conf/deep/x.json": '{"k": 1}\n',
        "bulky/big.bin": "x" * BIG,
    },
}

# The trainer (run by the launcher after it verified the tree) changes the tree as told,
# then starts one worker running the given code and reports how it ended.
TRAINER = """
import hashlib, json, os, shutil, subprocess, sys
args = json.loads(sys.argv[1])
job = os.environ["FORGE_JOB_DIR"]
root = os.path.join(job, "forge_plugins", "bulky")
outside = os.path.join(os.path.dirname(job), "outside-copy")
for d, _, files in os.walk(root):
    os.chmod(d, 0o755)
    for f in files:
        os.chmod(os.path.join(d, f), 0o644)
action, rel = args["action"], args.get("file", "")
path = os.path.join(root, *rel.split("/"))
if action == "change":
    with open(path, "a") as f:
        f.write("\\n# changed after the launch\\n")
elif action == "add":
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"planted")
elif action == "remove":
    os.remove(path)
elif action == "symlink":  # the same bytes, through a link
    shutil.copy(path, outside)
    os.remove(path)
    os.symlink(outside, path)
elif action == "hardlink":
    os.link(path, outside)
elif action == "fifo":
    os.remove(path)
    os.mkfifo(path)
elif action == "spec":  # change the file and its hash in the JobSpec's per-file map
    with open(path, "a") as f:
        f.write("\\nVALUE = 'rebound'\\n")
    spec_path = os.path.join(job, "jobspec.json")
    spec = json.load(open(spec_path))
    spec["plugins"][0]["files"][rel] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    os.chmod(spec_path, 0o644)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
child = subprocess.run([sys.executable, "-c", args["worker"]], capture_output=True, text=True, timeout=60)
print("child exit", child.returncode)
print("child out", repr(child.stdout))
sys.stderr.write(child.stderr)
"""

IMPORT_HELPERS = "import bulky.helpers; print('ran', bulky.helpers.VALUE)"
READ_DATA = "import pkgutil; print('ran', pkgutil.get_data('bulky', 'data.txt'))"
# A worker's code cannot swallow the failure: the process ends where the read happens.
READ_DATA_SWALLOWED = (
    "import pkgutil\n"
    "try:\n    pkgutil.get_data('bulky', 'data.txt')\n"
    "except BaseException as exc:\n    print('swallowed', type(exc).__name__)\n"
    "print('ran on')"
)
READ_RESOURCE = "import importlib.resources as r; print('ran', r.files('bulky').joinpath('data.txt').read_bytes())"
NOTHING = "print('ran')"


def run(builder, action: str, worker: str, file: str = ""):
    job = builder.job(plugins=[BULKY], trainer=TRAINER)
    arg = json.dumps({"action": action, "file": file, "worker": worker})
    result = job.launch("python", "-m", "app.train", arg)
    assert result.returncode == 0, result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/bulky@1.0.0 loaded"]
    return job, result


def worker_record(job) -> dict:
    (rec,) = [r for r in job.records() if r["role"] == "worker"]
    return rec


def assert_stopped(job, result, *needles: str) -> None:
    assert "child exit 10" in result.stdout
    assert "ran" not in result.stdout.split("child out", 1)[1]
    assert "stops the job: alice/bulky@1.0.0: verification failed in forge_plugins/bulky" in result.stderr
    for needle in needles:
        assert needle in result.stderr
    failure = worker_record(job)["failure"]
    assert failure["phase"] == "verify" and failure["code"] == 10 and failure["plugin"] == "alice/bulky@1.0.0"


def test_worker_hashes_only_what_it_imports_or_reads(builder):
    job, result = run(builder, "none", IMPORT_HELPERS + "; " + READ_DATA.replace("print('ran', ", "print("))
    assert "child exit 0" in result.stdout and "ran helpers" in result.stdout and "b'data" in result.stdout
    (plugin,) = worker_record(job)["plugins"]
    assert plugin["status"] == "loaded" and plugin["verified"] and plugin["check"] == "files"
    # the 8 MiB file it never touched was never read; nor was plugin.yaml
    assert plugin["hashed_files"] == ["bulky/__init__.py", "bulky/helpers.py", "bulky/data.txt"]
    (launcher,) = [r for r in job.records() if r["role"] == "launcher"]
    assert launcher["plugins"][0]["check"] == "tree" and "hashed_files" not in launcher["plugins"][0]


def test_module_changed_after_launch_stops_the_worker_that_imports_it(builder):
    job, result = run(builder, "change", IMPORT_HELPERS, "bulky/helpers.py")
    assert_stopped(job, result, "changed: bulky/helpers.py")


def test_entrypoint_module_changed_after_launch_stops_the_worker_at_start(builder):
    job, result = run(builder, "change", NOTHING, "bulky/__init__.py")
    assert_stopped(job, result, "changed: bulky/__init__.py")


def test_data_file_changed_after_launch_stops_the_worker_that_reads_it(builder):
    job, result = run(builder, "change", READ_DATA, "bulky/data.txt")
    assert_stopped(job, result, "changed: bulky/data.txt")


def test_data_file_read_through_importlib_resources_is_hashed(builder):
    job, result = run(builder, "none", READ_RESOURCE)
    assert "child exit 0" in result.stdout and "ran b'data" in result.stdout
    assert worker_record(job)["plugins"][0]["hashed_files"] == ["bulky/__init__.py", "bulky/data.txt"]
    job, result = run(builder, "change", READ_RESOURCE, "bulky/data.txt")
    assert_stopped(job, result, "changed: bulky/data.txt")


# Nested resources: importlib.resources used to wrap the snapshot's legacy reader, which
# knows only the package's own directory ("Can't open orphan path").
READ_NESTED = (
    "import importlib.resources as r\n"
    "conf = r.files('bulky') / 'conf'\n"
    "print('ran', (conf / 'deep' / 'x.json').read_text().strip(), ','.join(p.name for p in conf.iterdir()),\n"
    "      r.files('bulky').joinpath('conf/deep/x.json').is_file(), (conf / 'deep').is_dir())\n"
    "with r.as_file(conf / 'deep' / 'x.json') as copy:\n"
    "    print('copy', open(copy).read().strip())\n"
)


def test_nested_resources_are_read_through_the_snapshot_and_hashed(builder):
    job, result = run(builder, "none", READ_NESTED)
    assert "child exit 0" in result.stdout, result.stderr
    assert """ran {"k": 1} deep True True""" in result.stdout and """copy {"k": 1}""" in result.stdout
    assert "bulky/conf/deep/x.json" in worker_record(job)["plugins"][0]["hashed_files"]
    job, result = run(builder, "change", READ_NESTED, "bulky/conf/deep/x.json")
    assert_stopped(job, result, "changed: bulky/conf/deep/x.json")


def test_nested_resources_in_the_launchers_snapshot(tmp_path):
    import importlib.resources
    import sys

    from starforge.cluster.loader import SnapshotFinder

    contents = {"nestpkg/__init__.py": b"", "nestpkg/data/a/b.txt": b"deep", "nestpkg/top.txt": b"top"}
    finder = SnapshotFinder(str(tmp_path / "nestpkg-root"), contents, ["nestpkg"])
    sys.meta_path.insert(0, finder)
    try:
        import nestpkg  # noqa: F401

        root = importlib.resources.files("nestpkg")
        assert (root / "data" / "a" / "b.txt").read_bytes() == b"deep"
        assert root.joinpath("top.txt").read_text() == "top"
        assert sorted(p.name for p in root.iterdir()) == ["__init__.py", "data", "top.txt"]
        assert not (root / ".." / ".." / "etc" / "passwd").is_file()  # nothing outside the tree
        with pytest.raises(FileNotFoundError):
            (root / "data" / "missing.txt").read_bytes()
        with pytest.raises(ValueError, match="read-only"):
            (root / "top.txt").open("w")
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("nestpkg", None)


def test_a_worker_cannot_catch_the_mismatch(builder):
    job, result = run(builder, "change", READ_DATA_SWALLOWED, "bulky/data.txt")
    assert "swallowed" not in result.stdout
    assert_stopped(job, result, "changed: bulky/data.txt")


def test_a_changed_file_the_worker_never_reads_is_never_run(builder):
    """Its bytes never reach the worker; the launcher of the next attempt would refuse them."""
    job, result = run(builder, "change", IMPORT_HELPERS, "bulky/big.bin")
    assert "child exit 0" in result.stdout and "ran helpers" in result.stdout
    assert "bulky/big.bin" not in worker_record(job)["plugins"][0]["hashed_files"]
    relaunch = job.launch("python", "-m", "app.train", json.dumps({"action": "none", "worker": NOTHING}))
    assert relaunch.returncode == 10 and "changed: bulky/big.bin" in relaunch.stderr


@pytest.mark.parametrize(
    "action, file, needle",
    [
        ("add", "bulky/extra.py", "added: bulky/extra.py"),
        ("add", "bulky/__pycache__/helpers.cpython-311.pyc", "added: bulky/__pycache__/helpers.cpython-311.pyc"),
        ("remove", "bulky/data.txt", "removed: bulky/data.txt"),
        ("symlink", "bulky/helpers.py", "bulky/helpers.py: is a symlink"),
        ("hardlink", "bulky/big.bin", "bulky/big.bin: has 2 hard links"),
        ("fifo", "bulky/data.txt", "bulky/data.txt: is not a regular file"),
    ],
)
def test_listing_changed_after_launch_stops_every_worker_at_start(builder, action, file, needle):
    job, result = run(builder, action, NOTHING, file)
    assert_stopped(job, result, needle)


def test_per_file_hashes_must_digest_to_the_tree_digest(builder):
    """Rewriting a file and its hash in the JobSpec: the map no longer matches the digest."""
    job, result = run(builder, "spec", IMPORT_HELPERS, "bulky/helpers.py")
    assert_stopped(job, result, "per-file hashes digest to sf1:", "not to its tree digest")
