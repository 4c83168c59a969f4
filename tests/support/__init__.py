"""What the tests share: imported as ``support`` (pytest puts tests/ on ``sys.path``).

- :mod:`support.cli`: run ``forge`` in this process (``forge(...)``) or as its own process
  (``forge_process(...)``), both returning a ``subprocess.CompletedProcess``.
- :mod:`support.examples`: ``copy_example(...)``, an example of ``examples/`` as a fresh clone holds it.
- :mod:`support.experiment`: ``Project``, one user's world (FORGE_HOME, plugins, an experiment).
- :mod:`support.oci`: real OCI registries (``docker-registry`` on 127.0.0.1).
- :mod:`support.killpoints`: ``forge`` killed right after a named step of ``forge submit``.
- :mod:`support.need`: ``need(condition, reason)``, a test that fails under CI and skips elsewhere.
- :mod:`support.processes`: the processes and listeners of the clusters the tests start.
- :mod:`support.users`: ordinary and system Unix users, for what root would hide.
- :mod:`support.workload`: the backend tests' plugin, workload and locked recipe.
- :mod:`support.waiting`: ``wait_for(check, what)``, polling for what a test started.
- :mod:`support.racing`: ``all_at_once(run, items)``, callers released together.

Fixtures stay in the conftest.py of the folder whose tests use them; what they share is here,
imported by name, never a conftest loaded by its path.
"""
