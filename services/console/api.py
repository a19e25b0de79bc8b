"""The front door: the apply API (the Airdress operator's resource plane, for every Jetway kind) and the console.

    POST   /v1/apply[?dry-run=true]              one manifest, JSON or YAML
    GET    /v1/kinds                              kinds with their summary condition types
    GET    /v1/kinds/{kind}[?namespace=NS]        {kind, items: [ResourceView]}
    GET    /v1/kinds/{kind}/{name}[?namespace=NS] ResourceView
    GET    /v1/kinds/{kind}/{name}/status         {kind, name, generation, observed_generation, phase, conditions, last_reconciled_at}
    DELETE /v1/kinds/{kind}/{name}                {kind, name, action: deleted|noop}
    GET    /metrics                               Prometheus: every service's in this process (docs/metrics.md)
    /ui/, /v1/console/*, /v1/watch, .../history   the web console (services/console/web.py, docs/console.md)

Every route but /healthz, /metrics and the console's login link wants `Authorization: Bearer <token>`, or the
console's session cookie (with `x-jetway-console: 1` on a change: 403 without), 401 otherwise. Bad input is
400 `{error, path, errors: [{path, message}]}` with the words of `jetway validate`; a stale
`resourceVersion` is 409; nothing a client sends yields a 500.

What it shows it reads from the console service's own fold (handlers.py); changes go through `Writes`: in
`jetway up`, to the watcher in the same process (`RecorderWrites`, through contracts/frontdoor.py's narrow
`Recorder`); in a cluster, to Kubernetes as the user (main.py `KubeWrites`). It imports nothing of the watcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from nats.aio.client import Client

from contracts.documents import DocumentError, load_json, load_yaml_all
from contracts.frontdoor import Applied, Recorder, Refused
from contracts.kinds import KINDS, KindInfo
from contracts.problems import Problem
from contracts.subjects import Key
from runtime import metrics
from runtime.resources import ResourceState
from runtime.service import Runner, RunnerSettings
from services.console import rendered
from services.console import web as console_web
from services.console.access import CALLER, Caller, Denied, KubeGate, TokenGate, Writes, known_kind, readable_resource, requested_key
from services.console.handlers import ConsoleService
from services.console.kubeuser import KubeRefused

log = logging.getLogger("jetway.api")
MAX_BODY = 4 * 1024 * 1024
READ_YOUR_WRITE = 10.0  # seconds an answered apply waits for the console's fold to hold it (then answers anyway)
INLINE_PARSE = 64 * 1024  # bodies up to this size parse in well under a millisecond: no thread needed
JSON_TYPES = ("application/json", "")
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
OPEN = ("/healthz", "/metrics")  # no token: what a supervisor and a Prometheus scraper ask
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error(status: int, message: str, *, code: str, path: str | None = None, problems: list[Problem] | None = None) -> web.Response:
    """Every error of the apply API: the spec's `{"error": sentence, "path": ...}` (Airdress's manifest rejection),
    with a stable `code` and, for clients that read Airdress's nested shape's member, the sentence as `message`."""
    body: dict[str, Any] = {"error": message, "message": message, "code": code}
    if path is not None:
        body["path"] = path
    if problems is not None:
        body["errors"] = [{"path": p.path, "message": p.message} for p in problems]
    return web.json_response(body, status=status)


def read(raw: bytes, is_yaml: bool) -> list[Any]:
    """The manifests of a body, within the bounds of contracts/documents.py (empty YAML documents dropped)."""
    if is_yaml:
        return [d for d in load_yaml_all(raw) if d is not None]
    return [load_json(raw)]


def refusal(refused: Refused) -> web.Response:
    first = refused.problems[0]
    if refused.status == 409:
        return error(409, first.message, code="conflict", path=first.path)
    if refused.status == 413:
        return error(413, first.message, code="too_large", path=first.path)
    return error(400, first.message, code="invalid_manifest", path=first.path, problems=refused.problems)


def applied(outcome: Applied) -> web.Response:
    body: dict[str, Any] = {
        "kind": outcome.key.kind,
        "name": outcome.key.name,
        "action": outcome.action,
        "generation": outcome.generation,
        "previous_generation": outcome.previous_generation,
        "resource_version": outcome.resource_version,
    }
    if KINDS[outcome.key.kind].namespaced:
        body["namespace"] = outcome.key.namespace
    if outcome.warnings:
        body["warnings"] = outcome.warnings
    return web.json_response(body, status=201 if outcome.action == "created" else 200)


class RecorderWrites:
    """Changes recorded by the watcher in this process (`jetway up`): it judges each manifest against what it
    stored. The answer waits until the console's own fold holds the change, so a GET right after it sees it."""

    def __init__(self, recorder: Recorder, console: ConsoleService) -> None:
        self.recorder = recorder
        self.console = console

    async def apply(self, caller: Caller, manifest: object, *, dry_run: bool) -> web.Response:
        outcome = await self.recorder.apply(manifest, dry_run=dry_run)
        if isinstance(outcome, Refused):
            return refusal(outcome)
        if outcome.written:
            await self.console.folded(outcome.written, READ_YOUR_WRITE)
        return applied(outcome)

    async def delete(self, caller: Caller, info: KindInfo, key: Key) -> web.Response:
        outcome = await self.recorder.delete(key)
        if outcome.seq is not None:
            await self.console.folded(outcome.seq, READ_YOUR_WRITE)
        return web.json_response({"kind": info.kind, "name": key.name, "action": "deleted" if outcome.found else "noop"})


