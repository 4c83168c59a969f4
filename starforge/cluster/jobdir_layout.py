# The names of a job directory's parts (SPEC §8, §9), spelled once.
#
# Staging on the laptop, the backends, the Slurm batch script (generated from these), the
# node entry and the launcher all name a part of a job directory through here. The node
# entry runs this module in its own namespace (node_entry.py) before the launcher exists,
# under whatever ``python3`` the node has: it parses on old interpreters (no f-strings, no
# annotations, no walrus) and imports nothing. The bootstrap (bootstrap/sitecustomize.py)
# runs before the runtime is importable and spells the two names it needs itself
# (tests/cluster/test_jobdir_layout.py holds them equal to these).
#
# Standard library only.
"""The parts of a job directory, by name::

    jobspec.json                          SPEC_FILE
    forge_plugins/<name>/                 PLUGINS_DIR
    recipe/                               RECIPE_DIR
    recipe/common/algorithms/<name>/      BUILTINS_DIR (inside recipe/)
    work/                                 WORK_DIR
    .forge-runtime/                       RUNTIME_DIR
        bootstrap/sitecustomize.py        BOOTSTRAP_DIR, BOOTSTRAP_FILE
        starforge-runtime.zip             RUNTIME_ZIP
        hyperparams.json                  HYPERPARAMS_FILE
        launchers/                        LAUNCHERS_DIR
        attempts.d/                       ATTEMPTS_DIR
        code-dir@<node tag>               CODE_POINTER_PREFIX
    status.json                           STATUS_FILE
    provenance/                           PROVENANCE_DIR
    lineage/                              LINEAGE_DIR
    log.txt                               LOCAL_LOG (the local backend)
    slurm/                                SLURM_DIR (the Slurm backend)
        job.sbatch                        SLURM_SCRIPT
        output.log, exit_code             SLURM_LOG, SLURM_EXIT_FILE
        cleanup/                          SLURM_CLEANUP_DIR
        failed-<attempt>-<host>           SLURM_FAILED_PREFIX
        status-<host>.json                SLURM_STATUS_PREFIX

>>> "/".join((RUNTIME_DIR, RUNTIME_ZIP))
'.forge-runtime/starforge-runtime.zip'
"""

SPEC_FILE = "jobspec.json"
PLUGINS_DIR = "forge_plugins"
RECIPE_DIR = "recipe"
BUILTINS_DIR = ("common", "algorithms")  # a built-in's folder, under recipe/
WORK_DIR = "work"

RUNTIME_DIR = ".forge-runtime"
BOOTSTRAP_DIR = "bootstrap"
BOOTSTRAP_FILE = "sitecustomize.py"
RUNTIME_ZIP = "starforge-runtime.zip"
HYPERPARAMS_FILE = "hyperparams.json"
LAUNCHERS_DIR = "launchers"
ATTEMPTS_DIR = "attempts.d"  # one file per launch (attempts.py)
# <job dir>/.forge-runtime/code-dir@<node tag>: the path of one node's code directory (codedir.py)
CODE_POINTER_PREFIX = "code-dir@"

STATUS_FILE = "status.json"
PROVENANCE_DIR = "provenance"
LINEAGE_DIR = "lineage"

LOCAL_LOG = "log.txt"
SLURM_DIR = "slurm"  # script, output, exit code, node statuses
SLURM_SCRIPT = "job.sbatch"
SLURM_LOG = "output.log"
SLURM_EXIT_FILE = "exit_code"
SLURM_CLEANUP_DIR = "cleanup"
SLURM_FAILED_PREFIX = "failed-"  # failed-<attempt>-<host>: a host's launcher failed with this code
SLURM_STATUS_PREFIX = "status-"  # status-<host>.json: that host's status.json

# What a node's copy of the job holds (the Slurm prepare step copies these), and of those,
# the verified inputs, left read-only.
NODE_ITEMS = (SPEC_FILE, PLUGINS_DIR, RECIPE_DIR, RUNTIME_DIR)
VERIFIED_ITEMS = (SPEC_FILE, PLUGINS_DIR, RECIPE_DIR)
