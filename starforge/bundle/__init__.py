"""Bundles: a locked experiment's plugins carried across an air gap as one OCI image layout tar.

``create_bundle`` (from the lock and its registry), ``verify_bundle`` (every digest, every
tree, every signature), ``push_bundle`` (into a registry on the far side). Laptop side.
"""

from .create import CreatedBundle, create_bundle
from .push import PushedBundle, push_bundle
from .verify import VerifiedBundle, verify_bundle

__all__ = ["CreatedBundle", "PushedBundle", "VerifiedBundle", "create_bundle", "push_bundle", "verify_bundle"]
