"""``forge prep``: run a data-prep plugin over a JSONL file, on the laptop (SPEC §17).

1. The plugin's bytes are read once and verified: a directory is digested (the files
   ``forge plugin pack`` would pack); a reference is resolved, its signature judged by the
   same policy as ``forge lock`` (the trust file, ``--require-signatures``), pulled through
   the cache and its files checked against the tree digest. Only ``kind: data-prep``.
2. The params are the plugin's declared defaults, then ``--set``, typed as ``forge submit``
   types them.
3. A child process (:mod:`starforge.prep.child`) under forge's Python or ``--python``, with
   the credential variables removed from its environment, imports the plugin from those
   bytes (sent on its stdin; it reads nothing of the plugin from disk) and maps every JSON
   line of the input through ``entrypoint(params)`` into a temporary file beside the output.
4. When every record is done the temporary file is renamed into place and
   ``OUT.provenance.json`` written beside it (atomically too); on any refused record
   nothing is written. The provenance's counts and hashes are forge's own reading of the
   input and of the file it renames into place, not what the child reports.

The child runs in a process group of its own, ended with it: nothing the plugin starts
outlives ``forge prep`` (:mod:`starforge.state.process_group`).

Laptop side.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import ManifestError, PrepError, UsageError
from ..state.process_group import end_group, read_until_done

PROVENANCE_SCHEMA = "forge/prep/v1"
PROVENANCE_SUFFIX = ".provenance.json"


@dataclass(frozen=True)
class VerifiedPlugin:
    """A data-prep plugin's verified bytes and where they came from."""

    manifest: object  # PluginManifest
    contents: dict  # rel path -> bytes, exactly the bytes that were digested
    tree_digest: str
    source: str  # "directory" | "registry"
    root: str  # the directory the files were read from (for tracebacks)
    ref: str | None = None  # owner/name@version for a registry plugin
    registry: str | None = None
    signature: str | None = None  # verified | unsigned | unverified (registry plugins)

    @property
    def label(self) -> str:
        return self.ref or f"{self.manifest.name}@{self.manifest.version}"  # type: ignore[attr-defined]

    def describe(self) -> dict:
        m = self.manifest
        out = {"name": m.name, "version": m.version, "tree_digest": self.tree_digest,  # type: ignore[attr-defined]
               "source": self.source}
        if self.source == "directory":
            out["directory"] = self.root
        else:
            out.update(ref=self.ref, registry=self.registry, signature=self.signature)
        return out


@dataclass
class PrepResult:
    plugin: VerifiedPlugin
    params: dict
    output: Path
    provenance_path: Path
    record: dict = field(default_factory=dict)


# -- the plugin ---------------------------------------------------------------------------


def looks_like_directory(source: str) -> bool:
    return os.path.isdir(source) or source.startswith((".", "/", "~")) or source.endswith(("/", os.sep))


def plugin_from_directory(directory: str | os.PathLike) -> VerifiedPlugin:
    """Read every packable file of *directory* once and digest those bytes."""
    from ..authoring.files import plugin_files
    from ..cluster.digest import digest_of_bytes

    root = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    if not os.path.isdir(root):
        raise UsageError(f"{directory}: no such plugin directory",
                         hint="give a plugin directory (with plugin.yaml) or a reference like alice/my-prep@1.0")
    if not os.path.isfile(os.path.join(root, "plugin.yaml")):
        raise ManifestError(f"{os.path.join(root, 'plugin.yaml')}: no such file",
                            hint="create a data-prep plugin with: forge plugin init NAME --kind data-prep")
    contents = {}
    for rel in plugin_files(root):
        with open(os.path.join(root, *rel.split("/")), "rb") as f:
            contents[rel] = f.read()
    manifest = _manifest(contents, os.path.join(root, "plugin.yaml"))
    return VerifiedPlugin(manifest=manifest, contents=contents, tree_digest=digest_of_bytes(contents),
                          source="directory", root=root)


def plugin_from_registry(ref: str, registry_url: str | None = None, *, insecure: bool = False, ca_file: str | None = None,
                         require_signatures: bool = False) -> VerifiedPlugin:
    """Resolve *ref*, judge its signature as ``forge lock`` does, pull it, check its files."""
    from ..cluster.digest import verify_tree
    from ..cluster.errors import VerificationError
    from ..registry.factory import open_registry
    from ..registry.publish import with_default_owner
    from ..registry.resolve import resolve
    from ..registry.store import PluginStore

    registry = open_registry(registry_url, insecure=insecure, ca_file=ca_file)
    info = resolve(registry, with_default_owner(ref))  # as forge plugin pull: the default owner
    if (info.manifest or {}).get("kind") not in (None, "data-prep"):
        raise UsageError(_not_data_prep(info.ref, info.manifest["kind"]), hint=_KIND_HINT)
    with tempfile.TemporaryDirectory(prefix="forge-prep-") as tmp:
        fetched = PluginStore(registry).fetch_verified(info, Path(tmp) / info.name, require=require_signatures)
        verdict, dest = fetched.status, fetched.dest
        assert dest is not None
        try:
            contents = dict(verify_tree(str(dest), info.tree_digest))
        except VerificationError as exc:
            raise PrepError(f"{info.ref}: the pulled files do not match its tree digest: {exc}") from None
    manifest = _manifest(contents, f"{info.ref}:plugin.yaml")
    return VerifiedPlugin(manifest=manifest, contents=contents, tree_digest=info.tree_digest, source="registry",
                          root=os.path.join(tempfile.gettempdir(), f"{info.name}-{info.version}"), ref=info.ref,
                          registry=registry.url, signature=verdict)


