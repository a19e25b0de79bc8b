"""The OpenAI-compatible router over InferencePoolMembers.

    POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/audio/transcriptions,
         /v1/messages (Anthropic), /tokenize, /detokenize, /v1/rerank, /v1/score
                                         routed by the body's `model` (the form field for audio), streamed as sent
    GET  /v1/models                      models that some ready member serves (a client key's allowed ones)
    GET  /metrics                        Prometheus (services/router/metrics.py); not here when client keys are required
    GET  /v1/chat/agents/operator        supports_multi_conversation: AND over every member, read live

A request goes to a ready member (probed healthy for its current spec, not draining, not failed since its
last probe, advertising the model, accepting the API's format: services/router/apis.py), chosen by the
router's policy (services/router/policy.py; the `x-jetway-route` response header says which and why).
Errors are in the called API's shape: 400 malformed, 401/403 client keys, 404 unknown model or format,
400 over the context window (context_length_exceeded; estimated, the estimate stated), 429 over a key's limit, 503 when no member can
take it. A member that fails before answering is marked failed, re-probed, and the request retried once
on another member.

The HTTP server is an asyncio protocol over httptools (the parser uvicorn uses): the router's
cost is per-request overhead, so it avoids a framework's (docs/router.md has the figures).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools
import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from contracts.documents import DocumentError, load_json
from contracts.subjects import Key
from services.router import decide, echo, policy
from services.router.apis import APIS, Api, anthropic_error, boundary_of, form_field, openai_error
from services.router.apis import error as api_error
from services.router.keys import Admission, Gate, wants_anthropic_errors
from services.router.metrics import RECORDER, USAGE_TAIL, Recorder, usage
from services.router.projection import Member, Members
from services.router.signal import ClientTooSlow
from services.router.upstream import BeforeResponse, Connection, Endpoint, UpstreamError, UpstreamPool

log = logging.getLogger("jetway.router")
MAX_BODY = 16 * 1024 * 1024
MAX_HEAD = 64 * 1024  # request line and headers (httptools keeps a header whole until it ends)
LINGER = 2.0  # after a refusal, read and drop what the client still sends, so it gets the answer, not a reset
RESPONSE_TIMEOUT = 600.0  # a long generation may think for minutes before its first token
HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"proxy-connection", b"te", b"trailer", b"upgrade"}
FORWARDED_REQUEST_HEADERS = {b"accept", b"user-agent", b"x-request-id", b"openai-organization", b"anthropic-version", b"anthropic-beta"}
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


@dataclass(frozen=True)
class Limits:
    """How long a client may take over each part of a request, and how many may be connected.

    Flags of `jetway up` (`--router-header-timeout` ...) or JETWAY_ROUTER_* in the environment;
    docs/router.md has the table."""

    header_timeout: float = 10.0  # a connection's first request, or a request's first byte, to the end of its headers
    body_timeout: float = 60.0  # the end of the headers to the end of the body (16 MiB at ~2 Mbit/s)
    idle_timeout: float = 75.0  # a keep-alive connection with no request in progress
    max_connections: int = 4096  # past it a new connection gets a 503 and is closed
    drain_timeout: float = 30.0  # on SIGTERM: how long requests and streams in progress may go on (Listener.drain)

    ENV = {
        "header_timeout": "JETWAY_ROUTER_HEADER_TIMEOUT",
        "body_timeout": "JETWAY_ROUTER_BODY_TIMEOUT",
        "idle_timeout": "JETWAY_ROUTER_IDLE_TIMEOUT",
        "max_connections": "JETWAY_ROUTER_MAX_CONNECTIONS",
        "drain_timeout": "JETWAY_ROUTER_DRAIN_TIMEOUT",
    }

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "idle_timeout", "max_connections", "drain_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"router {name.replace('_', ' ')} must be a positive number (got {value!r})")

    @classmethod
    def from_env(cls, env: Callable[[str], str | None], **given: float | int | None) -> Limits:
        """From JETWAY_ROUTER_* (`env` is os.environ.get or alike); values in `given` that are
        not None (command-line flags) win. ValueError names the variable at fault."""
        values: dict[str, float | int] = {}
        for f in fields(cls):
            variable = cls.ENV[f.name]
            chosen = given.get(f.name)
            if chosen is not None:
                values[f.name] = chosen
                continue
            text = env(variable)
            if text is None or text == "":
                continue
            try:
                number: float | int = int(text) if f.name == "max_connections" else float(text)
            except ValueError:
                raise ValueError(f"{variable} must be a {'whole ' if f.name == 'max_connections' else ''}number (got {text!r})") from None
            if not (math.isfinite(number) and number > 0):
                raise ValueError(f"{variable} must be positive (got {text!r})")
            values[f.name] = number
        return cls(**values)  # type: ignore[arg-type]


class Listener:
    """The connections of one server, their limit, and one sweep a tick that closes those past
    their deadline. Connections keep a deadline (a float) rather than a timer each: arming and
    cancelling timers per request would cost the hot path; the sweep costs one pass a tick."""

    def __init__(self, routes: Routes, limits: Limits) -> None:
        self.routes = routes
        self.limits = limits
        self.connections: set[HttpConnection] = set()
        self.loop = asyncio.get_running_loop()
        self.now = self.loop.time()  # the coarse clock deadlines are set by, moved by each sweep
        self.tick = min(1.0, limits.header_timeout / 4, limits.body_timeout / 4, limits.idle_timeout / 4)
        self.server: asyncio.Server | None = None
        self.draining = False
        self.handle = self.loop.call_later(self.tick, self._sweep)

    async def drain(self, grace: float, hurry: asyncio.Event | None = None) -> int:
        """Stop accepting, let requests in progress (streams too) finish for up to `grace` seconds, then close every
        connection. Idle keep-alive connections close at once; a busy one after its answer. Returns how many
        requests were cut off at the end of the grace."""
        self.draining = True
        if self.server is not None:
            self.server.close()
        for connection in [c for c in self.connections if not c.busy]:
            connection.close()
        deadline = self.loop.time() + grace
        while any(c.busy for c in self.connections) and self.loop.time() < deadline and not (hurry and hurry.is_set()):
            await asyncio.sleep(0.05)  # polled: the wait ends with the last answer, or the grace
        cut = [c for c in self.connections if c.busy]
        for connection in list(self.connections):
            connection.abort(hard=True)
        return len(cut)

    def _sweep(self) -> None:
        self.now = now = self.loop.time()
        for connection in [c for c in self.connections if c.deadline <= now and not c.busy]:
            connection.timed_out()
        if self.server is not None and not self.server.is_serving() and not self.connections:
            return  # closed and empty: no more ticks
        self.handle = self.loop.call_later(self.tick, self._sweep)


IDLE, HEADERS, BODY, LINGERING = 0, 1, 2, 3


class _Refuse(Exception):
    """Raised in a parser callback to stop parsing; the connection's `refusal` says the answer."""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[bytes, bytes]
    body: bytes
    keep_alive: bool


