"""The forge entry point: usage errors read like every other error, help is lazy."""

import subprocess
import sys

import pytest
from support.cli import forge as run_forge


def forge(*args, env=None):
    return run_forge(*args, env=env)


@pytest.mark.parametrize(
    "args, says, hint",
    [
        (["nosuch"], "no command 'forge nosuch'", "see 'forge --help'"),
        (["jobs", "logs"], "Missing argument 'ID'", "see 'forge jobs logs --help'"),
        (["submit", ".", "--backend", "k8s"], "'k8s' is not one of 'local', 'ray', 'slurm'", "see 'forge submit --help'"),
        (["submit", ".", "--set"], "'--set' requires an argument", "see 'forge submit --help'"),
    ],
)
def test_usage_errors_are_one_error_line_and_a_hint(args, says, hint):
    result = forge(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("error: ") and says in lines[0]
    if hint is None:  # click reports some option errors from the parent command's context
        assert lines[1].startswith("hint: see 'forge") and lines[1].endswith("--help'")
    else:
        assert lines[1] == f"hint: {hint}"
    assert "Traceback" not in result.stderr and "Usage:" not in result.stderr


def test_every_group_help_lists_subcommands_with_a_summary_and_an_example():
    for group in ("plugin", "jobs", "key", "trust"):
        out = forge(group, "--help").stdout
        assert "Example:" in out, group
        commands = out.split("Commands:")[1].strip().splitlines()
        assert commands and all(len(line.split(None, 1)) == 2 for line in commands), out


def test_help_imports_no_command_module():
    code = (
        "import sys; from starforge.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('starforge.') and m not in "
        "('starforge.cli', 'starforge.cli.main', 'starforge.cli.output', 'starforge.errors', 'starforge.cluster', 'starforge.cluster.errors', 'starforge.cluster.status', 'starforge.cluster.jobdir_layout'))\n"
        "heavy = sorted(m for m in ('httpx', 'rich', 'yaml', 'cryptography') if m in sys.modules)\n"
        "print(loaded, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[] []"


def test_version_is_the_package_and_the_installed_distribution_version():
    from importlib.metadata import version

    import starforge

    assert version("starforge-core") == starforge.__version__
    for argv in ([sys.executable, "-m", "starforge", "--version"], [sys.executable, "-m", "starforge.cli.main", "--version"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert out.strip() == f"forge {starforge.__version__}"


def test_jobs_help_examples_name_one_job_when_several_exist(tmp_path, monkeypatch):
    """An example ID that is a bare job name is an ambiguous prefix as soon as a second job of
    that name exists; every ID the jobs examples show must still resolve to one job."""
    import json
    import shlex

    from starforge.backends.base import JobRecord
    from starforge.jobs.store import JobStore

    monkeypatch.setenv("FORGE_JOBS_DIR", str(tmp_path / "jobs"))
    examples = []
    for sub in ("show", "logs", "cancel"):
        text = forge("jobs", sub, "--help").stdout
        lines = text.split("Example:")[1].split("Options:")[0].strip().splitlines()
        examples += [shlex.split(line.split("|")[0]) for line in lines if line.strip().startswith("forge jobs")]
    ids = {argv[3] for argv in examples}
    assert len(examples) >= 4 and ids
    import re

    full = {i for i in ids if re.search(r"-\d{8}-\d{6}-[0-9a-f]{4}$", i)}
    store = JobStore()
    for job_id in sorted(full | {"quickstart-20261129-120001-0b1c"}):  # the examples' job, and one more
        store.save(JobRecord(id=job_id, name="quickstart", backend="local", status="succeeded", dir=str(tmp_path),
                             created="2026-11-29T12:00:00Z", exit_code=0))
    for job_id in ids:
        assert store.get(job_id).id in full
    for argv in examples:
        if argv[2] == "show":
            proc = forge(*argv[1:])
            assert proc.returncode == 0, (argv, proc.stderr)
            if "--json" in argv:
                assert json.loads(proc.stdout)["id"] in full
