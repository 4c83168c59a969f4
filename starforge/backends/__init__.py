"""Backends run a staged job directory somewhere: ``local`` (a subprocess), ``ray``, ``slurm``.

The interface and the job record are in :mod:`starforge.backends.base`; where records live
is :mod:`starforge.backends.store`.
"""
