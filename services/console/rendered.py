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
from typing import Any

from aiohttp import web

from contracts import yamlstream
from contracts.events import Envelope
from services.console.access import Fail, Gate, readable_resource
from services.console.handlers import ConsoleService

CONTENT_TYPE = "application/yaml"


def recorded_objects(decisions: Mapping[str, Envelope]) -> dict[str, list[Any]]:
    """Each service's recorded objects (its latest decision's), by service name: what GET .../objects answers."""
    return {
        owner: list(getattr(envelope.event, "objects", ()) or ())
        for owner, envelope in sorted(decisions.items())
        if getattr(envelope.event, "objects", None)
    }


def route(folded: ConsoleService, gate: Gate, fail: Fail) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def rendered(request: web.Request) -> web.Response:
        found = await readable_resource(request, gate, fail, folded.state.resources)
        if isinstance(found, web.Response):
            return found
        info, state = found
        text = yamlstream.recorded(info.kind, state.key.name, recorded_objects(state.decisions))
        return web.Response(text=text, content_type=CONTENT_TYPE, charset="utf-8", headers={"Cache-Control": "no-store"})

    return rendered