@dataclass
class Routes:
    """What the router needs from the router service, and nothing more."""

    members: Members
    credentials: Callable[[Key], tuple[Endpoint, str] | None]  # the endpoint and bearer token the last probe resolved
    on_failure: Callable[[Key, str], None]  # mark a member failed and ask for a probe
    signal: Any = None  # services.router.signal.SignalClient for operator-signal members
    pool: UpstreamPool = field(default_factory=UpstreamPool)
    settings: policy.Settings = field(default_factory=policy.Settings)
    keys: Gate | None = None  # None: any client may call (client keys off)
    turn: int = 0
    recorder: Recorder = RECORDER
    index: policy.PrefixIndex = field(init=False)
    sessions: policy.Sessions = field(default_factory=policy.Sessions)

    def __post_init__(self) -> None:
        self.index = policy.PrefixIndex(self.settings.index_blocks)


class HttpConnection(asyncio.Protocol):
    """One client connection: parse requests, run them one at a time, write responses.

    Pipelined requests are answered in order; a request that cannot be read (malformed, too
    large, too slow) is answered after those before it, and then the connection closes."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.routes = listener.routes
        self.limits = listener.limits
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()
        self.busy = False
        self.closed = False
        self.phase = IDLE
        self.deadline = listener.now + listener.limits.header_timeout  # a new connection owes its first request's headers
        self.head_bytes = 0
        self.parsed_head = 0  # bytes of request line and headers parsed so far
        self.in_read = self.begun_at = 0  # bytes parsed in the current read; where the current message began in it
        self.refusal: tuple[int, str] | None = None  # set once a request cannot be read: answered after the queue
        self._retry = False
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._size = 0
        # response state
        self.started = 0.0  # when the request in progress was read (loop time)
        self.status = 0  # the status of the answer in progress
        self.chunked = False
        self.keep_alive = True
        self.head_sent = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.upstream: Connection | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        connections = self.listener.connections
        connections.add(self)
        if len(connections) > self.limits.max_connections:
            self._refuse(503, f"the router has {self.limits.max_connections} connections open, its limit; try again shortly", retry=True)

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:
            return  # past a request that could not be read: nothing more is parsed
        before = self.phase
        self.in_read, self.begun_at = 0, 0
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported")
        except httptools.HttpParserError:
            self._refuse(*(self.refusal or (400, "malformed HTTP request")))
        else:
            if self.phase == HEADERS:  # headers still open after a whole read: bound them
                # a head begun in this read is what follows the messages before it (counted without their
                # framing, so this errs long by a few bytes a message, never short)
                self.head_bytes += len(data) if before == HEADERS else len(data) - self.begun_at
                if self.head_bytes > MAX_HEAD:
                    self._refuse(431, f"request headers larger than {MAX_HEAD // 1024} KiB")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.listener.connections.discard(self)
        self.writable.set()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()  # the client left: stop the generation it asked for

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()
        if self.upstream is not None:
            self.upstream.resume()

    # --- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.begun_at = self.in_read
        self._url, self._headers, self._body, self._size = b"", {}, [], 0
        self.phase, self.head_bytes, self.parsed_head = HEADERS, 0, 0
        self.deadline = min(self.deadline, self.listener.now + self.limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value
        self._count_head(len(name) + len(value) + 4)

    def _count_head(self, size: int) -> None:
        # Counted as parsed, so headers that come whole in the read that starts the request are bounded too
        # (data_received's count covers headers still open at the end of a read).
        self.in_read += size
        self.parsed_head += size
        if self.parsed_head > MAX_HEAD:
            self._stop(431, f"request headers larger than {MAX_HEAD // 1024} KiB")

    def on_headers_complete(self) -> None:
        self.phase = BODY
        self.deadline = self.listener.now + self.limits.body_timeout
        length = self._headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            self._stop(413, f"request body larger than {MAX_BODY // (1024 * 1024)} MiB")  # at once: no 100 Continue, no upload
        if self._headers.get(b"expect", b"").lower() == b"100-continue" and self.transport is not None and not self.busy:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self.in_read += len(body)
        self._size += len(body)
        if self._size > MAX_BODY:
            self._stop(413, f"request body larger than {MAX_BODY // (1024 * 1024)} MiB")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.phase = IDLE
        if b"upgrade" in self._headers and self.parser.should_upgrade():  # httptools drops its body: refuse it, in its turn
            self._stop(400, "protocol upgrades are not supported")
        path = self._url.split(b"?", 1)[0].decode("latin-1")
        request = Request(self.parser.get_method().decode(), path, self._headers, b"".join(self._body), self.parser.should_keep_alive())
        self.queue.append(request)
        if not self.busy:
            self.busy = True
            asyncio.get_running_loop().create_task(self._serve())
        elif self.transport is not None:
            # A second request while one is answered: bound what a pipelining client can queue. Reading
            # goes on while only one request is in flight, so a client that leaves is seen at once.
            self.transport.pause_reading()

    # --- serving ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        while self.queue and not self.closed:
            request = self.queue.popleft()
            if not self.queue and self.refusal is None and self.transport is not None:
                self.transport.resume_reading()  # only this one in flight now: read on, to see the client leave
            self.chunked, self.head_sent, self.keep_alive = False, False, request.keep_alive
            try:
                await route(self, request)
            except Exception:  # a bug: answer 500 if we still can, never hang the client
                log.exception("router request failed", extra={"path": request.path})
                if not self.head_sent:
                    self.respond(*openai_error(500, "internal router error", "server_error", "internal_error"))
                else:
                    self.abort()
            if not self.keep_alive or self.listener.draining:
                self.close()
                return
        self.busy = False
        if self.closed:
            return
        if self.refusal is not None:  # the requests before the unreadable one are answered: now it
            self._answer_refusal()
            return
        limits = self.limits
        self.deadline = self.listener.now + (
            limits.idle_timeout if self.phase == IDLE else limits.header_timeout if self.phase == HEADERS else limits.body_timeout
        )
        if self.transport is not None:
            self.transport.resume_reading()

    # --- refusing --------------------------------------------------------------------------

    def _stop(self, status: int, message: str) -> None:
        """From a parser callback: refuse, and stop the parser here (it raises HttpParserError)."""
        self.refusal = (status, message)
        raise _Refuse(message)

    def _refuse(self, status: int, message: str, *, retry: bool = False) -> None:
        """The connection cannot go on: answer `status` after the requests already queued, then close."""
        self.refusal = (status, message)
        self._retry = retry
        if self.transport is not None:
            self.transport.pause_reading()
        if not self.busy:
            self._answer_refusal()

    def _answer_refusal(self) -> None:
        assert self.refusal is not None
        status, message = self.refusal
        self.keep_alive = False
        kind = "server_error" if status >= 500 else "invalid_request_error"
        code = "too_many_connections" if status == 503 else "bad_request"
        extra = [(b"retry-after", b"1")] if self._retry else None
        self.respond(*openai_error(status, message, kind, code), extra=extra)
        if self.transport is None or self.closed or not self.transport.can_write_eof():
            self.close()
            return
        # Half-close and drop what still comes for a moment: closing with unread input would
        # reset the connection, and the client could lose the answer.
        self.transport.write_eof()
        self.phase = LINGERING
        self.deadline = self.listener.now + LINGER
        self.transport.resume_reading()

    def timed_out(self) -> None:
        """Called by the listener's sweep once the deadline of the current phase has passed."""
        if self.phase == IDLE:
            self.close()  # between requests: nothing to answer
        elif self.phase == HEADERS:
            self._refuse(408, f"request headers not received within {self.limits.header_timeout:g} s")
        elif self.phase == BODY:
            self._refuse(408, f"request body not received within {self.limits.body_timeout:g} s")
        else:
            self.close()

    # --- writing ---------------------------------------------------------------------------

    def start(self, status: int, headers: list[tuple[bytes, bytes]], length: int | None) -> None:
        self.status = status
        if self.listener.draining:
            self.keep_alive = False  # stopping: this answer is the connection's last
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))]
        lines += [name + b": " + value + b"\r\n" for name, value in headers]
        if length is None:
            self.chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        else:
            lines.append(b"content-length: %d\r\n" % length)
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        self.head_sent = True
        if self.transport is not None and not self.closed:
            self.transport.write(b"".join(lines))

    def write(self, chunk: bytes) -> None:
        if self.transport is None or self.closed or not chunk:
            return
        if self.chunked:
            self.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        else:
            self.transport.write(chunk)

    def end(self) -> None:
        if self.chunked and self.transport is not None and not self.closed:
            self.transport.write(b"0\r\n\r\n")

    def respond(
        self, status: int, body: bytes, content_type: bytes = b"application/json", extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.start(status, [(b"content-type", content_type), *(extra or [])], len(body))
        self.write(body)

    def abort(self, *, hard: bool = False) -> None:
        self.keep_alive = False
        if hard and self.transport is not None and not self.closed:
            self.transport.abort()  # what is buffered for the client is dropped, not flushed
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class Relay:
    """An upstream response passed to the client as it arrives: no buffering, with backpressure.

    On the way it notes what the metrics want, without copying: the status, when the first body bytes came
    and how many SSE events followed (a stream's time to first token and inter-token latency), and the last
    bytes, where the upstream's `usage` is."""

    def __init__(self, client: HttpConnection, member: str, route_header: bytes = b"") -> None:
        self.client = client
        self.member = member.encode()
        self.route_header = route_header
        self.connection: Connection | None = None
        self.pending: list[bytes] = []  # body chunks of the current read, written together by flush()
        self.streaming = False
        self.first_at = 0.0
        self.last_at = 0.0
        self.events = 0
        self.tail = (b"", b"")  # the last two chunks: `usage` may straddle them

    def attach(self, connection: Connection) -> None:
        self.connection = connection
        self.client.upstream = connection

    @property
    def writable(self) -> asyncio.Event:
        """Set while the client can take more (the operator-signal transport waits on it)."""
        return self.client.writable

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        if 300 <= status < 400:
            # A Location may point anywhere (169.254.169.254 included): the client must not follow
            # a member there, so the redirect is an error of the member's and its body is dropped.
            log.warning("member answered a redirect", extra={"member": self.member.decode(), "status": status})
            self.body = self._drop  # type: ignore[method-assign]
            message = (
                f"member {self.member.decode()!r} answered {status} (a redirect); Jetway does not follow or pass on redirects from members"
            )
            self.client.respond(*openai_error(502, message, "server_error", "upstream_redirect"), extra=[(b"x-jetway-member", self.member)])
            return
        kept = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP]
        length = next((int(v) for n, v in headers if n.lower() == b"content-length" and v.isdigit()), None)
        self.streaming = any(n.lower() == b"content-type" and v.startswith(b"text/event-stream") for n, v in headers)
        extra = (
            [(b"x-jetway-member", self.member), (b"x-jetway-route", self.route_header)]
            if self.route_header
            else [(b"x-jetway-member", self.member)]
        )
        self.client.start(status, [*kept, *extra], length)

    def body(self, chunk: bytes) -> None:
        self.pending.append(chunk)

    def _drop(self, chunk: bytes) -> None:
        pass

    def flush(self) -> None:
        """Write what one upstream read brought, in one write; the metrics' notes are taken here, once a read."""
        if self.pending:
            data = b"".join(self.pending) if len(self.pending) > 1 else self.pending[0]
            self.pending = []
            self.client.write(data)
            if self.streaming:
                self.last_at = now = self.client.listener.loop.time()
                if not self.first_at:
                    self.first_at = now
                self.events += data.count(b"data:")
            self.tail = (self.tail[1], data)
        if not self.client.writable.is_set() and self.connection is not None:
            self.connection.pause()  # the client reads slower than the upstream writes

    def done(self) -> None:
        self.flush()
        self.client.end()
        self.client.upstream = None

    def usage(self) -> tuple[int, int]:
        before, last = self.tail
        return usage(last if len(last) >= USAGE_TAIL else (before[-USAGE_TAIL:] + last))


