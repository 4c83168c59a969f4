"""A real experiment for the backend tests: the plugin ``tester/mark-worker`` that patches
``workload.algo.tag`` in every process of a job, the workload that calls it (a plain job, a
Ray job, a job that shows its environment), and a recipe locked against a registry."""

from __future__ import annotations

from pathlib import Path

MARK_PLUGIN = {
    "plugin.yaml": """\
schema: forge/plugin/v1
name: mark-worker
version: 1.0.0
kind: algorithm
entrypoint: mark_worker:install
targets: [workload.algo]
requires:
  core: ">=0.1"
params:
  mark.label: {type: str, default: patched, description: "prefix the patched function adds"}
description: "Prefix workload.algo.tag() with mark.label, in every process of the job"
""",
    "mark_worker.py": '''\
"""mark-worker: prefix workload.algo.tag() with params["mark.label"]."""

from starforge import patching


def install(params):
    label = params.get("mark.label", "patched")

    def tagged(original):
        return label + ":" + original()

    patching.wrap("workload.algo:tag", tagged, when_imported=True)
''',
}

WORKLOAD = {
    "workload/__init__.py": "",
    "workload/algo.py": '''\
import os


def tag():
    return "plain:%d" % os.getpid()
''',
    # Prints which credential and user variables the job's process can see.
    "workload/show_env.py": '''\
import json
import os

NAMES = ["FORGE_REGISTRY_USER", "FORGE_REGISTRY_PASSWORD", "FORGE_KEY_PASSPHRASE", "FORGE_RAY_TOKEN", "WANDB_API_KEY", "HF_TOKEN"]
print("ENV " + json.dumps({n: os.environ.get(n) for n in NAMES}), flush=True)
''',
    # A Ray job: the entrypoint, two tasks and an actor all call the patched function.
    "workload/ray_train.py": '''\
import json
import os
import sys

import ray

from workload import algo


@ray.remote
def task():
    from workload import algo

    return {"where": "task", "tag": algo.tag(), "pid": os.getpid(), "own_hook": os.environ.get("WORKLOAD_HOOK_RAN"),
            "runtime": sys.modules["starforge"].__file__}


@ray.remote
class Actor:
    def tag(self):
        from workload import algo

        return {"where": "actor", "tag": algo.tag(), "pid": os.getpid(), "own_hook": os.environ.get("WORKLOAD_HOOK_RAN"),
                "runtime": sys.modules["starforge"].__file__}


def main():
    kwargs = {}
    if "--own-hook" in sys.argv:
        kwargs["runtime_env"] = {"worker_process_setup_hook": "workload.hooks.mark_process"}
    ray.init(**kwargs)
    results = ray.get([task.remote(), task.remote()])
    actor = Actor.remote()
    results.append(ray.get(actor.tag.remote()))
    # the launcher left the plugin folders read-only for the job
    plugins = os.stat(os.path.join(os.environ["FORGE_JOB_DIR"], "forge_plugins")).st_mode & 0o777
    results.append({"where": "driver", "tag": algo.tag(), "pid": os.getpid(), "own_hook": None, "plugins_mode": plugins})
    # one write: Ray's thread printing the workers' lines into this log could otherwise land
    # between print's two writes (the text, then its newline)
    sys.stdout.write("RESULTS " + json.dumps(results) + "\\n")
    sys.stdout.flush()
    ok = all(r["tag"].startswith("patched:") for r in results)
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
''',
    "workload/hooks.py": '''\
import os


def mark_process():
    os.environ["WORKLOAD_HOOK_RAN"] = str(os.getpid())
''',
    # A plain job (Slurm): the entrypoint and a spawned child process call the patched function.
    "workload/train.py": '''\
import json
import multiprocessing
import os
import socket
import sys

from workload import algo


def child(q):
    from workload import algo

    q.put(algo.tag())


def main():
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    child_tag = q.get(timeout=60)
    p.join()
    slurm = {k: os.environ.get(k) for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID", "SLURM_PROCID")}
    out = {
        "driver": algo.tag(),
        "child": child_tag,
        "host": socket.gethostname(),
        "slurm": slurm,
        "cwd": os.getcwd(),
        "cwd_mode": oct(os.stat(os.getcwd()).st_mode & 0o777),
        "job_dir": os.environ.get("FORGE_JOB_DIR"),
        "job_dir_mode": oct(os.stat(os.environ["FORGE_JOB_DIR"]).st_mode & 0o777),
        "job_dir_uid": os.stat(os.environ["FORGE_JOB_DIR"]).st_uid,
        # where a torchrun-style launcher started this process as one rank of several
        "rank": [os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")],
        # what torchrun's agent adds: the rank of this host's agent, the rendezvous it joined
        "agent": [os.environ.get(k) for k in ("GROUP_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR")],
    }
    # one write: the ranks of one host share this output, and under an unbuffered stdout a
    # print() writes the text and its newline separately, so another rank's line could land between
    sys.stdout.write("RESULTS " + json.dumps(out) + "\\n")
    sys.stdout.flush()
    code = int(os.environ.get("WORKLOAD_EXIT", "0"))
    sys.exit(code if code else (0 if out["driver"].startswith("patched:") and out["child"].startswith("patched:") else 3))


if __name__ == "__main__":
    main()
''',
}


def write_tree(root: Path, files: dict) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def locked_experiment(root: Path, registry: str, entrypoint: str, backend: str, settings: dict | None = None,
                      name: str = "backend-test") -> Path:
    """An experiment at *root* running the test workload with ``tester/mark-worker@1.0.0``,
    locked against *registry* (``FORGE_HOME`` says where forge's cache is)."""
    write_tree(root, WORKLOAD)
    return locked_recipe(root, registry, name=name, entrypoint=entrypoint, plugins=["tester/mark-worker@1.0.0"],
                         config={"mark": {"label": "patched"}}, backend=backend, settings=settings)


def locked_recipe(root: Path, registry: str, *, name: str, entrypoint: str, plugins: list, config: dict, backend: str,
                  settings: dict | None = None) -> Path:
    """*root*'s ``forge.yaml`` (with *settings* under the backend's own key), locked against *registry*."""
    import yaml

    from starforge.experiment.config import load_experiment
    from starforge.experiment.lock import lock_experiment
    from starforge.registry.factory import open_registry

    doc = {
        "schema": "forge/job/v1",
        "name": name,
        "entrypoint": entrypoint,
        "plugins": plugins,
        "config": config,
        "backend": backend,
        "registry": registry,
    }
    if settings:
        doc[backend] = settings
    (root / "forge.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    lock_experiment(load_experiment(root), open_registry(registry))
    return root
