"""Entry point of the console in a cluster: `python -m services.console` (deploy/base/console.yaml).

It serves the same pages and the same `/v1/*` routes as `jetway up`'s front door (api.py), from its own fold of
the event stream (handlers.py, as in `jetway up`), with two differences (services/console/access.py):
- who: the user logs in with their own Kubernetes token (`POST /ui/login`, or `Authorization: Bearer`), which
  the API server checks; the console's pod has no token of its own and no Kubernetes rights at all;
- changes (apply and delete; the members page's drain is an apply) go to the Kubernetes API with the user's
  token (`KubeWrites`), where RBAC, Jetway's admission webhook and the audit log see the user. The event stream
  is only read: the console's NATS user may write nothing but its own dead letters and snapshots.

Settings: the `console` group of runtime/settings.py (docs/settings.md): where the pages are served (plain HTTP:
reach it with `kubectl port-forward`, docs/console.md), the router the playground relays to, the name of every
router pod for the members' live figures, and how often the API server is asked again whether it still takes a
user's token. Outside a pod, `KUBECONFIG` names the cluster (its user is ignored).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

import aiohttp
from aiohttp import web

from contracts.admission import Known, judge
from contracts.kinds import KINDS, KindInfo
from contracts.problems import Problem
from contracts.subjects import Key
from runtime.entry import Context, Declared, Stop
from runtime.service import Runnable, Runner, RunnerSettings
from services.console import api, figures
from services.console import web as console_web
from services.console.access import Caller, Denied, KubeGate
from services.console.handlers import NAME, ConsoleService
from services.console.kubeuser import Endpoint, KubeAsUser, KubeRefused

SCRAPE_TIMEOUT = aiohttp.ClientTimeout(total=3)
log = logging.getLogger("jetway.console")


class KubeWrites:
    """Changes as the user: Jetway's own admission rules first (the same words as `jetway validate`, in place on
    the form), then server-side apply or delete with the user's token; the API server's refusal is passed on."""

    def __init__(self, kube: KubeAsUser, *, allow_link_local: bool = False) -> None:
        self.kube = kube
        self.allow_link_local = allow_link_local

    async def apply(self, caller: Caller, manifest: object, *, dry_run: bool) -> web.Response:
        # The manifest's own rules only: the rules that compare it with what is stored (an update's immutable
        # fields) would answer about a resource the user may not read. Kubernetes and Jetway's webhook judge those.
        verdict = judge(manifest, Known(allow_link_local=self.allow_link_local))
        if not verdict.ok or verdict.obj is None:
            first = verdict.problems[0]
            return api.error(400, first.message, code="invalid_manifest", path=first.path, problems=verdict.problems)
        assert isinstance(manifest, dict)
        info = KINDS[str(manifest.get("kind"))]
        try:
            before, stored = await self.kube.apply(caller.token, info, manifest, dry_run=dry_run)
        except KubeRefused as exc:
            return refused(exc)
        meta, previous = stored.get("metadata") or {}, (before or {}).get("metadata") or {}
        body: dict[str, Any] = {
            "kind": info.kind,
            "name": meta.get("name"),
            "action": action(before, stored, dry_run=dry_run),  # the words of `jetway up`'s apply API
            "generation": meta.get("generation"),
            "previous_generation": previous.get("generation"),
            "resource_version": meta.get("resourceVersion"),
        }
        if info.namespaced:
            body["namespace"] = meta.get("namespace")
        if verdict.warnings:
            body["warnings"] = verdict.warnings
        return web.json_response(body, status=201 if before is None else 200)

    async def delete(self, caller: Caller, info: KindInfo, key: Key) -> web.Response:
        try:
            found = await self.kube.delete(caller.token, info, key.namespace or None, key.name)
        except KubeRefused as exc:
            return refused(exc)
        return web.json_response({"kind": info.kind, "name": key.name, "action": "deleted" if found else "noop"})


def action(before: dict[str, Any] | None, stored: dict[str, Any], *, dry_run: bool) -> str:
    """created / configured / unchanged, or would_create / would_update on a dry run, as the apply API says."""
    if before is None:
        return "would_create" if dry_run else "created"
    same = all(before.get(part) == stored.get(part) for part in ("spec",)) and all(
        (before.get("metadata") or {}).get(field) == (stored.get("metadata") or {}).get(field) for field in ("labels", "annotations")
    )
    if same:
        return "unchanged"
    return "would_update" if dry_run else "configured"


def refused(exc: KubeRefused) -> web.Response:
    """The API server's refusal, in the API's error shape, with its own words (they name no secret)."""
    if exc.status == 401:
        raise Denied(401, "the Kubernetes API server no longer takes this session's token; log in again")
    if exc.status == 403:
        return api.error(403, f"Kubernetes refused it: {exc.message}", code="forbidden")
    if exc.status == 409:
        return api.error(409, exc.message, code="conflict")
    if exc.status in (400, 422):
        problems = [Problem(path=path, message=message) for path, message in exc.causes] or None
        return api.error(400, exc.message, code="invalid_manifest", path=exc.causes[0][0] if exc.causes else "", problems=problems)
    if exc.status == 404:
        return api.error(404, exc.message, code="not_found")
    return api.error(502, f"the Kubernetes API server answered {exc.status}: {exc.message}", code="bad_gateway")


async def pod_addresses(host: str, port: int) -> list[str]:
    """Each pod's address once: IPv4 where there is any (a dual-stack headless Service names every pod twice,
    once per family, which would count its figures twice), else IPv6."""
    loop = asyncio.get_running_loop()
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            found = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if found:
            return sorted({str(entry[4][0]) for entry in found})
    return []


def router_scraper(target: str, session: aiohttp.ClientSession, clock: Any = time.monotonic) -> Any:
    """A `Console.scrape`: every router pod's `/metrics` (each address `host` resolves to), added into one sample."""
    host, _, port = target.rpartition(":")

    async def scrape() -> figures.Sample:
        addresses = await pod_addresses(host, int(port))

        async def one(address: str) -> str:
            shown = f"[{address}]" if ":" in address else address
            try:
                async with session.get(f"http://{shown}:{port}/metrics", timeout=SCRAPE_TIMEOUT) as answer:
                    return await answer.text() if answer.status == 200 else ""
            except (aiohttp.ClientError, TimeoutError):
                return ""  # a router going away: the others' figures still count

        texts = await asyncio.gather(*(one(a) for a in addresses))
        return figures.from_exposition([t for t in texts if t], clock())

    return scrape


