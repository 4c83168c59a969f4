"""One table of backends feeds the CLI, forge.yaml's check and get_backend; the jobs store
does not import the backend interface (no import cycle). A backend added to the table is
listed everywhere: test_backend_registration.py."""

import subprocess
import sys

from support.cli import forge

from starforge.backends import BACKENDS, backend_names


def test_the_store_imports_without_the_backend_interface():
    code = (
        "import sys, starforge.jobs.store as s\n"
        "print('starforge.backends.base' in sys.modules, s.JobRecord.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "starforge.jobs.jobrecord"]


def test_cli_choices_and_forge_yaml_check_name_the_backends_of_the_table(tmp_path):
    names = backend_names()
    assert names == tuple(BACKENDS) and {"local", "ray", "slurm"} <= set(names)
    bad_cli = forge("submit", tmp_path, "--backend", "k8s")
    assert bad_cli.returncode == 2 and ", ".join(map(repr, names)) in bad_cli.stderr
    (tmp_path / "forge.yaml").write_text("schema: forge/job/v1\nname: x\nentrypoint: python -m t\nbackend: k8s\n")
    bad_yaml = forge("lock", tmp_path)
    assert bad_yaml.returncode == 3 and f"backends: {', '.join(names)}" in bad_yaml.stderr
