# The launcher's exit codes and its status.json (SPEC §9), defined once.
#
# The node entry runs this module in its own namespace (node_entry.py) before the launcher
# exists, under whatever ``python3`` the node has: it parses on old interpreters (no
# f-strings, no annotations, no walrus), as interpreter.py does. The launcher, the error
# classes (errors.py) and the local backend take the codes and the writer from here.
#
# Standard library only.
"""Exit codes the platform can classify, and ``status.json``, which tells them from a
trainer's own exit code of the same number.

>>> status_record("requires", REQUIRES_EXIT, None, "too old")["code"]
11
"""

import json
import os

try:
    from .jobdir_layout import STATUS_FILE
except ImportError:  # not imported as a module: node_entry.py ran jobdir_layout.py in this namespace
    pass

SPEC_EXIT = 2  # bad spec or usage
VERIFY_EXIT = 10  # verification failed
REQUIRES_EXIT = 11  # unmet requirement
IMPORT_EXIT = 12  # import or entrypoint failure
INSTALL_EXIT = 13  # ``install`` raised
DEFERRED_EXIT = 14  # a deferred plugin never installed (strict)

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def status_record(phase, code, plugin=None, message="", time=None):
    """``{phase, code, plugin, message}``, and ``time`` when given (the launcher stamps it)."""
    record = {"phase": phase, "code": code, "plugin": plugin, "message": message}
    if time is not None:
        record["time"] = time
    return record


def write_status(job_dir, phase, code, plugin=None, message="", time=None):
    """Write ``status.json`` in *job_dir* atomically (mode 0644, a temp file beside it, then
    one rename); raises ``OSError`` when it cannot, leaving no temp file behind."""
    path = os.path.join(job_dir, STATUS_FILE)
    data = (json.dumps(status_record(phase, code, plugin, message, time), indent=2, sort_keys=True) + "\n").encode("utf-8")
    n = 0
    while True:  # a name left behind by a killed process with the same pid is skipped
        tmp = os.path.join(job_dir, ".%s.%d-%d.tmp" % (STATUS_FILE, os.getpid(), n))
        try:
            fd = os.open(tmp, _FLAGS, 0o644)
            break
        except FileExistsError:
            n += 1
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), 0o644)  # os.open's mode was narrowed by the umask
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
