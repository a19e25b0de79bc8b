"""The router's HTTP/1.1 server, apart from what it serves: connections, their limits, and the drain.

An asyncio protocol over httptools (the parser uvicorn uses): the router's cost is per-request overhead, so it
avoids a framework's (docs/router.md has the figures). It knows nothing of models, members or keys: each
request it reads whole is handed to a `Handler` (services/router/app.py's `Routes`), which answers through
the connection's `respond`, or `start`, `write` and `end` for an answer that streams.

- `Limits`: how long a client may take over each part of a request, and how many may be connected
- `Listener`: the connections of one server, one sweep a tick that closes those past their deadline, the drain
- `HttpConnection`: one client connection: parse, bound, queue pipelined requests, write answers, refuse
- `listen`: bind a port and serve a handler there (`Serving`)
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from http import HTTPStatus
from typing import Protocol

import httptools

from services.router.apis import openai_error

log = logging.getLogger("jetway.router")
MAX_BODY = 16 * 1024 * 1024
MAX_HEAD = 64 * 1024  # request line and headers (httptools keeps a header whole until it ends)
LINGER = 2.0  # after a refusal, read and drop what the client still sends, so it gets the answer, not a reset
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


@dataclass
class Request:
    method: str
    path: str
    headers: dict[bytes, bytes]
    body: bytes
    keep_alive: bool


Handler = Callable[["HttpConnection", Request], Awaitable[None]]  # answers one request on its connection


class Feed(Protocol):
    """What feeds the answer in progress (an upstream connection, services/router/upstream.py): resumed when the
    client drains what was written, its transport closed when the client leaves."""

    transport: asyncio.Transport | None

    def resume(self) -> None: ...


class Listener:
    """The connections of one server, their limit, and one sweep a tick that closes those past
    their deadline. Connections keep a deadline (a float) rather than a timer each: arming and
    cancelling timers per request would cost the hot path; the sweep costs one pass a tick."""

    def __init__(self, handler: Handler, limits: Limits) -> None:
        self.handler = handler
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


class HttpConnection(asyncio.Protocol):
    """One client connection: parse requests, run them one at a time, write responses.

    Pipelined requests are answered in order; a request that cannot be read (malformed, too
    large, too slow) is answered after those before it, and then the connection closes."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.handler = listener.handler
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
        self.status = 0  # the status of the answer in progress
        self.chunked = False
        self.keep_alive = True
        self.head_sent = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.upstream: Feed | None = None  # set while an upstream feeds the answer in progress
        self.on_lost: Callable[[], None] | None = None  # set while a request waits for a member (hold.py): the client left

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
        if self.on_lost is not None:
            self.on_lost()

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
                await self.handler(self, request)
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


async def serve(handler: Handler, host: str, port: int, *, limits: Limits | None = None) -> tuple[asyncio.Server, int]:
    serving = await listen(handler, host, port, limits=limits)
    return serving.server, serving.port


async def listen(handler: Handler, host: str, port: int, *, limits: Limits | None = None) -> Serving:
    """Serve `handler` on host:port (port 0: any free one, `Serving.port` says which)."""
    loop = asyncio.get_running_loop()
    listener = Listener(handler, limits or Limits())
    server = await loop.create_server(lambda: HttpConnection(listener), host, port, reuse_address=True, backlog=1024)
    listener.server = server
    bound = server.sockets[0].getsockname()[1]
    return Serving(server, listener, int(bound))
