# The runtime zip's entry (its __main__.py): `python3 starforge-runtime.zip --spec
# jobspec.json`, as every backend starts a job. The node entry itself is interpreter.py's
# main(); this stub compiles that module (and codedir.py, which it uses) once from the zip
# and runs it. Python would
# otherwise compile a zip's __main__ twice (zipimport compiles a source for its file name,
# then again for its code), and the ``starforge`` package must not be imported from here:
# that would fix it to this zip before the job's code zip (compiled once for the job) is
# on the path. Parses and runs on old interpreters, as interpreter.py does.
#
# Standard library only.
import os
import sys


def run():
    here = os.path.dirname(os.path.abspath(__file__))  # the zip
    entry = {"__name__": "starforge_node_entry", "__builtins__": __builtins__}
    for name in ("codedir.py", "interpreter.py"):  # one namespace, as interpreter.py imports codedir's names
        path = os.path.join(here, "starforge", "cluster", name)
        entry["__file__"] = path
        exec(compile(__loader__.get_data(path), path, "exec", dont_inherit=True), entry)  # noqa: S102
    return entry["main"](None, here)


if __name__ == "__main__":
    sys.exit(run())
