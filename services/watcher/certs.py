"""The admission webhook's certificate: a private CA and a serving certificate it signs.

The API server must trust the webhook, so the CA goes into the webhook configurations'
`caBundle`. Jetway keeps both in one Secret (`jetway-webhook-tls`), issues them on first start
and again before they expire, and patches the bundle in; cert-manager can do the same job
instead (docs/cluster.md). Pure: `issue` and `needs_renewal` touch no I/O.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Issued:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self, directory: Path) -> ssl.SSLContext:
        """A TLS server context (the key is written to `directory`, which must be private to the process)."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tls.crt").write_bytes(self.cert_pem)
        key = directory / "tls.key"
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(directory / "tls.crt", key)
        return context


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def issue(names: list[str], *, ips: tuple[str, ...] = (), days: int = 365, common_name: str = "Jetway webhook CA") -> Issued:
    """A new CA and a serving certificate for `names` (DNS) and `ips`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alternative: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alternative += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else ips[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Issued(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def needs_renewal(cert_pem: bytes, names: list[str], now: datetime.datetime | None = None) -> bool:
    """Whether a stored certificate is unusable: unreadable, expiring soon, or missing a name."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except (ValueError, x509.ExtensionNotFound):
        return True
    moment = now or datetime.datetime.now(datetime.UTC)
    return cert.not_valid_after_utc - moment < RENEW_BEFORE or not set(names) <= set(sans)