async def route(client: HttpConnection, request: Request) -> None:
    routes: Routes = client.routes
    path, method = request.path.rstrip("/") or "/", request.method
    api = APIS.get(path)
    if api is not None:
        if method != "POST":
            client.respond(*api_error(api, 405, f"{path} accepts POST", "invalid_request_error", "method_not_allowed"))
            return
        await infer(client, request, api)
    elif path == "/v1/models" and method == "GET":
        admission = _admit(client, request, None, None)
        if admission is not None:
            client.respond(200, models(routes, admission, anthropic=wants_anthropic_errors(request.headers)))
    elif path.startswith("/v1/models/") and method == "GET":
        model = unquote(path[len("/v1/models/") :])
        admission = _admit(client, request, None, model)
        if admission is not None:
            client.respond(*one_model(routes, admission, model, anthropic=wants_anthropic_errors(request.headers)))
    elif path == "/metrics" and method == "GET" and routes.keys is None:
        exposition = await asyncio.to_thread(generate_latest, REGISTRY)  # a few ms for a large registry: not on the loop
        client.respond(200, exposition, CONTENT_TYPE_LATEST.encode())
    elif path == "/v1/chat/agents/operator" and method == "GET":
        supports = all((m.spec.traits.supportsMultiConversation if m.spec.traits else True) for m in routes.members.items.values())
        client.respond(200, _encode({"id": "operator", "supports_multi_conversation": supports}))
    elif path in ("/healthz", "/livez") and method == "GET":
        client.respond(200, b'{"ok":true}')
    elif path == "/readyz" and method == "GET":
        draining = client.listener.draining
        client.respond(503 if draining else 200, b'{"ok":false,"draining":true}' if draining else b'{"ok":true}')
    elif path.startswith("/v1/messages/") or wants_anthropic_errors(request.headers):  # Anthropic's client, Anthropic's shape
        client.respond(*anthropic_error(404, f"no route {method} {request.path}"))
    else:
        client.respond(*openai_error(404, f"no route {method} {request.path}", "invalid_request_error", "not_found"))


