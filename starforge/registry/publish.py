"""Publish a plugin directory: check, pack, optionally sign, store immutably.

>>> publish_plugin("opsd-patch", open_registry(), "alice")     # doctest: +SKIP
PublishResult(version=PublishedVersion(owner='alice', name='opsd-patch', version='1.2.0', ...), created=True)

Laptop side.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..cluster.names import is_plugin_name
from ..errors import UsageError
from .base import Progress, PublishedVersion, PublishResult, Registry

PUBLISH_PREFIX = "forge-publish-"


def sweep_stale_publish_dirs(tmp_root: str | None = None, min_age: float = 600.0) -> list:
    """Remove the ``forge-publish-<pid>@<host tag>-*`` directories of publishers that were killed; return their names.

    Only directories of this user whose pid is gone: at once when they were made on this
    host (the tag is :func:`starforge.cluster.atomic.writer_tag`), else (another host
    sharing the temp directory, or a name from before the tag) when also untouched for
    *min_age* seconds.
    """
    import shutil
    import time

    from ..cluster.atomic import process_alive, writer_tag

    root = tmp_root or tempfile.gettempdir()
    here = writer_tag()
    removed: list[str] = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(PUBLISH_PREFIX):
            continue
        pid, at, rest = name[len(PUBLISH_PREFIX):].partition("@")
        if at:
            tag = rest.rpartition("-")[0]
        else:
            pid, tag = pid.partition("-")[0], None
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not pid.isdigit() or process_alive(int(pid)) or st.st_uid != os.getuid():
            continue
        if tag != here and time.time() - st.st_mtime < min_age:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    return removed


def default_owner(explicit: str | None = None) -> str:
    """The publishing owner: *explicit* (``--owner``), ``FORGE_OWNER``, config ``owner:``, the login name."""
    return owner_and_source(explicit)[0]


def with_default_owner(ref: str) -> str:
    """``opsd-patch@~=1.2`` -> ``alice/opsd-patch@~=1.2`` with the default owner (--owner's
    default: FORGE_OWNER, config, login name); a reference naming its owner is unchanged."""
    if "/" in ref.partition("@")[0]:
        return ref
    return f"{default_owner(None)}/{ref.strip()}"


LOGIN_NAME = "the login name"


def owner_and_source(explicit: str | None = None) -> tuple[str, str]:
    """The publishing owner and where it came from (``--owner``, ``FORGE_OWNER``, the config
    file, or :data:`LOGIN_NAME`)."""
    if explicit:
        return check_owner(explicit, "--owner"), "--owner"
    env = os.environ.get("FORGE_OWNER")
    if env:
        return check_owner(env, "FORGE_OWNER"), "FORGE_OWNER"
    from ..state.userconfig import load_user_config

    config = load_user_config()
    if config.owner is not None:
        source = f"'owner' in {config.path}"
        return check_owner(config.owner, source), source
    import getpass

    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        raise UsageError("cannot tell who is publishing", hint="pass --owner NAME or set FORGE_OWNER") from None
    return check_owner(login, LOGIN_NAME), LOGIN_NAME


def check_owner(owner: str, source: str) -> str:
    if not is_plugin_name(owner):
        raise UsageError(
            f"owner '{owner}' (from {source}) is not a valid owner name",
            hint="owners are lowercase letters, digits and single dashes; pass --owner NAME or set FORGE_OWNER",
        )
    return owner


def publish_plugin(
    root: str | os.PathLike,
    registry: Registry,
    owner: str,
    *,
    sign_key: str | os.PathLike | None = None,
    passphrase: str | bytes | None = None,
    progress: Progress | None = None,
    strict: bool = False,
) -> PublishResult:
    """Check the plugin at *root* (*strict*: warnings are errors), pack it and publish it as
    ``owner/name@version``.

    With *sign_key*, a DSSE envelope over the publish statement is stored beside it (with
    its Sigstore bundle); the statement names the archive the registry serves, so a
    version already published (from other archive bytes, by another laptop) is signed for
    the archive it serves (:func:`sign_published`). The same tree digest under an already
    published version is a no-op success (``created=False``); other content under it raises
    :class:`ImmutableVersionError`.
    """
    from ..authoring.checks import require_valid
    from ..package_format.archive import pack_tree

    check_owner(owner, "the owner")
    root = Path(root)
    report = require_valid(root, strict=strict)
    manifest = report.manifest
    assert manifest is not None  # require_valid raised otherwise
    from ..authoring.pack import refuse_own_archives

    refuse_own_archives(root, manifest.name, report.files)
    sweep_stale_publish_dirs()
    from ..cluster.atomic import writer_tag

    with tempfile.TemporaryDirectory(prefix=f"{PUBLISH_PREFIX}{os.getpid()}@{writer_tag()}-") as tmp:
        archive = Path(tmp) / f"{manifest.name}-{manifest.version}.tar.gz"
        packed = pack_tree(root, list(report.files), archive)
        files, artifact_digest, tree_digest = packed.files, packed.artifact_digest, packed.tree_digest
        if report.digest and report.digest != tree_digest:
            # The tree changed between the check and the pack: refuse rather than publish a mix.
            raise UsageError(f"{root} changed while it was being published", hint="publish again when the files are settled")
        info = PublishedVersion(
            owner=owner,
            name=manifest.name,
            version=manifest.version,
            tree_digest=tree_digest,
            artifact_digest=artifact_digest,
            manifest=manifest.to_dict(),
            files=files,
            top_level=tuple(sorted(report.top_level)),
            size=archive.stat().st_size,
            signed=sign_key is not None,
        )
        from ..errors import NotFoundError

        try:
            before: PublishedVersion | None = registry.get(owner, manifest.name, manifest.version)
        except NotFoundError:
            before = None
        envelope = None
        if sign_key is not None and before is None:  # a new version: its signature goes in with it
            from ..signatures.signing import sign_statement

            envelope = sign_statement(
                sign_key,
                owner=owner,
                name=manifest.name,
                version=manifest.version,
                tree_digest=tree_digest,
                artifact_digest=artifact_digest,
                passphrase=passphrase,
            )
        result = registry.publish(archive, info, signature=envelope, progress=progress) if progress else registry.publish(
            archive, info, signature=envelope
        )
    if sign_key is not None and not result.signature_attached:
        # already published (or published by another laptop meanwhile): sign what it serves,
        # only when that is these files
        attached, kept = sign_published(registry, result.version, sign_key, passphrase, held=tree_digest, source=str(root))
        from dataclasses import replace

        result = replace(result, signature_attached=attached, signature_kept=kept)
    return result


def sign_published(registry: Registry, info: PublishedVersion, sign_key: str | os.PathLike,
                   passphrase: str | bytes | None = None, *, held: str, source: str) -> tuple[bool, bool]:
    """Add a signature by *sign_key* to the published version *info*: ``(attached, kept)``.

    *held* is the tree digest the signer holds without the registry (from a lock or a local
    directory; *source* names it): the registry must serve exactly those files, in the
    archive its record names (``PluginStore.to_sign``), or
    nothing is signed. The statement names that tree digest and the archive. When a valid
    signature by the same key is already stored, nothing is added (``kept``; an ECDSA
    signature is randomized, so signing again would add a second, different one).
    """
    from ..signatures.signing import load_private_key, sign_statement
    from .store import PluginStore

    key = load_private_key(sign_key, passphrase)
    store = PluginStore(registry)
    store.to_sign(info, held, source)
    if store.signed_by(info, key.public_key()):
        return False, True
    envelope = sign_statement(sign_key, owner=info.owner, name=info.name, version=info.version,
                              tree_digest=held, artifact_digest=info.artifact_digest, passphrase=passphrase)
    return registry.attach_signature(info, envelope), False
