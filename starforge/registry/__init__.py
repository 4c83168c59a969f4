"""Where plugin packages live between the laptop and the cluster.

``open_registry(url)`` picks the registry kind by URL: a directory path (the embedded default) or
``oci://host[:port]/prefix``. Laptop side.
"""

from .base import PublishedVersion, PublishResult, Ref, Registry, parse_ref
from .factory import open_registry

__all__ = ["PublishedVersion", "PublishResult", "Ref", "Registry", "open_registry", "parse_ref"]
