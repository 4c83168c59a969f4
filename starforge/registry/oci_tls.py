"""Which certificates the laptop trusts for an OCI registry, and which one it shows.

Laptop side. A registry's certificate is verified against:

- the system's trust store (OpenSSL's default locations: ``/etc/ssl/certs`` after
  ``update-ca-certificates`` on Debian; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` point
  elsewhere), and the Mozilla bundle httpx ships (``certifi``);
- plus the CA file for that registry: ``--ca-file FILE``, else ``ca_file`` of its
  ``host[:port]`` under ``registries:`` in the user config (Helm's ``--ca-file``, Docker's
  ``certs.d/<host>/ca.crt``).

A client certificate (``cert_file``, ``key_file`` of the same entry) is shown to a registry
that asks for one (mutual TLS). ``--insecure`` accepts any certificate only for a registry
with no CA file: naming a CA is asking for it to be checked.

>>> RegistryTrust().describe()
'the system trust store'
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class RegistryTrust:
    """The CA file and client certificate for one registry host, and where each came from."""

    ca_file: Path | None = None
    ca_from: str = ""  # "--ca-file", or the config file and key it was read from
    cert_file: Path | None = None
    key_file: Path | None = None
    cert_from: str = ""

    def describe(self) -> str:
        if self.ca_file is None:
            return "the system trust store"
        return f"the system trust store and {self.ca_file} (from {self.ca_from})"


def registry_trust(host: str, ca_file: str | Path | None = None) -> RegistryTrust:
    """The trust for *host* (``host[:port]``): *ca_file* (``--ca-file``) over the user config's entry."""
    from ..state.userconfig import load_user_config

    config = load_user_config()
    entry = config.registry_settings(host)
    where = f"registries: {host} in {config.path}"
    ca, ca_from = (Path(ca_file), "--ca-file") if ca_file else (None, "")
    if ca is None and entry is not None and entry.ca_file is not None:
        ca, ca_from = entry.ca_file, f"ca_file of {where}"
    if entry is None or entry.cert_file is None:
        return RegistryTrust(ca_file=ca, ca_from=ca_from)
    return RegistryTrust(ca_file=ca, ca_from=ca_from, cert_file=entry.cert_file, key_file=entry.key_file,
                         cert_from=f"cert_file of {where}")


# The contexts of registries with no CA file or client certificate of their own, by what
# they depend on: loading the system store and certifi's bundle takes 0.1-0.3 s, and a
# command that opens several clients (lock, copy, bundle) needs the same one each time.
_PLAIN: dict[tuple, ssl.SSLContext] = {}


def ssl_context(trust: RegistryTrust, *, verify: bool = True) -> ssl.SSLContext:
    """An SSL context for a registry: the system store, certifi, *trust*'s CA file and client certificate.

    With *verify* False (``--insecure`` and no CA file) any certificate is accepted.
    Raises :class:`UsageError` naming the file when one cannot be read.
    """
    if trust.ca_file is None and trust.cert_file is None:
        key = (verify, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in _PLAIN:
            _PLAIN[key] = _new_context(trust, verify)
        return _PLAIN[key]
    return _new_context(trust, verify)


def _new_context(trust: RegistryTrust, verify: bool) -> ssl.SSLContext:
    import certifi

    if verify or trust.ca_file is not None:
        context = ssl.create_default_context()  # the system's store; SSL_CERT_FILE / SSL_CERT_DIR honoured
        context.load_verify_locations(cafile=certifi.where())
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if trust.ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(trust.ca_file))
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise UsageError(f"cannot read the CA file {trust.ca_file} (from {trust.ca_from}): {_reason(exc)}",
                             hint="name a PEM file of CA certificates (-----BEGIN CERTIFICATE-----)") from None
    if trust.cert_file is not None:
        key = str(trust.key_file) if trust.key_file is not None else None
        try:
            context.load_cert_chain(str(trust.cert_file), key)
        except (OSError, ssl.SSLError, ValueError) as exc:
            shown = f"{trust.cert_file}" + (f" with key {trust.key_file}" if key else "")
            raise UsageError(f"cannot read the client certificate {shown} (from {trust.cert_from}): {_reason(exc)}",
                             hint="cert_file: a PEM certificate; key_file: its unencrypted PEM private key") from None
    return context


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def is_tls_refusal(exc: Exception) -> bool:
    """Whether a transport error is a TLS handshake the registry or we refused (a server that
    speaks TLS), as opposed to a host that is down or speaks plain HTTP."""
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or ("ALERT" in text.upper() and "SSL" in text.upper())


def tls_hint(host: str, exc: Exception, trust: RegistryTrust) -> str | None:
    """What to do about a refused TLS handshake with *host*, or None when *exc* is not one."""
    from ..state.home import home

    text = str(exc)
    config = f"registries: {{{host}: {{...}}}} in {home().config_file}"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        if "hostname mismatch" in text.lower() or "ip address mismatch" in text.lower():
            return (f"the registry's certificate does not name {host.rsplit(':', 1)[0]}: connect by a name "
                    "the certificate lists, or ask the registry's operator for a certificate with this name")
        if trust.ca_file is not None:
            return (f"the registry's certificate is signed neither by {trust.ca_file} (from {trust.ca_from}) nor by "
                    "a CA of the system trust store: name the CA that issued it (its operator has the CA certificate)")
        return (f"the registry's certificate is not signed by a CA trusted here (the system trust store); "
                f"if an internal CA signed it, pass --ca-file CA.pem or set ca_file under {config} "
                "(SSL_CERT_FILE and the system store, after update-ca-certificates, are honoured too)")
    if is_tls_refusal(exc):
        if trust.cert_file is None:
            return (f"the registry refused the TLS handshake; if it asks for a client certificate, "
                    f"set cert_file and key_file under {config}")
        return (f"the registry refused the TLS handshake with the client certificate {trust.cert_file} "
                f"(from {trust.cert_from}); check that the registry trusts the CA that signed it")
    return None
