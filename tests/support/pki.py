"""A private CA and a server certificate for 127.0.0.1, for upstreams served over HTTPS in tests."""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from services.watcher.certs import issue


@dataclass(frozen=True)
class PrivateCA:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        directory = Path(tempfile.mkdtemp(prefix="jetway-pki-"))
        (directory / "cert.pem").write_bytes(self.cert_pem)
        (directory / "key.pem").write_bytes(self.key_pem)
        context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
        return context


def make_ca(common_name: str = "Jetway Test CA") -> PrivateCA:
    issued = issue(["localhost"], ips=("127.0.0.1",), days=1, common_name=common_name)
    return PrivateCA(issued.ca_pem, issued.cert_pem, issued.key_pem)
