"""A private CA and a server certificate for 127.0.0.1, for upstreams served over HTTPS in tests."""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from services.watcher.certs import Issued, issue


@dataclass(frozen=True)
class PrivateCA:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        return Issued(self.ca_pem, self.cert_pem, self.key_pem).server_context(Path(tempfile.mkdtemp(prefix="jetway-pki-")))


def make_ca(common_name: str = "Jetway Test CA") -> PrivateCA:
    issued = issue(["localhost"], ips=("127.0.0.1",), days=1, common_name=common_name)
    return PrivateCA(issued.ca_pem, issued.cert_pem, issued.key_pem)