_KIND_HINT = "forge prep runs kind: data-prep plugins; environment and algorithm plugins belong in a job (forge.yaml)"


def _not_data_prep(label: str, kind: str) -> str:
    article = "an" if kind[:1] in "aeiou" else "a"
    return f"{label} is {article} {kind} plugin; forge prep runs data-prep plugins only"


def _manifest(contents: dict, source: str):
    from ..package_format.manifest import PluginManifest
    from ..package_format.yamlio import load_yaml

    data = contents.get("plugin.yaml")
    if data is None:
        raise ManifestError(f"{source}: no such file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{source}: not UTF-8 text") from None
    doc = load_yaml(text, source)
    manifest = PluginManifest.from_mapping(doc.data, source=source, lines=doc.line)
    if manifest.kind != "data-prep":
        raise UsageError(_not_data_prep(f"{manifest.name}@{manifest.version}", manifest.kind), hint=_KIND_HINT)
    return manifest


def prep_params(plugin: VerifiedPlugin, sets: list[str]) -> dict:
    """The plugin's declared defaults, then ``--set``, typed as ``forge submit`` types them."""
    from ..experiment.overrides import build_hyperparams, declared_params

    params = plugin.manifest.params  # type: ignore[attr-defined]
    declared = declared_params([(plugin.label, {k: v.to_dict() for k, v in params.items()})])
    return build_hyperparams(declared, {}, sets)


# -- the run ------------------------------------------------------------------------------


def check_paths(input_path: str | os.PathLike, output: str | os.PathLike) -> tuple[Path, Path]:
    """The input must be a readable file; the output's directory must exist."""
    src, out = Path(input_path), Path(output)
    if not src.exists():
        raise UsageError(f"input {src}: no such file")
    if not src.is_file():
        raise UsageError(f"input {src}: not a file")
    if not os.access(src, os.R_OK):
        raise UsageError(f"input {src}: not readable")
    if out.is_dir():
        raise UsageError(f"output {out}: is a directory", hint="give the path of the JSONL file to write")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"output {out}: directory {parent} does not exist", hint=f"create it first: mkdir -p {parent}")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"output {out}: directory {parent} is not writable")
    return src, out


