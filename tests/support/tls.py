"""A private certificate authority for tests: a CA, server certificates for 127.0.0.1, client certificates.

Made with the ``cryptography`` package, written as PEM files, as an internal CA (Harbor
behind a company CA) would hand them out.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


class TestCA:
    """A CA whose certificate is ``ca.pem`` in *root*; :meth:`server` and :meth:`client` issue leaves."""

    __test__ = False  # not a pytest class

    def __init__(self, root: Path, name: str = "Forge Test Internal CA") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = root / "ca.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, stem: str, common: str, usage, san: list | None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(cert=self.root / f"{stem}.crt", key=self.root / f"{stem}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(_key_pem(key))
        issued.key.chmod(0o600)
        return issued

    def server(self, stem: str = "server", names: tuple = ("127.0.0.1", "localhost")) -> Issued:
        """A server certificate for *names* (IP addresses and DNS names)."""
        san: list = []
        for n in names:
            try:
                san.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                san.append(x509.DNSName(n))
        return self._issue(stem, names[0], ExtendedKeyUsageOID.SERVER_AUTH, san)

    def client(self, stem: str = "client", common: str = "alice") -> Issued:
        return self._issue(stem, common, ExtendedKeyUsageOID.CLIENT_AUTH, None)
