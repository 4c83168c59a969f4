"""Where an OCI registry is: ``oci://host[:port]/prefix`` parsed into host and repository prefix.

Laptop side. ``oci://host[:port]/prefix`` is served at ``https://host[:port]``; plain HTTP
only for a loopback host (tried after HTTPS fails to handshake) or with ``insecure=True``
(:class:`~starforge.registry.oci_client.OciClient` decides).

>>> parse_oci_url("oci://registry.example.com:5000/team/forge")
OciLocation(host='registry.example.com:5000', prefix='team/forge')
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import UsageError


@dataclass(frozen=True)
class OciLocation:
    host: str  # host[:port] as written (IPv6 in brackets)
    prefix: str  # repository prefix without slashes at either end; may be empty

    @property
    def hostname(self) -> str:
        return urlsplit(f"//{self.host}").hostname or self.host

    @property
    def is_loopback(self) -> bool:
        name = self.hostname
        if name == "localhost" or name.endswith(".localhost"):
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def repository(self, *parts: str) -> str:
        """``prefix/part/...`` in lowercase (registries refuse uppercase repository names)."""
        return "/".join(p for p in (self.prefix, *parts) if p).lower()


_REPO_COMPONENT = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$")


def parse_oci_url(url: str) -> OciLocation:
    """Split ``oci://host[:port]/prefix``; raise :class:`UsageError` when malformed."""
    if not url.startswith("oci://"):
        raise UsageError(f"'{url}' is not an OCI registry URL", hint="write oci://host[:port]/prefix")
    parts = urlsplit(url)
    if not parts.netloc or parts.query or parts.fragment or "@" in parts.netloc:
        raise UsageError(
            f"'{url}' is not an OCI registry URL",
            hint="write oci://host[:port]/prefix; credentials go in FORGE_REGISTRY_USER/FORGE_REGISTRY_PASSWORD",
        )
    try:
        parts.port
    except ValueError:
        raise UsageError(f"'{url}': bad port") from None
    prefix = parts.path.strip("/").lower()
    for comp in prefix.split("/") if prefix else ():
        if not _REPO_COMPONENT.match(comp):
            raise UsageError(f"'{url}': '{comp}' is not a valid repository path component",
                             hint="lowercase letters, digits and . _ - separators")
    return OciLocation(host=parts.netloc.lower(), prefix=prefix)


def is_loopback_url(url: str) -> bool:
    """Whether *url*'s host is a loopback address (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    host = urlsplit(url).hostname or ""
    return OciLocation(host=host, prefix="").is_loopback
