"""``forge bundle push``: import a verified bundle into a registry on the far side of the gap.

The bundle is verified in full first (:func:`~starforge.bundle.verify.verify_bundle`); then
each plugin version is published to the far registry exactly as ``forge plugin publish``
stores it, with the same immutability rules: the same tree digest again is a no-op, other
content under an existing version is refused naming both digests. Data-prep plugins are
refused before anything is written. The experiment's lock then holds there unchanged.

Laptop side.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

from ..registry.base import Progress, PublishResult
from .mirror import refuse_data_prep
from .verify import VerifiedBundle, verify_bundle


@dataclass(frozen=True)
class PushedBundle:
    bundle: VerifiedBundle
    registry: str
    results: tuple  # PublishResult per plugin, in lock order


def push_bundle(
    path: str | os.PathLike,
    registry: str | None = None,
    *,
    insecure: bool = False,
    require_signatures: bool = False,
    trust=None,
    progress: Callable[[str, int], ContextManager[Progress | None]] | None = None,
) -> PushedBundle:
    """Verify the bundle at *path* and publish its versions to *registry* (default: FORGE_REGISTRY, config)."""
    from ..registry.factory import open_registry

    with tempfile.TemporaryDirectory(prefix="forge-bundle-push-") as work:
        bundle = verify_bundle(path, require_signatures=require_signatures, trust=trust, workdir=work, progress=progress)
        for plugin in bundle.plugins:
            refuse_data_prep(plugin.info)
        reg = open_registry(registry, insecure=insecure)
        results = []
        for plugin in bundle.plugins:
            assert plugin.archive is not None
            result = _publish(reg, Path(plugin.archive), plugin.info, plugin.envelope, progress)
            for other in plugin.others:  # every key's signature travels, not only the first
                reg.attach_signature(result.version, other)
            for statement in plugin.yank_statements:  # and the version's yanks
                reg.attach_yank_statement(plugin.info.owner, plugin.info.name, result.version.version,
                                          plugin.info.tree_digest, statement)
            results.append(result)
        return PushedBundle(bundle=bundle, registry=reg.url, results=tuple(results))


def _publish(reg, archive: Path, info, envelope: bytes | None, progress) -> PublishResult:
    if progress is None:
        return reg.publish(archive, info, signature=envelope)
    with progress(f"push {info.ref}", info.size) as update:
        if update is None:
            return reg.publish(archive, info, signature=envelope)
        return reg.publish(archive, info, signature=envelope, progress=update)
