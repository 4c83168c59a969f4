"""The job's runtime zip: the cluster folder as sources, packaging vendored, built for each job."""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from launch_jobs import demo_plugin

import starforge
from starforge.cluster import runtime_zip

CLUSTER = Path(starforge.__file__).parent / "cluster"
ZIP = Path(".forge-runtime") / "starforge-runtime.zip"
VENDOR_DIR = CLUSTER / "_vendor"
VENDOR_PREFIX = "starforge/cluster/_vendor/"


def names_in(path: Path) -> list:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def test_the_zip_is_the_cluster_folder_as_sources_with_packaging_vendored(builder):
    job = builder.job(plugins=[demo_plugin()])
    result = job.launch()
    assert result.returncode == 0, result.stderr
    names = names_in(job.dir / ZIP)
    walked = sorted(
        "starforge/cluster/" + str(p.relative_to(CLUSTER)).replace(os.sep, "/")
        for p in CLUSTER.rglob("*.py") if "__pycache__" not in p.parts and VENDOR_DIR not in p.parents
    )
    assert sorted(n for n in names if n.startswith("starforge/cluster/") and not n.startswith(VENDOR_PREFIX)) == walked
    assert {"starforge/__init__.py", "starforge/plugins.py", "starforge/patching.py",
            "starforge/launch/__init__.py", "starforge/launch/__main__.py"} <= set(names)
    # The committed vendor folder, every file of it (pin and licences too), and nothing else.
    committed = sorted(
        VENDOR_PREFIX + str(p.relative_to(VENDOR_DIR)).replace(os.sep, "/")
        for p in VENDOR_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert sorted(n for n in names if n.startswith(VENDOR_PREFIX)) == committed
    for rel in ("packaging/version.py", "packaging/specifiers.py", "packaging/requirements.py",
                "packaging/markers.py", "packaging/LICENSE", "vendor.txt"):
        assert VENDOR_PREFIX + rel in names
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n]
    assert not [n for n in names if n.startswith("packaging")]  # never the top-level name
    laptop = [n for n in names if n.startswith("starforge/") and not n.startswith("starforge/cluster/")]
    assert sorted(laptop) == sorted("starforge/" + m for m in runtime_zip.PUBLIC_MODULES)


def test_the_vendored_packaging_is_pinned_and_complete():
    pin = (VENDOR_DIR / "vendor.txt").read_text().split()
    assert len(pin) == 1 and pin[0].startswith("packaging==")
    version = pin[0].partition("==")[2]
    init = (VENDOR_DIR / "packaging" / "__init__.py").read_text()
    assert f'__version__ = "{version}"' in init
    # Every relative import of a vendored module names a vendored module: the copy is whole.
    vendored = {p.stem for p in (VENDOR_DIR / "packaging").glob("*.py")}
    for path in (VENDOR_DIR / "packaging").glob("*.py"):
        tree = ast.parse(path.read_text())
        lazy_ok = {"ranges"}  # SpecifierSet.to_range only (not vendored: no requirement check uses it)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                for name in names:
                    assert name in vendored or name in lazy_ok, f"{path.name} imports .{name}, not vendored"


def test_a_runtime_zip_without_the_vendored_packaging_cannot_be_built(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(Path(starforge.__file__).parent, copy / "starforge",
                    ignore=shutil.ignore_patterns("__pycache__"))
    build = "from starforge.cluster.runtime_zip import build_runtime_zip; print(len(build_runtime_zip()))"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy)}
    whole = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(copy)!r}); {build}"],
                           capture_output=True, text=True, env=env)
    assert whole.returncode == 0, whole.stderr
    (copy / "starforge" / "cluster" / "_vendor" / "packaging" / "specifiers.py").unlink()
    (copy / "starforge" / "cluster" / "_vendor" / "packaging" / "LICENSE").unlink()
    broken = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(copy)!r}); {build}"],
                            capture_output=True, text=True, env=env)
    assert broken.returncode != 0
    assert "cannot build a runtime zip: the vendored packaging" in broken.stderr
    assert "packaging/specifiers.py, packaging/LICENSE" in broken.stderr


def test_the_vendored_requirements_and_markers_work_from_the_zip_in_a_bare_interpreter(tmp_path, bare_python):
    zip_path = tmp_path / "runtime.zip"
    runtime_zip.write_runtime_zip(str(zip_path))
    probe = (
        "import importlib.util\n"
        "from starforge.cluster._vendor.packaging.requirements import Requirement\n"
        "from starforge.cluster._vendor.packaging.markers import Marker\n"
        "r = Requirement('torch>=2.1,<3; python_version >= \"3.8\"')\n"
        "print(r.name, r.specifier.contains('2.4.0'), r.marker.evaluate(), Marker('os_name == \"nt\"').evaluate())\n"
        "print('own packaging:', importlib.util.find_spec('packaging') is not None)\n"
    )
    result = subprocess.run([bare_python, "-c", probe], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(zip_path)}, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["torch True True False", "own packaging: False"]


