"""``forge plugin init``: render a plugin template into a new directory, atomically.

Templates live in the repository's top-level ``plugin_templates/`` directory, installed as
the ``starforge.plugin_templates`` package (one directory per template). In a
template, ``__module__`` in a file name becomes the plugin's module name, a ``dot-`` prefix
becomes ``.`` (``dot-forgeignore`` -> ``.forgeignore``: packaging tools drop dotfiles), and
``*.tmpl`` files are rendered (``{{name}}``, ``{{module}}``, ``{{core_spec}}``) and lose the
suffix. The plugin is rendered into a temporary sibling directory and renamed into place,
so a failure leaves nothing behind.

>>> init_plugin("opsd-patch", "algorithm", "eager", "opsd-patch")     # doctest: +SKIP
PosixPath('opsd-patch')

Laptop side.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .. import __version__
from ..cluster.names import NAME_MAX, is_plugin_name
from ..errors import UsageError
from ..package_format.manifest import KINDS, LOADS

TEMPLATES = {
    ("algorithm", "eager"): "algorithm-eager",
    ("algorithm", "deferred"): "algorithm-deferred",
    ("environment", "eager"): "environment",
    ("data-prep", "eager"): "data-prep",
}


def templates_dir() -> Path:
    """The directory holding the templates: ``starforge.plugin_templates`` when installed,
    else ``plugin_templates/`` beside the ``starforge`` package of a source checkout."""
    candidates = []
    try:
        import importlib

        # only installed: the wheel maps the checkout's plugin_templates/ into the package
        plugin_templates = importlib.import_module("starforge.plugin_templates")
        candidates += [Path(p) for p in plugin_templates.__path__]
    except ImportError:
        pass
    candidates.append(Path(__file__).resolve().parents[2] / "plugin_templates")
    for candidate in candidates:
        if (candidate / TEMPLATES[("algorithm", "eager")]).is_dir():
            return candidate
    raise UsageError("the plugin templates are not installed with this starforge-core",
                     hint="reinstall starforge-core")


def module_name(name: str) -> str:
    """The module a plugin's code lives in: ``opsd-patch`` -> ``opsd_patch``."""
    return name.replace("-", "_")


def core_spec(version: str = __version__) -> str:
    """The ``requires.core`` a new plugin starts with: this minor or newer, below the next major."""
    parts = (version.split(".") + ["0"])[:2]
    major, minor = int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    return f">={major}.{minor},<{major + 1}"


def _check_name(name: str) -> None:
    from ..cluster.shadowing import RESERVED_NAMES, STDLIB_NAMES, TRAINING_STACK

    if not is_plugin_name(name):
        raise UsageError(
            f"invalid plugin name {name!r}",
            hint=f"lowercase letters, digits and single dashes, starting with a letter, at most {NAME_MAX} characters (example: opsd-patch)",
        )
    module = module_name(name)
    if module in STDLIB_NAMES or module in TRAINING_STACK or module in RESERVED_NAMES:
        raise UsageError(
            f"plugin name {name!r} would put a module '{module}' on the job's sys.path, shadowing the real '{module}'",
            hint=f"choose a more specific name, e.g. '{name}-patch'",
        )


def init_plugin(name: str, kind: str = "algorithm", load: str = "eager", dest: str | os.PathLike | None = None) -> Path:
    """Create plugin *name* from the template for *kind*/*load* in *dest* (default ``./name``)."""
    _check_name(name)
    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}", hint=f"one of: {', '.join(KINDS)}")
    if load not in LOADS:
        raise UsageError(f"unknown load mode {load!r}", hint=f"one of: {', '.join(LOADS)}")
    template = TEMPLATES.get((kind, load))
    if template is None:
        raise UsageError(
            f"--load {load} applies to algorithm plugins only; {kind} plugins are not installed by the launcher",
            hint="drop --load, or use --kind algorithm",
        )
    source = templates_dir() / template
    dest = Path(dest if dest is not None else name)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest}: already exists and is not an empty directory", hint="choose another --dir, or remove it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    values = {"{{name}}": name, "{{module}}": module_name(name), "{{core_spec}}": core_spec()}
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        os.chmod(tmp, 0o755)
        _render(source, tmp, values)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _render(source: Path, target: Path, values: dict) -> None:
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel_dir = Path(dirpath).relative_to(source)
        for filename in sorted(filenames):
            if filename.endswith((".pyc", ".pyo")):
                continue
            rel = rel_dir / filename
            out_parts = []
            for part in rel.parts:
                part = part.replace("__module__", values["{{module}}"])
                if part.startswith("dot-"):
                    part = "." + part[4:]
                out_parts.append(part)
            out = target.joinpath(*out_parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            data = (Path(dirpath) / filename).read_bytes()
            if out.name.endswith(".tmpl"):
                out = out.with_name(out.name[: -len(".tmpl")])
                text = data.decode("utf-8")
                for key, value in values.items():
                    text = text.replace(key, value)
                data = text.encode("utf-8")
            out.write_bytes(data)
            os.chmod(out, 0o644)