def build_app(
    console_service: ConsoleService, token: str, console: console_web.Console | None = None, *, writes: Writes
) -> web.Application:
    """The API. `console.gate` says who may call it (the token or a session by default); `writes` is where changes
    go: `RecorderWrites` (the watcher in this process) or the cluster console's `KubeWrites` (Kubernetes, as the user)."""
    folded = console_service  # what the routes read: the console's own fold
    console = console or console_web.Console()
    gate = console.gate = console.gate or TokenGate(token, console.logins, console.clock)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if request.path not in OPEN and not console_web.is_login(request.path):
                try:
                    request[CALLER] = await gate.caller(request)
                except Denied as denied:
                    if denied.status == 401 and (request.path == "/ui" or request.path.startswith("/ui/")):
                        if isinstance(gate, KubeGate):
                            return console_web.login_form("You are not logged in, or your session ended.", status=401)
                        return console_web.logged_out("You are not logged in, or your session ended.")
                    return error(denied.status, denied.message, code="unauthorized" if denied.status == 401 else "forbidden")
            return await handler(request)
        except Denied as denied:  # a session whose Kubernetes token lapsed, found out by a route
            return error(denied.status, denied.message, code="unauthorized" if denied.status == 401 else "forbidden")
        except KubeRefused as refused:  # the cluster console's access review failed (the API server's 429, 5xx, timeout)
            return error(502, f"cannot check your access with Kubernetes: {refused.message}", code="bad_gateway")
        except web.HTTPException as exc:
            if exc.status == 413:
                return error(413, f"manifest larger than {MAX_BODY // (1024 * 1024)} MiB", code="too_large")
            if exc.status == 405:
                return error(405, f"{request.method} is not allowed on {request.path}", code="method_not_allowed")
            if exc.status == 404:
                return error(404, f"no route {request.path}", code="not_found")
            raise
        except Exception:  # a bug, not bad input: say so without internals
            log.exception("request failed", extra={"path": request.path})
            return error(500, "internal error; see the server log", code="internal")

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)

    def kind_or_404(request: web.Request) -> KindInfo | web.Response:
        return known_kind(request, error)

    async def apply(request: web.Request) -> web.Response:
        dry_run = request.query.get("dry-run", request.query.get("dryRun", "")).lower() in ("true", "1", "all")
        raw = await request.read()
        content_type = request.content_type if request.headers.get("Content-Type") else ""
        if content_type in YAML_TYPES:
            is_yaml = True
        elif content_type in JSON_TYPES or content_type.endswith("+json"):
            is_yaml = False
        else:
            return error(
                415,
                f"unsupported content type {content_type!r}; send application/json or application/yaml",
                code="unsupported_media_type",
            )
        try:
            # A big body is read off the event loop: the loop also answers /healthz and every other client.
            documents = await asyncio.to_thread(read, raw, is_yaml) if len(raw) > INLINE_PARSE else read(raw, is_yaml)
        except DocumentError as exc:
            if exc.status == 413:
                return error(413, f"manifest too large: {exc}", code="too_large", path="")
            return error(400, f"cannot parse the manifest: {exc}", code="invalid_manifest", path="")
        if len(documents) != 1:
            return error(400, f"one manifest per request (got {len(documents)})", code="invalid_manifest", path="")
        return await writes.apply(request[CALLER], documents[0], dry_run=dry_run)

    async def kinds(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "kinds": [
                    {
                        "kind": i.kind,
                        "api_version": i.api_version,
                        "summary_condition_types": list(i.summary_condition_types),
                        "namespaced": i.namespaced,
                        "plural": i.plural,
                        "short_names": list(i.short_names),
                    }
                    for i in KINDS.values()
                ]
            }
        )

    async def list_kind(request: web.Request) -> web.Response:
        info = kind_or_404(request)
        if isinstance(info, web.Response):
            return info
        wanted = request.query.get("namespace")
        states = [s for s in folded.state.resources.of_kind(info.kind) if not wanted or s.key.namespace == wanted]
        shown = await console_web.visible(request, gate, info, {s.key.namespace for s in states})
        items = [folded.state.view(s) for s in states if s.key.namespace in shown]
        return web.json_response({"kind": info.kind, "items": items})

    async def find(request: web.Request) -> tuple[KindInfo, ResourceState] | web.Response:
        return await readable_resource(request, gate, error, folded.state.resources)

    async def get_one(request: web.Request) -> web.Response:
        found = await find(request)
        return found if isinstance(found, web.Response) else web.json_response(folded.state.view(found[1]))

    async def get_status(request: web.Request) -> web.Response:
        found = await find(request)
        return found if isinstance(found, web.Response) else web.json_response(folded.state.status_view(found[1]))

    async def get_objects(request: web.Request) -> web.Response:
        found = await find(request)
        if isinstance(found, web.Response):
            return found
        state = found[1]
        objects = rendered.recorded_objects(state.decisions)
        return web.json_response({"kind": state.key.kind, "name": state.key.name, "objects": objects})

    async def delete(request: web.Request) -> web.Response:
        info = kind_or_404(request)
        if isinstance(info, web.Response):
            return info
        return await writes.delete(request[CALLER], info, requested_key(request, info))

    async def healthz(request: web.Request) -> web.Response:
        # Without its NATS connection the API can only fail: say so, so a supervisor restarts us.
        runner = folded.runner
        ok = runner is not None and runner.nc.is_connected
        return web.json_response({"ok": ok}, status=200 if ok else 503)

    app.router.add_post("/v1/apply", apply)
    app.router.add_get("/v1/kinds", kinds)
    app.router.add_get("/v1/kinds/{kind}", list_kind)
    app.router.add_get("/v1/kinds/{kind}/{name}", get_one)
    app.router.add_get("/v1/kinds/{kind}/{name}/status", get_status)
    app.router.add_get("/v1/kinds/{kind}/{name}/objects", get_objects)
    app.router.add_delete("/v1/kinds/{kind}/{name}", delete)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics.handle)
    console_web.add_routes(app, folded, console, error)
    return app


async def serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start the API; returns the runner (to clean up) and the port it listens on."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server: Any = site._server
    bound = server.sockets[0].getsockname()[1] if server is not None and server.sockets else port
    return runner, int(bound)


@dataclass
class FrontDoor:
    """The front door of one process: the console service (its fold), its runner, and the app to serve."""

    service: ConsoleService
    runner: Runner
    app: web.Application


def standalone(nc: Client, recorder: Recorder, token: str, pages: console_web.Console, settings: RunnerSettings | None = None) -> FrontDoor:
    """`jetway up`'s front door: its own fold of the stream, changes recorded by `recorder` (the watcher in this
    process). The runner is the caller's to start with the others; the app answers once it has rebuilt."""
    service = ConsoleService()
    runner = Runner(service, nc, settings)
    service.runner = runner
    return FrontDoor(service, runner, build_app(service, token, pages, writes=RecorderWrites(recorder, service)))
