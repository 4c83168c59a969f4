"""The cluster side of StarForge: everything that runs where the job runs, and nothing else.

This folder is exactly what the job's runtime zip ships (:mod:`.runtime_zip` walks it), so
it imports only the standard library, ``packaging`` (vendored into the zip under
:mod:`._vendor`) and its own modules — ``cryptography`` only inside :mod:`.dsse`'s
functions, for launch-time signature checks. A test holds it to that. The laptop side
(``starforge.cli``, ``registry``, ``experiment``, ``backends``, ``signing``...) imports
from here, never the other way.

Modules, one concept each, in the order a launch uses them:

- :mod:`.errors` — the exceptions, each carrying its exit code; :class:`~.errors.LaunchFailure`
- :mod:`.record`, :mod:`.atomic`, :mod:`.utctime` — immutable records, atomic writes, timestamps
- :mod:`.digest` — tree digests and verification; :mod:`.jobspec` — the JobSpec contract
- :mod:`.jobdir_layout` — the names of a job directory's parts, spelled nowhere else
- :mod:`.launcher` — ``forge-launch``; with :mod:`.entrypoint` (running the training entrypoint), :mod:`.attempts`, :mod:`.readonly`, :mod:`.interpreter_flags`, :mod:`.child_process`
- :mod:`.load_order` — which plugins load, in which order; :mod:`.signatures` + :mod:`.dsse` — launch-time signature checks
- :mod:`.requires` — requirement checks; :mod:`.loader` — import from the verified bytes
- :mod:`.job` — one job in this process; :mod:`.process_job` — this process's job, the bootstrap
- :mod:`.exits` — ending a process on failure; :mod:`.import_hooks` — post-import hooks
- :mod:`.hyperparams_and_deferred` — this process's hyperparams and deferred plugins; :mod:`.plugins`, :mod:`.patching` — the runtime API
- :mod:`.lineage` — the end of an attempt: outputs manifest and sidecars (SPEC §18)
- :mod:`.provenance` — records; :mod:`.ray_init`, :mod:`.ray_hook` — Ray; :mod:`.environment`, :mod:`.runtime_zip` — the job's runtime
- :mod:`.interpreter` — the job's Python and the node entry (:mod:`.node_entry`, the zip's ``__main__``);
  :mod:`.codedir` — the job's code directory: the runtime compiled once per job on the node
"""
