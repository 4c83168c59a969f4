"""What the tests share: imported as ``support`` (pytest puts tests/ on ``sys.path``).

- :mod:`support.cli`: run ``forge`` in this process (``forge(...)``) or as its own process
  (``forge_process(...)``), both returning a ``subprocess.CompletedProcess``.
- :mod:`support.examples`: ``copy_example(...)``, an example of ``examples/`` as a fresh clone holds it.
- :mod:`support.experiment`: ``Project``, one user's world (FORGE_HOME, plugins, an experiment).
- :mod:`support.oci`: real OCI registries (``docker-registry`` on 127.0.0.1).
- :mod:`support.killpoints`: ``forge`` killed right after a named step of ``forge submit``.
"""
