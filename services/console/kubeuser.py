"""The cluster console's only way to Kubernetes: as the user who logged in, with that user's own token.

The console's pod mounts no ServiceAccount token and is granted nothing (deploy/base/console.yaml). Every
question it asks the API server carries the token the user gave at login, so the console can never do more
than that user's credential can:
- **who**: `SelfSubjectReview` (authentication.k8s.io/v1): the token is valid and names the user; a 401 is
  a token the API server does not take (expired, revoked, made up);
- **may**: `SelfSubjectAccessReview` (authorization.k8s.io/v1): may this user `verb` this kind in this
  namespace; what the console reads from the event stream is shown only where the user may `get`/`list` it;
- **writes**: server-side apply and delete of the user's resources, with the user's token: RBAC, admission
  (Jetway's webhook included) and the audit log see the user, not the console.

Answers to "may" are kept `DECISION_TTL` seconds per session, so a page of fifty rows is one review per
namespace. A token is held in memory for its session and never logged, echoed or put in an error.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from contracts.kinds import KindInfo

log = logging.getLogger("jetway.console")
DECISION_TTL = 10.0  # seconds an allowed/denied answer is reused: a revoked right shows within this
MAX_DECISIONS = 4096
JSON = "application/json"
TIMEOUT = aiohttp.ClientTimeout(total=15)
FIELD_MANAGER = "jetway-console"  # the field manager of what the console applies (as the user)
IN_CLUSTER_CA = Path("/var/run/jetway/kube-root-ca/ca.crt")  # the kube-root-ca.crt ConfigMap, mounted


class KubeRefused(Exception):
    """The API server's answer to something the user asked: its status and its own message."""

    def __init__(self, status: int, message: str, causes: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.causes = causes or []  # (field path, message) from a 422's details


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is, and the CA that signs its certificate; no credential of the console's own."""

    server: str
    ca_file: str | None = None
    insecure: bool = False  # only for a kubeconfig that says so (a test cluster); never in-cluster
    ca_data: str | None = None  # PEM, from a kubeconfig's certificate-authority-data

    @classmethod
    def from_environment(cls, environ: dict[str, str], kubeconfig: str | None, ca_file: str | None = None) -> Endpoint:
        """In a pod: KUBERNETES_SERVICE_HOST/PORT and the mounted cluster CA. Else the current context's cluster of
        `kubeconfig` (its user, if any, is ignored: the console never speaks as anyone but the user). `ca_file`:
        JETWAY_KUBE_CA_FILE, another CA than the pod's mounted one."""
        host = environ.get("KUBERNETES_SERVICE_HOST")
        if host and not kubeconfig:
            port = environ.get("KUBERNETES_SERVICE_PORT", "443")
            ca = ca_file or str(IN_CLUSTER_CA)
            return cls(f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}", ca)
        if not kubeconfig:
            raise ValueError("KUBECONFIG must name a kubeconfig outside a pod (only its cluster is read)")
        document = yaml.safe_load(Path(kubeconfig).read_text())
        contexts = {c["name"]: c["context"] for c in document.get("contexts") or []}
        clusters = {c["name"]: c["cluster"] for c in document.get("clusters") or []}
        current = contexts.get(document.get("current-context", "")) or next(iter(contexts.values()), None)
        cluster = clusters.get(current["cluster"]) if current else next(iter(clusters.values()), None)
        if not cluster or not cluster.get("server"):
            raise ValueError(f"{kubeconfig}: no cluster with a server in its current context")
        data = cluster.get("certificate-authority-data")
        ca_data = base64.b64decode(data).decode() if data else None
        insecure = bool(cluster.get("insecure-skip-tls-verify"))
        ca_file = cluster.get("certificate-authority")
        if ca_file and not Path(ca_file).is_absolute():  # kubectl reads a relative path from the kubeconfig's folder
            ca_file = str(Path(kubeconfig).parent / ca_file)
        return cls(cluster["server"].rstrip("/"), ca_file, insecure, ca_data)

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        if self.insecure:
            return False
        return ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)