async def start(context: Context) -> list[Runnable]:
    folded = ConsoleService()
    runner = Runner(folded, context.nc, RunnerSettings(manage_streams=False))  # its NATS user may not change them
    folded.runner = runner
    try:
        endpoint = Endpoint.from_environment(dict(os.environ), os.environ.get("KUBECONFIG") or None, context.settings.console.kube_ca_file)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"console: {exc}") from None
    kube = KubeAsUser(endpoint)
    config = context.settings.console
    router_url, recheck, metrics_target = config.router_url, config.recheck_seconds, config.router_metrics

    async def serve() -> Stop:
        await kube.start()
        scraping = aiohttp.ClientSession()
        console = console_web.Console(router_url=router_url, gate=KubeGate(kube, recheck=recheck))
        console.scrape = router_scraper(metrics_target, scraping)
        app = api.build_app(folded, "", console, writes=KubeWrites(kube))
        site, port = await api.serve(app, config.host, config.port)
        log.info("console listening", extra={"port": port})

        async def stop() -> None:
            await site.cleanup()
            await scraping.close()
            await kube.close()

        return stop

    context.after_ready.append(serve)
    return [runner]


# the pod has no token: it speaks to Kubernetes only as the user
SERVICE = Declared(NAME, start, uses_kube=False, servers=("the pages and /v1/*: JETWAY_CONSOLE_HOST, JETWAY_CONSOLE_PORT",))
