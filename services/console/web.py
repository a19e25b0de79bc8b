"""The console's routes on the apply API's aiohttp app (services/console/api.py `build_app` adds them).

    GET  /ui/, /ui/{file}                           the pages (session cookie or bearer token)
    GET  /ui/login?code=CODE                        a one-time code for a session cookie, then /ui/ (no auth)
    POST /v1/console/codes                          a fresh one-time login code: `jetway console` (bearer token only)
    POST /v1/console/logout                         ends the session of the cookie sent
    GET  /v1/console/info                           the router's URL and what the console relays
    GET  /v1/console/models                         the router's GET /v1/models, relayed
    POST /v1/console/chat                           the router's POST /v1/chat/completions, relayed as it streams
    GET  /v1/watch?kind=KIND[&namespace=NS&name=N]  Server-Sent Events: a snapshot of the kind, then each change
    GET  /v1/kinds/{kind}/{name}/history            events (?after=SEQ&limit=N), the state (?until=SEQ), + diff (&since=SEQ)
    GET  /v1/console/events/{id}[?before=SEQ]       where an event lives: {id, kind, namespace, name, seq, facet, type} (events.py)
    GET  /v1/console/rendered/{kind}/{name}         the recorded objects as `jetway render KIND/NAME` prints them (rendered.py)
    GET  /v1/console/discovery                      what the cluster serves, by CRD name (providers' health checks)
    GET  /v1/console/router-figures                 the router's live figures per member and per model (figures.py)
    GET  /v1/console/routing?model=M[&limit=N]      a model's latest routing decisions, newest first (routing.py)

The playground's chat is relayed by the API rather than sent by the browser to the router: the router
stays one origin with no CORS to get right, and a chat from the console needs the console's session
like any other call. The router sees an ordinary client on 127.0.0.1 (with the client key the user
typed, when client keys are required).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from contracts.events import Envelope
from contracts.kinds import KINDS, KindInfo, resolve_kind
from contracts.subjects import Key
from runtime.eventstore import Item
from services.console import events, figures, rendered, routing, timeline
from services.console.access import CALLER, Denied, Fail, Gate, KubeGate, readable
from services.console.handlers import ConsoleService
from services.console.kubeuser import KubeRefused, usable_token
from services.console.logins import COOKIE, Logins

log = logging.getLogger("jetway.console")
STATIC = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".svg": "image/svg+xml"}
LOGIN_PATH = "/ui/login"
LOGIN_CHECK = "jetway_login_check"  # the token form's anti-CSRF value (login_form)
LOGIN_STYLE = "/ui/login.css"  # the stylesheet, for the pages a browser sees before it is logged in: open, like the form
HEARTBEAT = 15.0  # seconds between SSE comments: a closed browser tab is noticed by the next write
RELAY_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=300)
# The pages load nothing but their own files and call nothing but this origin.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LOGGED_OUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Jetway console: log in</title><link rel="stylesheet" href="/ui/login.css"></head>
<body><main class="login"><h1>Jetway console</h1><p>{reason}</p>
<p>Run <code>jetway console</code> on the machine running <code>jetway up</code> for a one-time login link.</p></main></body></html>
"""


@dataclass
class Console:
    """What the console's routes share: the logins, the router to relay to (set once it listens), the open watches."""

    logins: Logins = field(default_factory=Logins)
    router_url: str | None = None  # ".../v1", as jetway.json has it
    clock: Callable[[], float] = time.monotonic
    watches: set[asyncio.Queue[Key | None]] = field(default_factory=set)
    recorder: figures.Counters | None = None  # the router's counters in this process (`jetway up` gives them)
    samples: list[figures.Sample] = field(default_factory=list)  # the router's recent counts: rates are between them
    gate: Gate | None = None  # who may call: the API token by default (services/console/access.py), KubeGate in a cluster
    scrape: Callable[[], Awaitable[figures.Sample]] | None = None  # a cluster: the routers' /metrics, read (main.py)

    def login_url(self, api_url: str) -> str:
        return f"{api_url}{LOGIN_PATH}?code={self.logins.issue(self.clock())}"


