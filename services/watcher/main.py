"""Entry point: `python -m services.watcher` (see runtime/entry.py for the common environment).

A cluster's watcher: the list-then-watch ingest, status and finalizers (in JETWAY_WATCH_NAMESPACE, default
all), and the admission webhook over TLS with its certificate issued into a Secret, or mounted (the `webhook`
settings of runtime/settings.py, docs/settings.md).
`jetway up` builds the standalone objects in one process.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client

from runtime.entry import Context, Declared, Stop
from runtime.kube import Kube, KubeError, NotFound
from runtime.leases import Leases, LeaseSettings
from runtime.service import Runnable, Runner, RunnerSettings
from services.watcher import certs, webhook
from services.watcher.cluster import GROUPS, ClusterSync
from services.watcher.handlers import WatcherService

NAME = "watcher"
WEBHOOKS = (
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
)
log = logging.getLogger("jetway.watcher")


@dataclass
class Watcher:
    service: WatcherService
    runner: Runner


def build(
    nc: Client,
    *,
    allow_link_local: bool = False,
    settings: RunnerSettings | None = None,
    cluster: Kube | None = None,
    namespace: str | None = None,
    resync_interval: float | None = None,
    leases: LeaseSettings | None = None,
    replica: str | None = None,
) -> Watcher:
    """The watcher. In a cluster, with `leases`, it is one of several replicas: each follows the kinds it holds a
    lease on (cluster.GROUPS), and writes status for those only; every replica folds every event."""
    service = WatcherService(allow_link_local=allow_link_local, resync_interval=resync_interval)
    runner = Runner(service, nc, settings)
    if cluster is not None:
        sync = service.cluster = ClusterSync(cluster, service, namespace=namespace)
        if leases is not None:
            service.leases = Leases(
                nc.jetstream(timeout=5), NAME, GROUPS, replica=replica, settings=leases, on_gain=sync.take, on_loss=sync.release
            )
            runner = Runner(service, nc, settings, owns=lambda key: sync.holds_kind(key.kind))
    service.runner = runner
    return Watcher(service, runner)


async def ensure_certificate(kube: Kube, namespace: str, secret: str, service: str, webhook_name: str) -> certs.Issued:
    """The webhook's certificate from its Secret, issued (again) when missing or expiring, and the
    CA bundle in the webhook configurations named `webhook_name`."""
    names = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    found = await kube.get_or_none("v1", "Secret", secret, namespace)
    data = (found or {}).get("data") or {}
    stored = {k: base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key") if k in data}
    if len(stored) == 3 and not certs.needs_renewal(stored["tls.crt"], names):
        issued = certs.Issued(stored["ca.crt"], stored["tls.crt"], stored["tls.key"])
    else:
        issued = certs.issue(names)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": secret, "namespace": namespace},
            "data": {
                "ca.crt": base64.b64encode(issued.ca_pem).decode(),
                "tls.crt": base64.b64encode(issued.cert_pem).decode(),
                "tls.key": base64.b64encode(issued.key_pem).decode(),
            },
        }
        await kube.apply(body, manager="jetway-watcher")
        log.info("issued the webhook certificate for %s", ", ".join(names))
    bundle = base64.b64encode(issued.ca_pem).decode()
    for api_version, kind in WEBHOOKS:
        try:
            config = await kube.get(api_version, kind, webhook_name)
        except NotFound:
            continue
        hooks = [{"name": h["name"], "clientConfig": {"caBundle": bundle}} for h in config.get("webhooks", [])]
        if any(h.get("clientConfig", {}).get("caBundle") != bundle for h in config.get("webhooks", [])):
            await kube.apply(
                {"apiVersion": api_version, "kind": kind, "metadata": {"name": webhook_name}, "webhooks": hooks}, manager="jetway-watcher"
            )
    return issued


async def start(context: Context) -> list[Runnable]:
    allow_link_local = context.settings.dial.allow_link_local
    hooked = context.settings.webhook
    kube = context.kube
    assert kube is not None  # cluster_only: standalone, the watcher runs inside `jetway up`, beside the front door
    watcher = build(
        context.nc,
        allow_link_local=allow_link_local,
        cluster=kube,
        namespace=context.settings.watcher.watch_namespace,
        resync_interval=context.resync_interval,
        leases=context.leases,
        replica=context.replica,
    )
    sync = watcher.service.cluster
    assert sync is not None
    context.checks.append(sync.ready.is_set)
    if hooked.enabled:
        mounted = hooked.cert_dir  # cert-manager (or anyone) provides tls.crt and tls.key
        if mounted:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(Path(mounted) / "tls.crt", Path(mounted) / "tls.key")
        else:
            try:
                issued = await ensure_certificate(kube, hooked.namespace, hooked.secret, hooked.service, hooked.name)
            except KubeError as exc:
                raise SystemExit(f"cannot set up the admission webhook's certificate: {exc}") from None
            tls = issued.server_context(Path(tempfile.mkdtemp(prefix="jetway-webhook-")))
        lookup = webhook.cluster_lookup(watcher.service, kube)
        hooks = await webhook.serve(
            webhook.build_app(allow_link_local=allow_link_local, lookup=lookup),
            "0.0.0.0",
            hooked.port,
            tls,
        )

        async def stop_hooks() -> None:
            with contextlib.suppress(Exception):
                await hooks.cleanup()

        async def keep() -> Stop:
            return stop_hooks

        context.after_ready.append(keep)  # serving before ready: the API server calls it while we rebuild
    return [watcher.runner]


SERVICE = Declared(NAME, start, servers=("the admission webhook: JETWAY_WEBHOOK_PORT",), cluster_only=True)