def child_command(python: str | None) -> tuple[list, dict, tempfile.TemporaryDirectory]:
    """``[python, -m, starforge.prep.child]``, its environment, and the folder holding its zip.

    The child finds ``starforge`` in a zip built from this installation (the job's runtime
    zip plus :mod:`starforge.prep.child`), first on ``PYTHONPATH``, so an interpreter with
    nothing of StarForge installed runs it too.
    """
    from ..cluster.runtime_zip import build_runtime_zip, zip_sources
    from ..state.credentials import shield_credentials, without_credentials

    interpreter = python or sys.executable
    if python is not None:
        import shutil

        found = shutil.which(python) if os.sep not in python else python
        if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
            raise UsageError(f"--python {python}: not an executable interpreter")
        interpreter = found
    tmp = tempfile.TemporaryDirectory(prefix="forge-prep-")
    sources = zip_sources()
    sources["starforge/prep/__init__.py"] = str(Path(__file__).with_name("__init__.py"))
    sources["starforge/prep/child.py"] = str(Path(__file__).with_name("child.py"))
    zip_path = os.path.join(tmp.name, "starforge-prep.zip")
    with open(zip_path, "wb") as f:
        f.write(build_runtime_zip(sources))
    shield_credentials()  # nor from this process, which the child could read through /proc
    env = without_credentials()
    for key in [k for k in env if k.startswith("FORGE_") and k not in ("FORGE_HOME", "FORGE_VERBOSITY")]:
        env.pop(key)  # no job variables: the child is not part of a job
    env["PYTHONPATH"] = os.pathsep.join([zip_path] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return [interpreter, "-m", "starforge.prep.child"], env, tmp


def run_prep(
    plugin: VerifiedPlugin,
    params: dict,
    input_path: str | os.PathLike,
    output: str | os.PathLike,
    *,
    python: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PrepResult:
    """Map *input_path* through the plugin into *output* (atomically) and write its provenance."""
    from ..cluster import atomic
    from ..cluster.utctime import utc_now

    src, out = check_paths(input_path, output)
    cmd, env, tmp = child_command(python)
    header = {
        "files": {rel: base64.b64encode(data).decode("ascii") for rel, data in plugin.contents.items()},
        "entrypoint": plugin.manifest.entrypoint,  # type: ignore[attr-defined]
        "label": plugin.label,
        "root": plugin.root,
        "params": params,
        "input": str(src.resolve()),
    }
    total = src.stat().st_size
    output_file = atomic.writer(out, 0o644, fsync=True)
    with tmp, output_file as f:
        out_fd = f.fileno()
        read_fd, write_fd = os.pipe()
        try:
            # what the plugin prints goes to stderr: stdout carries forge's result (--json);
            # its own process group, ended with it: nothing it starts outlives forge prep
            proc = subprocess.Popen(
                cmd + [str(write_fd), str(out_fd)], stdin=subprocess.PIPE, stdout=_stderr_fd(), env=env,
                pass_fds=(write_fd, out_fd), cwd=tmp.name, start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            raise UsageError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
        os.close(write_fd)
        try:
            result = _talk(proc, json.dumps(header).encode("utf-8"), read_fd, progress, total)
            code = proc.wait()
        finally:
            end_group(proc)
        if result is None:
            raise PrepError(f"the prep process ({cmd[0]}) ended with exit code {code} before reporting a result",
                            hint="its own error is printed above; --python names the interpreter it runs under")
        if not result.get("ok"):
            raise _refusal(plugin, src, result)
        # What the provenance says is what forge reads itself, from the file it renames into
        # place and from the input, once nothing of the plugin runs: never the plugin's word.
        f.flush()
        written = file_counts(output_file.tmp, _lines)
        if progress is not None:
            progress(total, total)
    read = file_counts(src, _records)
    record = {
        "schema": PROVENANCE_SCHEMA,
        "created": utc_now(),
        "plugin": plugin.describe(),
        "params": params,
        "input": {"path": str(src.resolve()), **read},
        "output": {"path": str(out.resolve()), **written},
        "dropped": read["records"] - written["records"],
        "python": cmd[0],
        "core_version": _core_version(),
    }
    prov = out.with_name(out.name + PROVENANCE_SUFFIX)
    atomic.write_file(prov, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return PrepResult(plugin=plugin, params=params, output=out, provenance_path=prov, record=record)


def _lines(line: bytes) -> bool:
    return True  # every line of the output is one record


def _records(line: bytes) -> bool:
    return bool(line.strip())  # the input's blank lines are no records (the child skips them)


def file_counts(path: str | os.PathLike, is_record: Callable[[bytes], bool]) -> dict:
    """``{"sha256", "bytes", "records"}`` of the file at *path*, read in blocks; a record is a
    line (the last one may lack its newline) for which *is_record* holds."""
    import hashlib

    sha = hashlib.sha256()
    size = records = 0
    rest = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            sha.update(chunk)
            size += len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            records += sum(1 for line in lines if is_record(line))
    if rest and is_record(rest):
        records += 1
    return {"sha256": sha.hexdigest(), "bytes": size, "records": records}


def _stderr_fd() -> int | None:
    try:
        sys.stderr.flush()
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (captured)
        return None


def _talk(proc: subprocess.Popen, header: bytes, read_fd: int, progress, total: int) -> dict | None:
    """Send *header*; follow the child's progress lines; return its result (None if it had none).

    Reading stops at the result line, or once the child ended (a process it left behind
    and that still holds the pipe does not keep forge waiting: its group is ended)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(header)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    found: list = []
    pending = [b""]

    def take(chunk: bytes) -> None:
        *lines, pending[0] = (pending[0] + chunk).split(b"\n")
        for raw in lines:
            kind, _, rest = raw.decode("utf-8", "replace").partition(" ")
            if kind == "progress" and progress is not None:
                done = int(rest.split()[0])
                progress(min(done, total), total)
            elif kind == "result" and not found:
                found.append(json.loads(rest))

    try:
        read_until_done(proc, read_fd, take, done=lambda: bool(found))
    finally:
        os.close(read_fd)
    return found[0] if found else None


def _refusal(plugin: VerifiedPlugin, src: Path, result: dict) -> PrepError:
    line = result.get("line") or 0
    where = f"{src}:{line}: " if line else ""
    err = PrepError(
        f"{where}{result.get('message')}; nothing was written",
        hint=(f"fix line {line} of {src}, or the plugin {plugin.label}" if line else f"check the plugin {plugin.label}"),
    )
    err.detail = result.get("detail") or ""  # type: ignore[attr-defined]
    return err


def _core_version() -> str:
    from .. import __version__

    return __version__