LOGIN_FORM = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Jetway console: log in</title><link rel="stylesheet" href="/ui/login.css"></head>
<body><main class="login"><h1>Jetway console</h1>
<p>Log in with your own Kubernetes token: the console reads and changes only what it lets you.
<code>kubectl create token NAME -n NAMESPACE</code> makes one for a ServiceAccount.</p>
<p role="alert">{reason}</p>
<form method="post" action="/ui/login"><label for="token">Kubernetes token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<input type="hidden" name="check" value="{check}">
<button type="submit">Log in</button></form></main></body></html>
"""


def login_form(reason: str, status: int = 200) -> web.Response:
    """The token form, with a fresh check value in a field and in a cookie only this form's post sends back."""
    check = secrets.token_urlsafe(24)
    text = LOGIN_FORM.format(reason=html.escape(reason), check=check)
    response = web.Response(status=status, text=text, content_type="text/html", headers=PAGE_HEADERS)
    response.set_cookie(LOGIN_CHECK, check, max_age=600, path=LOGIN_PATH, httponly=True, samesite="Strict")
    return response


def same_origin(request: web.Request) -> bool:
    """Whether a form post comes from this console's own page. Browsers say so in `Sec-Fetch-Site`; the pages'
    `no-referrer` policy makes their `Origin` "null", so an Origin is compared only where it names a site."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin")
    return origin in (None, "null") or origin == f"{request.scheme}://{request.host}"


def is_login(path: str) -> bool:
    return path in (LOGIN_PATH, LOGIN_STYLE)


async def visible(request: web.Request, gate: Gate, info: KindInfo, namespaces: set[str], verb: str = "list") -> set[str]:
    """Of `namespaces`, those whose `info` resources the caller may list (or watch): all of them when it may everywhere."""
    caller = request[CALLER]
    if await gate.may(caller, verb, info, None):
        return namespaces
    return {ns for ns in namespaces if ns and await gate.may(caller, verb, info, ns)}


def logged_out(reason: str, status: int = 401) -> web.Response:
    return web.Response(status=status, text=LOGGED_OUT.format(reason=reason), content_type="text/html", headers=PAGE_HEADERS)


def static_files() -> dict[str, Path]:
    """The files under static/ by name: only these are served (no path from a request reaches the disk)."""
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in CONTENT_TYPES}


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


def add_routes(app: web.Application, folded: ConsoleService, console: Console, fail: Fail) -> None:
    files = static_files()
    gate = console.gate
    assert gate is not None, "the API sets the console's gate before adding its routes"
    relay: dict[str, aiohttp.ClientSession] = {}
    reads = asyncio.Semaphore(routing.CONCURRENT_READS)  # the routing records' readers at once (routing_decisions)

    async def page(request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("file") or "index.html"
        path = files.get(name)
        if path is None:
            return fail(404, f"no console file {name!r}", code="not_found", path="file")
        return web.FileResponse(path, headers={**PAGE_HEADERS, "Content-Type": CONTENT_TYPES[path.suffix]})

    async def login_style(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(files["style.css"], headers={**PAGE_HEADERS, "Content-Type": CONTENT_TYPES[".css"]})

    async def to_ui(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    def cookie_name() -> str:
        return console.gate.cookie if isinstance(console.gate, KubeGate) else COOKIE

    def signed_in(session: str) -> web.HTTPFound:
        response = web.HTTPFound("/ui/", headers={"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"})
        max_age = int(console.logins.session_ttl)
        response.set_cookie(cookie_name(), session, max_age=max_age, path="/", httponly=True, samesite="Strict")
        response.del_cookie(LOGIN_CHECK, path=LOGIN_PATH)
        return response

    async def login(request: web.Request) -> web.Response:
        if isinstance(console.gate, KubeGate):
            return await kube_login(request, console.gate)
        session = console.logins.redeem(request.query.get("code", ""), console.clock())
        if session is None:
            return logged_out("This login link is not valid: it was used already, it expired (after 10 minutes), or Jetway restarted.")
        log.info("console login")  # never the code nor the session
        raise signed_in(session)

    async def kube_login(request: web.Request, gate: KubeGate) -> web.Response:
        """A cluster: a form for the user's Kubernetes token (GET), and the token checked by the API server (POST)."""
        if request.method != "POST":
            return login_form("")
        form = await request.post()
        # Login CSRF (another site's form logging this browser in as someone else): the form's check value must match
        # its cookie, which no other site can read or send (SameSite=Strict); and the browser must call it same-origin.
        check = str(form.get("check", ""))
        if not same_origin(request) or not check or not hmac.compare_digest(check, request.cookies.get(LOGIN_CHECK, "")):
            return login_form("This login form expired or came from another site's page; log in again here.", status=403)
        token = str(form.get("token", "")).strip()
        if not token:
            return login_form("Paste a Kubernetes token (for example from `kubectl create token`).", status=400)
        if not usable_token(token):
            return login_form("A Kubernetes token is one line of printable characters, without spaces.", status=400)
        try:
            session, user = await gate.login(token)
        except KubeRefused as exc:
            reason = "the Kubernetes API server does not take this token" if exc.status == 401 else exc.message
            return login_form(f"Not logged in: {reason}.", status=401 if exc.status == 401 else 502)
        log.info("console login", extra={"user": user})  # the user's name, never the token or the session
        raise signed_in(session)

    async def codes(request: web.Request) -> web.Response:
        if request[CALLER].via != "token" or isinstance(console.gate, KubeGate):
            return fail(403, "login codes are issued for the bearer token only (run `jetway console`)", code="forbidden")
        api_url = f"{request.scheme}://{request.host}"
        return web.json_response({"url": console.login_url(api_url), "expires_in": int(console.logins.code_ttl)})

    async def logout(request: web.Request) -> web.Response:
        if isinstance(console.gate, KubeGate):
            console.gate.end(request.cookies.get(console.gate.cookie))
        else:
            console.logins.end(request.cookies.get(COOKIE))
        response = web.json_response({"logged_out": True})
        response.del_cookie(cookie_name(), path="/")
        return response

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"router_url": console.router_url, "relays": ["/v1/console/models", "/v1/console/chat"]})

    def router_or_503() -> str | web.Response:
        if console.router_url is None or "session" not in relay:
            return fail(503, "the router is not listening yet; try again shortly", code="unavailable")
        return console.router_url

    def router_headers(request: web.Request) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = request.headers.get("x-jetway-client-key", "").strip()
        if key:  # client keys required: the key the user typed in the playground, for the router to judge
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def models(request: web.Request) -> web.Response:
        base = router_or_503()
        if isinstance(base, web.Response):
            return base
        try:
            async with relay["session"].get(f"{base}/models", headers=router_headers(request)) as upstream:
                return web.Response(status=upstream.status, body=await upstream.read(), content_type="application/json")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return fail(502, f"the router at {base} did not answer: {type(exc).__name__}", code="bad_gateway")

    async def chat(request: web.Request) -> web.StreamResponse:
        base = router_or_503()
        if isinstance(base, web.Response):
            return base
        body = await request.read()
        try:
            async with relay["session"].post(f"{base}/chat/completions", data=body, headers=router_headers(request)) as upstream:
                headers = {"Content-Type": upstream.headers.get("Content-Type", "application/json"), "Cache-Control": "no-store"}
                for name in ("x-jetway-member", "x-jetway-route"):
                    if name in upstream.headers:
                        headers[name] = upstream.headers[name]
                response = web.StreamResponse(status=upstream.status, headers=headers)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (aiohttp.ClientError, TimeoutError) as exc:
            return fail(502, f"the router at {base} did not answer: {type(exc).__name__}", code="bad_gateway")

    async def router_figures(request: web.Request) -> web.Response:
        members = KINDS["InferencePoolMember"]
        if not await gate.may(request[CALLER], "list", members, None):  # figures name members of every namespace
            return fail(403, f"the router's figures need the right to list {members.plural} in every namespace", code="forbidden")
        last = console.samples[-1] if console.samples else None
        if console.scrape is not None and last is not None and console.clock() - last.at < figures.SPACING:
            now = last  # a cluster: several tabs polling share one scrape of the router pods a second
        elif console.scrape is not None:  # a cluster: the router pods' /metrics
            now = await console.scrape()
        elif console.recorder is not None:  # `jetway up`: the router's counters in this process
            now = figures.sample(console.recorder, console.clock())
        else:  # no router to read
            now = figures.Sample(console.clock())
        console.samples = figures.keep(console.samples, now)
        body = figures.figures(console.samples[0] if console.samples[0] is not now else None, now)
        return web.json_response({"router_url": console.router_url, "window": figures.WINDOW, **body})

    async def routing_decisions(request: web.Request) -> web.Response:
        """A model's latest routing decisions from the routing records' stream (routing.py)."""
        members = KINDS["InferencePoolMember"]
        if not await gate.may(request[CALLER], "list", members, None):  # decisions name members of every namespace
            return fail(403, f"the routing decisions need the right to list {members.plural} in every namespace", code="forbidden")
        try:
            model, limit = routing.query(request.query.get("model"), request.query.get("limit"))
        except ValueError as exc:
            return fail(400, str(exc), code="invalid_request", path=str(exc).split(":", 1)[0])
        runner = folded.runner
        if runner is None:
            return fail(503, "NATS is not connected yet; try again shortly", code="unavailable")
        try:
            body = await routing.recent(runner.nc, model, limit, reads=reads)
        except routing.Unreadable as exc:
            return fail(503, f"{exc}; try again shortly", code="unavailable")
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    async def discovery(request: web.Request) -> web.Response:
        """The last ApisDiscovered as CRD names ("plural.group"), for the providers' health checks; in
        standalone mode nothing is discovered: `checked` is false."""
        found = folded.state.discovered
        served = sorted({f"{r.split('/')[2]}.{r.split('/')[0]}" for r in found.resources if r.count("/") == 2}) if found else []
        return web.json_response({"checked": found is not None, "served": served})

    async def watch(request: web.Request) -> web.StreamResponse:
        info = resolve_kind(request.query.get("kind", ""))
        if info is None:
            given = request.query.get("kind", "")
            return fail(400, f"kind: unknown kind {given!r} (known: {', '.join(KINDS)})", code="invalid_request", path="kind")
        namespace = request.query.get("namespace") or None
        name = request.query.get("name") or None  # one resource (a deployment's page): nothing about the others is sent
        changed: asyncio.Queue[Key | None] = asyncio.Queue()
        pending: set[Key] = set()  # a key waiting to be sent is not queued again: the queue stays as small as the kind

        def heard(envelope: Envelope) -> None:
            try:
                key = envelope.key
            except (KeyError, ValueError):  # a subject of no kind the API knows (the cluster's discovery)
                return
            wanted = (namespace is None or key.namespace == namespace) and (name is None or key.name == name)
            if key.kind == info.kind and wanted and key not in pending:
                pending.add(key)
                changed.put_nowait(key)

        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        folded.listeners.append(heard)  # before the snapshot: a change meanwhile is sent after it, never lost
        console.watches.add(changed)
        try:
            await response.prepare(request)
            states = [
                s
                for s in folded.state.resources.of_kind(info.kind)
                if (namespace is None or s.key.namespace == namespace) and (name is None or s.key.name == name)
            ]
            shown = await visible(request, gate, info, {s.key.namespace for s in states}, verb="watch")
            items = [folded.state.view(s) for s in states if s.key.namespace in shown]
            await response.write(sse("snapshot", {"kind": info.kind, "items": items}))
            while True:
                try:
                    key = await asyncio.wait_for(changed.get(), HEARTBEAT)
                except TimeoutError:
                    await response.write(b": still here\n\n")
                    continue
                if key is None:  # the API is stopping
                    break
                pending.discard(key)
                if not await gate.may(request[CALLER], "watch", info, key.namespace or None):
                    continue
                state = folded.state.resources.items.get(key)
                if state is None:
                    await response.write(sse("deleted", {"kind": key.kind, "namespace": key.namespace, "name": key.name}))
                else:
                    await response.write(sse("changed", folded.state.view(state)))
        except (ConnectionResetError, ConnectionError):
            pass  # the browser left
        except (Denied, KubeRefused) as exc:
            # The stream has begun: no other answer can be sent. Ending it makes the browser's EventSource come
            # back, and its new request gets the 401 (a lapsed token) or a 502 (the API server failed) on its own.
            log.info("console watch ended: %s", type(exc).__name__)
        finally:
            with contextlib.suppress(ValueError):
                folded.listeners.remove(heard)
            console.watches.discard(changed)
        return response

    async def history(request: web.Request) -> web.Response:
        found = await readable(request, gate, fail)
        if isinstance(found, web.Response):
            return found
        _, key = found
        try:
            limit = timeline.page_size(request.query.get("limit"))
            after = timeline.sequence("after", request.query.get("after"))
            until = timeline.sequence("until", request.query.get("until"))
            since = timeline.sequence("since", request.query.get("since"))
            if since is not None and until is None:
                raise ValueError("until: a diff needs both points, ?since=SEQ&until=SEQ")
        except ValueError as exc:
            return fail(400, str(exc), code="invalid_request", path=str(exc).split(":", 1)[0])
        runner = folded.runner
        if runner is None:
            return fail(503, "the event stream is not read yet; try again shortly", code="unavailable")
        if until is not None and since is not None:
            items = await runner.store.history(key, until_seq=max(since, until))
            return web.json_response({"kind": key.kind, "name": key.name, "until": until, **timeline.compare(items, key, since, until)})
        if until is not None:
            items = await runner.store.history(key, until_seq=until)
            return web.json_response({"kind": key.kind, "name": key.name, "until": until, "state": timeline.state_as_of(items, key)})
        page: list[Item] = []

        class Full(Exception):
            """Enough for a page: the scan stops here."""

        def keep(item: Item) -> None:
            if len(page) > limit:
                raise Full
            page.append(item)

        with contextlib.suppress(Full):
            await runner.store.scan(key.history_filter(), keep, since_seq=None if after is None else after + 1)
        if not page and after is None:
            return fail(404, f"no events about {key} (it never existed, or its history was purged)", code="not_found")
        more = len(page) > limit
        shown = page[:limit]
        return web.json_response(
            {
                "kind": key.kind,
                "name": key.name,
                "namespace": key.namespace or None,
                "events": [timeline.entry(i) for i in shown],
                "next_after": shown[-1].seq if more else None,
            }
        )

    async def event_at(request: web.Request) -> web.Response:
        """Where an event lives, by its id: a timeline's causation or correlation link, followed (events.py)."""
        try:
            event_id = events.event_id(request.match_info["id"])
            before = timeline.sequence("before", request.query.get("before"))
        except ValueError as exc:
            return fail(400, str(exc), code="invalid_request", path=str(exc).split(":", 1)[0])
        runner = folded.runner
        if runner is None:
            return fail(503, "the event stream is not read yet; try again shortly", code="unavailable")
        found = await events.locate(folded.index, runner.store, event_id, before=before)
        if isinstance(found, events.Missing):
            return fail(found.status, found.message, code=found.code)
        info = KINDS[found.key.kind]
        if not await gate.may(request[CALLER], "get", info, found.key.namespace or None):
            return fail(403, "you may not get the resource this event is about", code="forbidden")
        return web.json_response(found.body())

    async def open_relay(app: web.Application) -> None:
        relay["session"] = aiohttp.ClientSession(timeout=RELAY_TIMEOUT)

    async def stop_watches(app: web.Application) -> None:
        for queue in list(console.watches):
            queue.put_nowait(None)

    async def close_relay(app: web.Application) -> None:
        if "session" in relay:
            await relay.pop("session").close()

    app.on_startup.append(open_relay)
    app.on_shutdown.append(stop_watches)  # before aiohttp waits for handlers: open watches end at once
    app.on_cleanup.append(close_relay)
    app.router.add_get("/ui", to_ui)
    app.router.add_get("/ui/", page)
    app.router.add_get(LOGIN_PATH, login)
    app.router.add_post(LOGIN_PATH, login)
    app.router.add_get(LOGIN_STYLE, login_style)
    app.router.add_get("/ui/{file}", page)
    app.router.add_post("/v1/console/codes", codes)
    app.router.add_post("/v1/console/logout", logout)
    app.router.add_get("/v1/console/info", info)
    app.router.add_get("/v1/console/models", models)
    app.router.add_post("/v1/console/chat", chat)
    app.router.add_get("/v1/console/router-figures", router_figures)
    app.router.add_get("/v1/console/routing", routing_decisions)
    app.router.add_get("/v1/console/discovery", discovery)
    app.router.add_get("/v1/watch", watch)
    app.router.add_get("/v1/kinds/{kind}/{name}/history", history)
    app.router.add_get("/v1/console/events/{id}", event_at)
    app.router.add_get("/v1/console/rendered/{kind}/{name}", rendered.route(folded, gate, fail))  # `jetway render md/NAME`'s text