def test_the_zip_is_the_same_for_every_job_and_names_none(builder):
    first, second = builder.job(plugins=[demo_plugin()]), builder.job(plugins=[demo_plugin()])
    for job in (first, second):
        assert job.launch().returncode == 0
    assert (first.dir / ZIP).read_bytes() == (second.dir / ZIP).read_bytes()
    with zipfile.ZipFile(first.dir / ZIP) as zf:
        blob = b"".join(zf.read(n) for n in zf.namelist())
    assert str(first.dir).encode() not in blob


def malicious_zip(marker: str) -> bytes:
    """A runtime zip whose starforge prints *marker* when a worker boots."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("starforge/__init__.py", "__version__ = '0.1.0'\n")
        zf.writestr("starforge/cluster/__init__.py", "")
        zf.writestr("starforge/cluster/process_job.py", f"def boot_process(reason=''):\n    print({marker!r})\n")
    return buf.getvalue()


def test_a_planted_cached_or_stale_zip_is_never_what_runs(builder):
    trainer = """
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "from app import algo; print('worker', algo.compute(1))"], check=True)
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    assert job.launch().returncode == 0
    # What an earlier release reused by name, and the job's own zip from the last launch.
    cache = job.dir.parent / "forge-home" / "cache" / "runtime"
    cache.mkdir(parents=True)
    (cache / ("0" * 64 + ".zip")).write_bytes(malicious_zip("PLANTED IN CACHE"))
    (job.dir / ZIP).write_bytes(malicious_zip("PLANTED IN JOB"))
    (job.dir / (str(ZIP) + ".key")).write_text("anything\n")
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "PLANTED" not in result.stdout + result.stderr
    assert "worker 20" in result.stdout  # the worker booted from the rebuilt zip
    assert b"PLANTED" not in (job.dir / ZIP).read_bytes()


def test_the_launcher_runs_from_the_zip_in_an_interpreter_with_nothing_installed(builder, bare_python):
    trainer = """
    import importlib.util, sys, starforge
    from app import algo
    print("compute(1) =", algo.compute(1))
    print("from zip:", ".forge-runtime/starforge-runtime.zip/" in starforge.__file__)
    print("own packaging:", importlib.util.find_spec("packaging") is not None)
    print("vendored:", "starforge.cluster._vendor.packaging.version" in sys.modules)
    """
    # `<4` is not a plain specifier: packaging's SpecifierSet decides it, from the zip
    job = builder.job(plugins=[demo_plugin(requires={"core": ">=0.1", "python": ">=3.10,<4"})], trainer=trainer)
    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True)
    runtime_zip.write_runtime_zip(str(zip_path))
    env = {"PATH": os.path.dirname(bare_python) + ":/usr/bin:/bin", "PYTHONPATH": str(zip_path),
           "FORGE_HOME": str(job.dir.parent / "forge-home")}
    result = subprocess.run([bare_python, "-m", "starforge.launch", "--spec", str(job.spec_path)],
                            capture_output=True, text=True, env=env, cwd=str(job.dir.parent), timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"runtime : starforge-core {starforge.__version__} from the job's runtime zip" in result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]
    assert "compute(1) = 20" in result.stdout
    assert "from zip: True" in result.stdout
    assert "own packaging: False" in result.stdout  # nothing shadows the trainer's packaging
    assert "vendored: True" in result.stdout  # requires was checked with the vendored copy


def test_the_zip_wins_over_an_installed_starforge_in_workers(builder):
    trainer = """
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "import starforge; print('worker starforge', starforge.__file__)"], check=True)
    """
    job = builder.job(plugins=[demo_plugin()], trainer=trainer)
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert f"worker starforge {job.dir / ZIP}/starforge/__init__.py" in result.stdout
    assert f"runtime : starforge-core {starforge.__version__} from " in result.stderr


def restage(job, version: str) -> None:
    data = json.loads(job.spec_path.read_text())
    data["core_version"] = version
    job.spec_path.write_text(json.dumps(data))


def test_an_installed_launcher_refuses_a_spec_of_another_version_without_a_zip(builder):
    job = builder.job(plugins=[demo_plugin()])
    restage(job, "0.0.9")
    result = job.launch()
    assert result.returncode == 2
    assert f"error: the job was staged by starforge-core 0.0.9, this launcher is {starforge.__version__}" in result.stderr
    assert "carries no runtime zip" in result.stderr
    assert job.status()["phase"] == "spec"


def test_an_installed_launcher_starts_again_from_the_jobs_zip_of_another_version(builder):
    job = builder.job(plugins=[demo_plugin()])
    restage(job, "0.0.9")
    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(runtime_zip.build_runtime_zip())) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "starforge/__init__.py":
                data = data.replace(f'"{starforge.__version__}"'.encode(), b'"0.0.9"')
            dst.writestr(info, data)
    zip_path.write_bytes(buf.getvalue())
    result = job.launch()
    assert result.returncode == 0, result.stderr
    assert "runtime : starforge-core 0.0.9 from the job's runtime zip" in result.stderr
    assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]
