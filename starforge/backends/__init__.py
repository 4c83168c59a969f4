"""Backends run a staged job directory somewhere: ``local`` (a subprocess), ``ray``, ``slurm``.

The interface and the job record are in :mod:`starforge.backends.base`; where records live
is :mod:`starforge.backends.store`.
"""

# The one list of backends: backend name -> "module:class". The CLI's --backend choices and
# forge.yaml's ``backend:`` check read it; modules are imported only when a backend is used.
BACKENDS = {
    "local": "starforge.backends.local:LocalBackend",
    "ray": "starforge.backends.ray:RayBackend",
    "slurm": "starforge.backends.slurm:SlurmBackend",
}
BACKEND_NAMES = tuple(BACKENDS)
