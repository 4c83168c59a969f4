"""Top-level names a plugin may not put on the job's ``sys.path``: one list for every check.

A plugin's package root goes on ``sys.path`` in the job, and the launcher's finder serves
the plugin's own top-level names ahead of every other finder. So a plugin file named after
a standard-library module, a package of the training stack, a name StarForge needs, or a
package of the recipe's own code would replace the real one for the whole job.
``forge plugin check`` (and so ``pack``/``publish``), ``forge lock`` and the launcher all
refuse those names from these lists — the launcher too, because a hand-made registry
record or bundle never went through ``publish``.

``STDLIB_NAMES`` is the union of the top-level standard-library module names of CPython
3.10 through 3.14: a plugin file named after any of them would replace the real module on
*some* interpreter, even when the laptop running the check has no such module
(``tomllib`` is new in 3.11, ``distutils`` left in 3.12, ``compression`` arrived in 3.14).
Data, generated once: the union of ``sys.stdlib_module_names`` of CPython 3.10.13, 3.11.7,
3.12.1 and 3.13.0, plus the names CPython 3.14 added to that list (annotationlib,
compression, _apple_support, _hmac, _py_warnings, _remote_debugging, _types, _zstd), plus
``test`` (the regression-test package, which ``sys.stdlib_module_names`` leaves out on
purpose but which ships with CPython). Regenerate by running, for each interpreter,
``python -c "import sys; print(sorted(sys.stdlib_module_names))"`` and taking the union.

Cluster side: standard library only (the launcher imports it).
"""

from __future__ import annotations

from collections.abc import Iterable

# The recipe's listing is the recipe finder's (every process of the job lists it there,
# without importing the lists below); the names stay public here for every check.
from .jobdir_layout import PLUGINS_DIR
from .recipe_imports import EXTENSION_RE, recipe_top_level  # noqa: F401

STDLIB_NAMES = frozenset({
    '__future__', '_abc', '_aix_support', '_android_support', '_apple_support', '_ast',
    '_asyncio', '_bisect', '_blake2', '_bootsubprocess', '_bz2', '_codecs', '_codecs_cn',
    '_codecs_hk', '_codecs_iso2022', '_codecs_jp', '_codecs_kr', '_codecs_tw', '_collections',
    '_collections_abc', '_colorize', '_compat_pickle', '_compression', '_contextvars', '_crypt',
    '_csv', '_ctypes', '_curses', '_curses_panel', '_datetime', '_dbm', '_decimal',
    '_elementtree', '_frozen_importlib', '_frozen_importlib_external', '_functools', '_gdbm',
    '_hashlib', '_heapq', '_hmac', '_imp', '_interpchannels', '_interpqueues', '_interpreters',
    '_io', '_ios_support', '_json', '_locale', '_lsprof', '_lzma', '_markupbase', '_md5',
    '_msi', '_multibytecodec', '_multiprocessing', '_opcode', '_opcode_metadata', '_operator',
    '_osx_support', '_overlapped', '_pickle', '_posixshmem', '_posixsubprocess', '_py_abc',
    '_py_warnings', '_pydatetime', '_pydecimal', '_pyio', '_pylong', '_pyrepl', '_queue',
    '_random', '_remote_debugging', '_scproxy', '_sha1', '_sha2', '_sha256', '_sha3', '_sha512',
    '_signal', '_sitebuiltins', '_socket', '_sqlite3', '_sre', '_ssl', '_stat', '_statistics',
    '_string', '_strptime', '_struct', '_suggestions', '_symtable', '_sysconfig', '_thread',
    '_threading_local', '_tkinter', '_tokenize', '_tracemalloc', '_types', '_typing', '_uuid',
    '_warnings', '_weakref', '_weakrefset', '_winapi', '_wmi', '_zoneinfo', '_zstd', 'abc',
    'aifc', 'annotationlib', 'antigravity', 'argparse', 'array', 'ast', 'asynchat', 'asyncio',
    'asyncore', 'atexit', 'audioop', 'base64', 'bdb', 'binascii', 'binhex', 'bisect',
    'builtins', 'bz2', 'cProfile', 'calendar', 'cgi', 'cgitb', 'chunk', 'cmath', 'cmd', 'code',
    'codecs', 'codeop', 'collections', 'colorsys', 'compileall', 'compression', 'concurrent',
    'configparser', 'contextlib', 'contextvars', 'copy', 'copyreg', 'crypt', 'csv', 'ctypes',
    'curses', 'dataclasses', 'datetime', 'dbm', 'decimal', 'difflib', 'dis', 'distutils',
    'doctest', 'email', 'encodings', 'ensurepip', 'enum', 'errno', 'faulthandler', 'fcntl',
    'filecmp', 'fileinput', 'fnmatch', 'fractions', 'ftplib', 'functools', 'gc', 'genericpath',
    'getopt', 'getpass', 'gettext', 'glob', 'graphlib', 'grp', 'gzip', 'hashlib', 'heapq',
    'hmac', 'html', 'http', 'idlelib', 'imaplib', 'imghdr', 'imp', 'importlib', 'inspect', 'io',
    'ipaddress', 'itertools', 'json', 'keyword', 'lib2to3', 'linecache', 'locale', 'logging',
    'lzma', 'mailbox', 'mailcap', 'marshal', 'math', 'mimetypes', 'mmap', 'modulefinder',
    'msilib', 'msvcrt', 'multiprocessing', 'netrc', 'nis', 'nntplib', 'nt', 'ntpath',
    'nturl2path', 'numbers', 'opcode', 'operator', 'optparse', 'os', 'ossaudiodev', 'pathlib',
    'pdb', 'pickle', 'pickletools', 'pipes', 'pkgutil', 'platform', 'plistlib', 'poplib',
    'posix', 'posixpath', 'pprint', 'profile', 'pstats', 'pty', 'pwd', 'py_compile', 'pyclbr',
    'pydoc', 'pydoc_data', 'pyexpat', 'queue', 'quopri', 'random', 're', 'readline', 'reprlib',
    'resource', 'rlcompleter', 'runpy', 'sched', 'secrets', 'select', 'selectors', 'shelve',
    'shlex', 'shutil', 'signal', 'site', 'smtpd', 'smtplib', 'sndhdr', 'socket', 'socketserver',
    'spwd', 'sqlite3', 'sre_compile', 'sre_constants', 'sre_parse', 'ssl', 'stat', 'statistics',
    'string', 'stringprep', 'struct', 'subprocess', 'sunau', 'symtable', 'sys', 'sysconfig',
    'syslog', 'tabnanny', 'tarfile', 'telnetlib', 'tempfile', 'termios', 'test', 'textwrap',
    'this', 'threading', 'time', 'timeit', 'tkinter', 'token', 'tokenize', 'tomllib', 'trace',
    'traceback', 'tracemalloc', 'tty', 'turtle', 'turtledemo', 'types', 'typing', 'unicodedata',
    'unittest', 'urllib', 'uu', 'uuid', 'venv', 'warnings', 'wave', 'weakref', 'webbrowser',
    'winreg', 'winsound', 'wsgiref', 'xdrlib', 'xml', 'xmlrpc', 'zipapp', 'zipfile',
    'zipimport', 'zlib', 'zoneinfo'
})