OPEN = Admission()  # client keys off: every request is admitted, as no one


def _admit(client: HttpConnection, request: Request, api: Api | None, model: str | None) -> Admission | None:
    """The client key's admission, or None once its refusal is answered (401, 404, 429)."""
    keys = client.routes.keys
    if keys is None:
        return OPEN
    admission = keys.admit(request.headers, model, client.listener.loop.time())
    refusal = admission.refusal
    if refusal is None:
        return admission
    extra = refusal.headers()
    if refusal.status == 401:
        extra.append((b"www-authenticate", b"Bearer"))
    anthropic = (api is not None and api.anthropic) or wants_anthropic_errors(request.headers)
    client.respond(refusal.status, refusal.body(anthropic=anthropic), extra=extra)
    if admission.name:
        client.routes.recorder.key(admission.name, refusal.status, 0)
    return None


def _served(routes: Routes, admission: Admission) -> dict[str, list[str]]:
    """The models a member serves now, each with its members, as far as the client's key may see them."""
    served: dict[str, list[str]] = {}
    for member in routes.members.items.values():
        traffic = routes.members.traffic_of(member.key)
        for model in member.declared:
            if decide.serves(member, model, traffic):
                served.setdefault(model, []).append(member.name)
    allowed = set(routes.keys.models(admission, list(served))) if routes.keys is not None else served
    return {model: sorted(names) for model, names in sorted(served.items()) if model in allowed}