@dataclass
class KubeAsUser:
    """Requests to the API server with a user's token (see the module docstring)."""

    endpoint: Endpoint
    session: aiohttp.ClientSession | None = None
    clock: Any = time.monotonic
    decisions: OrderedDict[tuple[str, str, str, str, str], tuple[bool, float]] = field(default_factory=OrderedDict)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(ssl=self.endpoint.ssl_context())
        self.session = aiohttp.ClientSession(connector=connector, timeout=TIMEOUT)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def call(
        self, token: str, method: str, path: str, *, body: Any = None, content_type: str = JSON, query: dict[str, str] | None = None
    ) -> Any:
        assert self.session is not None, "start() first"
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        try:
            async with self.session.request(method, self.endpoint.server + path, headers=headers, data=data, params=query) as answer:
                text = await answer.text()
                status = answer.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # ValueError: a header aiohttp will not send
            raise KubeRefused(502, f"the Kubernetes API server did not answer: {type(exc).__name__}") from None
        try:
            parsed = json.loads(text) if text else {}
        except ValueError:
            parsed = {}
        if status >= 400:
            raise refusal(status, parsed)
        return parsed

    async def who(self, token: str) -> str:
        """The user the token stands for; KubeRefused(401) when the API server does not take it."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        answer = await self.call(token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body)
        name = ((answer.get("status") or {}).get("userInfo") or {}).get("username")
        if not name:
            raise KubeRefused(401, "the Kubernetes API server named no user for this token")
        return str(name)

    async def may(self, session: str, token: str, verb: str, info: KindInfo, namespace: str | None) -> bool:
        """Whether the user may `verb` the kind in `namespace` (None: in every namespace, or a cluster-scoped kind)."""
        cache_key = (session, verb, info.group, info.plural, namespace or "")
        now = self.clock()
        cached = self.decisions.get(cache_key)
        if cached is not None and cached[1] > now:
            return cached[0]
        attributes: dict[str, str] = {"verb": verb, "group": info.group, "resource": info.plural}
        if namespace and info.namespaced:
            attributes["namespace"] = namespace
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attributes}}
        answer = await self.call(token, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body)
        allowed = bool((answer.get("status") or {}).get("allowed"))
        self.decisions[cache_key] = (allowed, now + DECISION_TTL)
        while len(self.decisions) > MAX_DECISIONS:
            self.decisions.popitem(last=False)
        return allowed

    def forget(self, session: str) -> None:
        for key in [k for k in self.decisions if k[0] == session]:
            del self.decisions[key]

    async def apply(
        self, token: str, info: KindInfo, manifest: dict[str, Any], *, dry_run: bool
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Server-side apply as the user: (the object before, None when new; the object as stored, or as it would be)."""
        meta = manifest.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), meta.get("namespace") or ("default" if info.namespaced else None)
        if info.namespaced:
            manifest = {**manifest, "metadata": {**meta, "namespace": namespace}}
        path = resource_path(info, namespace, name)
        before: dict[str, Any] | None = None
        try:
            before = await self.call(token, "GET", path)
        except KubeRefused as exc:
            if exc.status != 404:
                raise
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        stored = await self.call(token, "PATCH", path, body=manifest, content_type="application/apply-patch+yaml", query=query)
        return before, stored

    async def delete(self, token: str, info: KindInfo, namespace: str | None, name: str) -> bool:
        """Delete as the user; False when it was not there."""
        try:
            await self.call(token, "DELETE", resource_path(info, namespace, name), body={"propagationPolicy": "Background"})
        except KubeRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True


def resource_path(info: KindInfo, namespace: str | None, name: str) -> str:
    """The object's path; each segment quoted, so a name or namespace with `/` or `..` cannot reach another path."""
    where = f"/namespaces/{quote(namespace, safe='')}" if info.namespaced and namespace else ""
    return f"/apis/{info.group}/{info.api_version.split('/', 1)[1]}{where}/{info.plural}/{quote(name, safe='')}"


def usable_token(token: str) -> bool:
    """A bearer token as HTTP can carry it: printable, no spaces (a pasted line break is the usual mistake)."""
    return bool(token) and len(token) <= 16384 and all(33 <= ord(c) <= 126 for c in token)


def refusal(status: int, body: dict[str, Any]) -> KubeRefused:
    """The API server's Status as a KubeRefused: its message, and a 422's causes as (field, message)."""
    message = str(body.get("message") or f"the Kubernetes API server answered {status}")
    details = body.get("details") or {}
    causes = [(str(c.get("field", "")), str(c.get("message", ""))) for c in details.get("causes") or [] if isinstance(c, dict)]
    return KubeRefused(status, message, causes)