# Import names of the training stack a job already has: a plugin module with one of these
# names would replace the framework it means to patch.
TRAINING_STACK = frozenset({
    "accelerate", "apex", "bitsandbytes", "datasets", "deepspeed", "einops", "flash_attn",
    "flax", "huggingface_hub", "hydra", "jax", "jaxlib", "keras", "liger_kernel",
    "megatron", "nemo", "nemo_aligner", "nemo_rl", "numpy", "omegaconf", "openrlhf", "optax",
    "pandas", "peft", "ray", "safetensors", "scipy", "sentencepiece", "sglang", "tensorboard",
    "tensordict", "tensorflow", "tiktoken", "tokenizers", "torch", "torchaudio", "torchdata",
    "torchvision", "transformer_engine", "transformers", "triton", "trl", "verl", "vllm",
    "wandb", "xformers",
})

# Names StarForge itself needs on the cluster: the runtime, the plugin tree, its one
# dependency, and the start-up hooks the job's bootstrap relies on.
RESERVED_NAMES = {
    "starforge": "the StarForge runtime itself",
    PLUGINS_DIR: "the directory the job stages plugins in",
    "packaging": "the one dependency of StarForge's cluster-side runtime",
    "sitecustomize": "the start-up hook that carries plugins into every process of the job",
    "usercustomize": "a start-up hook Python runs in every process",
}



def top_level_names(files: list[str]) -> tuple[str, ...]:
    """Every name importable from the package root, sorted.

    ``x.py``, an extension module ``x.*.so`` / ``x.pyd``, and any directory ``x/`` (a
    package, or a namespace package when it has no ``__init__.py``).

    >>> top_level_names(["plugin.yaml", "opsd_patch.py", "helpers/util.py", "docs-src/a.md"])
    ('helpers', 'opsd_patch')
    """
    return tuple(sorted(top_level_origins(files)))


def top_level_origins(files: list[str]) -> dict[str, str]:
    """``{name: the file or directory providing it}`` (``types.py``, ``ray/``)."""
    out: dict[str, str] = {}
    for rel in files:
        head, sep, _ = rel.partition("/")
        if sep:
            if head.isidentifier():
                out.setdefault(head, head + "/")
            continue
        if head.endswith(".py") and head[:-3].isidentifier():
            out.setdefault(head[:-3], head)
            continue
        m = EXTENSION_RE.match(head)
        if m:
            out.setdefault(m.group(1), head)
    return out


def forbidden(name: str) -> str | None:
    """Why *name* may not be a plugin's top-level name (None when it may).

    >>> forbidden("json")
    "the standard-library module 'json' (Python 3.10-3.14)"
    >>> forbidden("opsd_patch") is None
    True
    """
    if name in RESERVED_NAMES:
        return f"a name StarForge reserves ({RESERVED_NAMES[name]})"
    if name in STDLIB_NAMES:
        return f"the standard-library module '{name}' (Python 3.10-3.14)"
    if name in TRAINING_STACK:
        return f"the training-stack package '{name}'"
    return None


def shadowing(ref: str, names: Iterable[str], recipe: dict[str, str]) -> str | None:
    """The refusal for plugin *ref* providing top-level *names*, or None.

    Each name is checked against :func:`forbidden` and the recipe's own names
    (:func:`recipe_top_level`); the message names the plugin, the module and what it hides.
    """
    for name in sorted(set(names)):
        why = forbidden(name)
        if why is not None:
            return (f"{ref} provides the top-level module '{name}', which would shadow {why} for the whole job "
                    "(the plugin root is on sys.path)")
        if name in recipe:
            return (f"{ref} provides the top-level module '{name}', which is the recipe's own {recipe[name]}; "
                    "the plugin would replace it for the whole job")
    return None
