# The runtime zip's entry (its __main__.py): `python3 starforge-runtime.zip --spec
# jobspec.json`, as every backend starts a job. The node entry itself is interpreter.py's
# main(); this stub compiles that module and the modules it imports (ENTRY_MODULES) once
# from the zip, in one namespace, and runs it. Python would otherwise compile a zip's
# __main__ twice (zipimport compiles a source for its file name, then again for its code),
# and the ``starforge`` package must not be imported from here: that would fix it to this
# zip before the job's code zip (compiled once for the job) is on the path. The code
# compiled here goes to main() with the bytes it was compiled from, so the job's code zip
# reuses it for those very bytes instead of compiling these modules a second time. Parses
# and runs on old interpreters, as those modules do.
#
# Standard library only.
import os
import sys

# interpreter.py and what it imports, each after the modules it imports (their relative
# imports fail here, outside the package, and find the names in this one namespace).
ENTRY_MODULES = ("jobdir_layout.py", "status.py", "binding.py", "plain_specifiers.py", "codedir.py", "interpreter.py")


def run_entry(cluster_dir, read, zip_path):
    """Run the node entry from the modules in *cluster_dir*, each read with *read*.

    main() gets ``{name in the zip: (source bytes, code)}`` of the modules compiled here.
    """
    entry = {"__name__": "starforge_node_entry", "__builtins__": __builtins__}
    compiled = {}
    for name in ENTRY_MODULES:
        path = os.path.join(cluster_dir, name)
        source = read(path)
        code = compile(source, path, "exec", dont_inherit=True)
        compiled["starforge/cluster/" + name] = (source, code)
        entry["__file__"] = path
        exec(code, entry)  # noqa: S102
    return entry["main"](None, zip_path, compiled)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def run_from_folder(cluster_dir):
    """``python interpreter.py --spec …``: the entry from the package's source folder."""
    return run_entry(cluster_dir, read_file, None)


def run():
    here = os.path.dirname(os.path.abspath(__file__))  # the zip
    return run_entry(os.path.join(here, "starforge", "cluster"), __loader__.get_data, here)


if __name__ == "__main__":
    sys.exit(run())
