"""GET /v1/console/rendered/{kind}/{name}[?namespace=NS]: the objects Jetway's services recorded for a resource, as
the YAML text `jetway render KIND/NAME` prints, byte for byte (one formatter, `contracts/yamlstream.py`).

`jetway render md/NAME` reads `GET /v1/kinds/{kind}/{name}/objects` and formats it on the client; this route
formats the same objects (the latest decision of each service that recorded some, by service name, as that route
lists them) on the server, so the console's deployment page shows the text the command prints rather than a
look-alike of its own. And `jetway render -f` prints the same objects with the same formatter: for a deployment's
stored manifest (with its uid) its documents are these, byte for byte; only the comments differ (tests/console).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from contracts import yamlstream
from contracts.events import Envelope
from contracts.kinds import KINDS, resolve_kind
from contracts.subjects import Key
from services.console.access import CALLER, Gate
from services.watcher.handlers import WatcherService

if TYPE_CHECKING:
    from services.console.web import Fail

CONTENT_TYPE = "application/yaml"


def recorded_objects(decisions: Mapping[str, Envelope]) -> dict[str, list[Any]]:
    """Each service's recorded objects (its latest decision's), by service name: what GET .../objects answers."""
    return {
        owner: list(getattr(envelope.event, "objects", ()) or ())
        for owner, envelope in sorted(decisions.items())
        if getattr(envelope.event, "objects", None)
    }


def route(watcher: WatcherService, gate: Gate, fail: Fail) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def rendered(request: web.Request) -> web.Response:
        info = resolve_kind(request.match_info["kind"])
        if info is None:
            return fail(404, f"unknown kind {request.match_info['kind']!r} (known: {', '.join(KINDS)})", code="unknown_kind")
        key = Key(info.kind, (request.query.get("namespace") or "default") if info.namespaced else "", request.match_info["name"])
        if not await gate.may(request[CALLER], "get", info, key.namespace or None):
            where = f" in namespace {key.namespace!r}" if key.namespace else ""
            return fail(403, f"you may not get {info.plural}{where}", code="forbidden")
        state = watcher.state.resources.items.get(key)
        if state is None:
            where = f" in namespace {key.namespace!r}" if key.namespace else ""
            return fail(404, f"{info.kind}/{key.name} not found{where}", code="not_found")
        text = yamlstream.recorded(info.kind, key.name, recorded_objects(state.decisions))
        return web.Response(text=text, content_type=CONTENT_TYPE, charset="utf-8", headers={"Cache-Control": "no-store"})

    return rendered