EPOCH = "1970-01-01T00:00:00Z"  # no model has a creation time here: Anthropic's list wants one, OpenAI's a 0


def _model_object(model: str, members: list[str], *, anthropic: bool) -> dict[str, Any]:
    if anthropic:
        return {"type": "model", "id": model, "display_name": model, "created_at": EPOCH}
    return {"id": model, "object": "model", "created": 0, "owned_by": "jetway", "members": members}


def models(routes: Routes, admission: Admission, *, anthropic: bool = False) -> bytes:
    """GET /v1/models: OpenAI's list, or Anthropic's (`has_more`, `first_id`, `last_id`) to a client sending its headers."""
    data = [_model_object(model, names, anthropic=anthropic) for model, names in _served(routes, admission).items()]
    if anthropic:
        ids = [d["id"] for d in data]
        return _encode({"data": data, "has_more": False, "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None})
    return _encode({"object": "list", "data": data})


def one_model(routes: Routes, admission: Admission, model: str, *, anthropic: bool = False) -> tuple[int, bytes]:
    """GET /v1/models/{id} (both SDKs' `models.retrieve`): a model served now that the key may use, else a 404."""
    served = _served(routes, admission)
    if model not in served:
        message = f"the model {model!r} does not exist or is not served now (GET /v1/models lists them)"
        if anthropic:
            return anthropic_error(404, message)
        return openai_error(404, message, "invalid_request_error", "model_not_found", "model")
    return 200, _encode(_model_object(model, served[model], anthropic=anthropic))


def _bad(api: Api, message: str, param: str | None = None) -> tuple[int, bytes]:
    return api_error(api, 400, message, "invalid_request_error", "invalid_request", param)


def _read(api: Api, request: Request) -> tuple[str, dict[str, Any] | None] | tuple[int, bytes]:
    """The model a request names and its JSON body (None for a form), or the 400 to answer."""
    if api.multipart:
        boundary = boundary_of(request.headers.get(b"content-type", b""))
        if boundary is None:
            return _bad(api, f"{api.path} takes a multipart/form-data body")
        model = form_field(request.body, boundary, "model")
        if not model:
            return _bad(api, "the form field 'model' is required", "model")
        return model, None
    try:
        body = load_json(request.body) if request.body else None  # depth-bounded (contracts/documents.py)
    except DocumentError as exc:
        return _bad(api, f"cannot read the request body: {exc}")
    if not isinstance(body, dict):
        return _bad(api, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _bad(api, "'model' is required and must be a string", "model")
    if api.prompt_field == "messages" and not isinstance(body.get("messages"), list):
        return _bad(api, "'messages' is required and must be a list", "messages")
    if api.prompt_field == "prompt" and not isinstance(body.get("prompt"), str | list):
        return _bad(api, "'prompt' is required and must be a string or a list", "prompt")
    return model, body


async def infer(client: HttpConnection, request: Request, api: Api) -> None:
    client.started = started = client.listener.loop.time()
    read = _read(api, request)
    if isinstance(read[0], int):
        client.respond(*read)
        return
    model, body = read
    admission = _admit(client, request, api, model)
    if admission is None:
        return
    member_name, tokens = "", 0
    try:
        member_name, tokens = await _dispatch(client, request, api, model, body)
    finally:
        routes = client.routes
        routes.recorder.answered(model, member_name, api.path, client.status, client.listener.loop.time() - started)
        if admission.name:
            if not api.generates:
                tokens = 0  # counting tokens spends none
            elif not tokens and body is not None and api.prompt_field is not None and client.status == 200:
                tokens = decide.estimate(body, api.prompt_field == "messages").total  # no `usage` reported: the estimate counts
            routes.recorder.key(admission.name, client.status, tokens)
            if routes.keys is not None:
                routes.keys.spend(admission, tokens, client.listener.loop.time())


async def _dispatch(client: HttpConnection, request: Request, api: Api, model: str, body: dict[str, Any] | None) -> tuple[str, int]:
    """Choose a member and forward; (the member that answered, the tokens its `usage` reported)."""
    routes = client.routes
    found = decide.candidates(routes.members, model, api.format)
    if not found.declared:
        message = f"the model {model!r} does not exist (no member declares it; GET /v1/models lists them)"
        client.respond(*api_error(api, 404, message, "invalid_request_error", "model_not_found", "model"))
        return "", 0
    if not found.accepted:
        message = f"no member that serves {model!r} accepts {api.path} (the {api.format} API format; docs/router.md, API formats)"
        client.respond(*api_error(api, 404, message, "invalid_request_error", "unsupported_api", "model"))
        return "", 0
    fitting = found.ready
    if api.generates and api.prompt_field is not None and body is not None and any(m.window(model) for m in found.ready):
        # estimated only when some member states a window: the estimate walks every message
        chat = api.prompt_field == "messages"
        needed = decide.estimate(body, chat)
        fitting = [m for m in found.ready if decide.fits(m, model, needed)]
        if found.ready and not fitting:
            windows = [w for m in found.ready if (w := m.window(model))]
            message = decide.too_large_message(model, needed, windows)
            # a 400 as OpenAI's API and vLLM answer it (the SDKs raise BadRequestError; Anthropic's invalid_request_error)
            client.respond(*api_error(api, 400, message, "invalid_request_error", "context_length_exceeded", api.prompt_field))
            return "", 0
    settings = routes.settings
    hashes: list[int] | None = None  # the prompt's block hashes, once more than one member could take it
    home: int | None = None
    session = _session(request, body)
    tried: set[Key] = set()
    last_error = "no member is ready (all unhealthy, draining or not yet probed)"
    for attempt in range(2):
        ready = [m for m in fitting if m.key not in tried]
        if not ready:
            break
        if attempt:
            routes.recorder.retried(model)
        if len(ready) == 1:  # nothing to choose: no hashing, no index, no session to keep
            member, choice = ready[0], ONLY
            routes.recorder.chose(settings.policy, "only")
        else:
            if hashes is None:
                text = policy.prompt_text(body) if settings.policy == policy.PREFIX_CACHE and body is not None else ""
                hashes = policy.block_hashes(text, settings.block_chars, settings.max_blocks) if text else []
                home = policy.home_of(text, settings.block_chars) if hashes else None
            member, choice = _choose(routes, ready, hashes, session, home)
        tried.add(member.key)
        traffic = routes.members.traffic_of(member.key)
        traffic.outstanding += 1
        try:
            header = ONLY_HEADERS[settings.policy] if choice is ONLY else choice.header(settings.policy)
            relay = await forward(client, request, member, body, model, api, header)
            if relay is None:
                return member.name, 0
            prompt, completion = relay.usage()
            if prompt or completion:
                routes.recorder.used(model, member.name, prompt, completion)
            if relay.first_at:
                routes.recorder.stream(model, member.name, relay.first_at - client.started, relay.events, relay.last_at - relay.first_at)
            return member.name, prompt + completion
        except BeforeResponse as exc:
            last_error = f"member {member.name}: {exc}"
            if not client.closed:
                routes.on_failure(member.key, str(exc))
        except ClientTooSlow as exc:  # the client's doing, not the member's: drop what waits for it
            log.warning("client dropped: %s", exc, extra={"member": member.name})
            client.abort(hard=True)
            return member.name, 0
        except UpstreamError as exc:  # failed after the client got bytes: nothing to retry
            if not client.closed:  # a client that left closed the upstream itself: not the member's failure
                routes.on_failure(member.key, str(exc))
            client.abort()
            return member.name, 0
        finally:
            traffic.outstanding -= 1
    message = f"no member can take a request for {model!r} now: {last_error}"
    routes.recorder.refused(model)
    client.respond(*api_error(api, 503, message, "server_error", "upstream_unavailable"), extra=[(b"retry-after", b"1")])
    return "", 0


ONLY = policy.Choice(0, "only")  # the one member ready for the model
ONLY_HEADERS = {name: ONLY.header(name) for name in policy.POLICIES}


def _session(request: Request, body: dict[str, Any] | None) -> str | None:
    """A session to keep on one member: `x-session-id`, else the OpenAI `user` field."""
    header = request.headers.get(b"x-session-id")
    if header:
        return header.decode("latin-1")
    user = body.get("user") if body is not None else None
    return user if isinstance(user, str) and user else None


def _choose(routes: Routes, ready: list[Member], hashes: list[int], session: str | None, home: int | None) -> tuple[Member, policy.Choice]:
    traffic = routes.members.traffic
    matched = routes.index.matched(hashes, [m.key for m in ready]) if hashes else [0] * len(ready)
    views = []
    for member, blocks in zip(ready, matched, strict=True):
        live = traffic.get(member.key)
        load = live.load if live is not None else None
        views.append(
            policy.View(
                outstanding=live.outstanding if live is not None else 0,
                waiting=load.waiting if load is not None else 0,
                kv=(load.kv or 0.0) if load is not None else 0.0,
                saturated=decide.saturated(member),
                matched=blocks,
            )
        )
    held = routes.sessions.get(session) if session else None
    index = policy.sticky(views, [m.key for m in ready], held)
    if index is not None:
        blocks = len(hashes)
        choice = policy.Choice(index, "session", prefix=views[index].matched / blocks if blocks else 0.0)
    else:
        choice = policy.choose(routes.settings, views, len(hashes), routes.turn, home)
        routes.turn += 1
    member = ready[choice.index]
    if hashes:
        routes.index.record(hashes, member.key)
    if session:
        routes.sessions.put(session, member.key)
    routes.recorder.chose(routes.settings.policy, choice.reason)
    return member, choice


async def forward(
    client: HttpConnection, request: Request, member: Member, body: dict[str, Any] | None, model: str, api: Api, route_header: bytes
) -> Relay | None:
    """Send the request to `member` and relay its answer; the Relay (None for an echo member's own answer)."""
    routes = client.routes
    name = member.name.encode()
    if member.spec.backend == "echo":
        chat = api.prompt_field == "messages"
        assert body is not None  # echo accepts openai-chat only: a JSON body
        found = echo.problem(body, chat)
        if found:
            client.respond(*_bad(api, *found))
            return None
        extra = [(b"x-jetway-member", name), (b"x-jetway-route", route_header)]
        if body.get("stream") is True:
            events = echo.stream(body, model, chat)  # all of it before the head: nothing can fail after a 200
            client.start(200, [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *extra], None)
            for event in events:
                client.write(event)
            client.end()
        else:
            client.respond(200, echo.answer(body, model, chat), extra=extra)
        return None
    content_type = request.headers.get(b"content-type", b"application/json") if api.multipart else b"application/json"
    headers = [(b"content-type", content_type)] + [(n, v) for n, v in request.headers.items() if n in FORWARDED_REQUEST_HEADERS]
    relay = Relay(client, member.name, route_header)
    if member.spec.transport == "operator-signal":
        if routes.signal is None:
            raise BeforeResponse("operator-signal transport is not available")
        await routes.signal.forward(member.spec.computeOperatorRef or "", request.method, request.path, headers, request.body, relay)
        return relay
    resolved = routes.credentials(member.key)
    if resolved is None:
        raise BeforeResponse("not probed yet")
    endpoint, token = resolved
    if token:
        headers.append((b"authorization", b"Bearer " + token.encode()))
        if api.anthropic:
            headers.append((b"x-api-key", token.encode()))  # Anthropic-style servers read this one
    try:
        await routes.pool.send(endpoint, request.method, request.path, headers, request.body, relay, response_timeout=RESPONSE_TIMEOUT)
    finally:
        client.upstream = None
    return relay


@dataclass
class Serving:
    """A listening router: `drain()` on SIGTERM, `close()` to stop at once."""

    server: asyncio.Server
    listener: Listener
    port: int

    async def drain(self, hurry: asyncio.Event | None = None) -> int:
        """Drain for the limits' timeout, or until `hurry` is set (a second Ctrl-C)."""
        return await self.listener.drain(self.listener.limits.drain_timeout, hurry)

    def close(self) -> None:
        self.server.close()


async def serve(routes: Routes, host: str, port: int, *, limits: Limits | None = None) -> tuple[asyncio.Server, int]:
    serving = await listen(routes, host, port, limits=limits)
    return serving.server, serving.port


async def listen(routes: Routes, host: str, port: int, *, limits: Limits | None = None) -> Serving:
    loop = asyncio.get_running_loop()
    listener = Listener(routes, limits or Limits())
    server = await loop.create_server(lambda: HttpConnection(listener), host, port, reuse_address=True, backlog=1024)
    listener.server = server
    bound = server.sockets[0].getsockname()[1]
    return Serving(server, listener, int(bound))
