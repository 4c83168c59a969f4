# Binding what was staged to what runs (SPEC §9 "Binding").
#
# Written to parse on old interpreters (no f-strings, no annotations): the node entry
# (interpreter.py, the zip's __main__) checks the JobSpec with it, run in the entry's own
# namespace (node_entry.py) rather than imported from this package (that would fix
# ``starforge`` to the zip before the job's code directory is on the path). Standard
# library only.
"""The sha256 of the staged JobSpec and runtime zip, handed to the job over the backend's channel.

At staging the laptop computes the sha256 of ``.forge-runtime/starforge-runtime.zip`` and
of ``jobspec.json`` and hands both to the job over a channel the staging directory cannot
change: the local launcher's arguments, the batch script slurmctld stores at submit, the
Ray job's ``runtime_env`` and entrypoint fixed at submission. The zip is checked outside
the zip before it runs (the local supervisor, the Slurm prepare step's ``sha256sum``, the
Ray entrypoint's few lines of Python): a zip cannot vouch for itself. The JobSpec's hash
reaches the node entry and the launcher as ``--spec-sha256`` and every other process of
the job as ``FORGE_SPEC_SHA256``; each compares the bytes it parses with it before
trusting the per-file map they carry (mismatch: exit 10).

>>> is_sha256("0" * 64), is_sha256("0" * 63), is_sha256("G" * 64)
(True, False, False)
"""

import hashlib

SPEC_ENV = "FORGE_SPEC_SHA256"  # = jobspec.SPEC_SHA256_ENV, which workers read (they do not import this module)
SPEC_ARG = "--spec-sha256"

_HEX = frozenset("0123456789abcdef")


def is_sha256(text):
    """Whether *text* is a sha256 as this module writes it: 64 lowercase hex digits."""
    return isinstance(text, str) and len(text) == 64 and not (set(text) - _HEX)


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    with open(path, "rb") as f:
        return sha256_bytes(f.read())


def mismatch_message(what, path, got, expected):
    return "%s %s changed after staging: its sha256 is %s, the job was submitted with %s" % (what, path, got, expected)
