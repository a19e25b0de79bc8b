"""Talking HTTP/1.1 to upstreams: a keep-alive connection pool on asyncio + httptools.

Why not aiohttp's client: the router's whole cost is per-request overhead, and a protocol
that hands each body chunk straight to a sink (no queue, no copy, no await per chunk) is
several times cheaper (docs/router.md has the figures). What it guarantees:

- **Dial only what was declared, and only allowed addresses.** Host names are resolved here,
  every address is checked against the dial policy (link-local and metadata addresses refused
  unless allowed), and the connection goes to the checked address (no DNS rebinding window).
- TLS with the system roots plus a member's private CA bundle; SNI and certificate checks
  against the declared host name.
- No redirects: a 3xx is an answer, like any other.
- `BeforeResponse`: the request failed before the upstream answered, so nothing has reached
  the client and the router may retry elsewhere.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httptools

from contracts.rules.urls import refused_address

CONNECT_TIMEOUT = 5.0
MAX_IDLE_PER_ENDPOINT = 64
MAX_HEAD = 1024 * 1024  # status line and headers, and whatever body came in the same reads
MAX_FETCHED_BODY = 4 * 1024 * 1024  # a body kept in memory whole (probes); streamed answers are not kept


class UpstreamError(Exception):
    """An upstream failed; `message` is safe to show (no secret ever enters it)."""


class BeforeResponse(UpstreamError):
    """No response byte arrived: the request can be retried on another member."""


class ResponseTimedOut(UpstreamError):
    """No response head came within the time it was given (`Connection.send`)."""


class DialRefused(UpstreamError):
    """The dial policy refused every address of the host."""


class TooLarge(UpstreamError):
    """An answer to be kept whole was larger than its bound; the connection was closed at it."""


class Sink(Protocol):
    """Where an upstream response goes, as it arrives."""

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...
    def body(self, chunk: bytes) -> None: ...
    def done(self) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    """Where a member's URL points: scheme, host, port, path prefix, TLS settings."""

    host: str
    port: int
    tls: bool
    base_path: str
    ca_bundle: bytes | None = None

    @classmethod
    def parse(cls, url: str, ca_bundle: bytes | None = None) -> Endpoint:
        scheme, _, rest = url.partition("://")
        authority, slash, path = rest.partition("/")
        authority = authority.rsplit("@", 1)[-1]
        tls = scheme.lower() == "https"
        if authority.startswith("["):
            host = authority[1 : authority.index("]")]
            port_text = authority[authority.index("]") + 2 :]
        elif ":" in authority:
            host, port_text = authority.rsplit(":", 1)
        else:
            host, port_text = authority, ""
        base = ("/" + path if slash else "").rstrip("/")
        if base.endswith("/v1"):  # "http://gpu:8000/v1" means the same server as "http://gpu:8000"
            base = base[:-3]
        return cls(host, int(port_text) if port_text else (443 if tls else 80), tls, base, ca_bundle)

    @property
    def host_header(self) -> bytes:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port == default else f"{host}:{self.port}").encode()

    @property
    def pool_key(self) -> tuple[str, int, bool, str]:
        digest = hashlib.sha256(self.ca_bundle).hexdigest() if self.ca_bundle else ""
        return (self.host, self.port, self.tls, digest)


class _Buffered:
    """A sink that keeps the whole answer (the prober's, the compute agent's probes), up to `limit`
    bytes: past it the connection is closed, so an endless body costs a bounded read, not memory."""

    def __init__(self, limit: int) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.limit = limit
        self.size = 0
        self.connection: Connection | None = None

    def attach(self, connection: Connection) -> None:
        self.connection = connection

    def _too_large(self) -> None:
        self.chunks = []
        if self.connection is not None:
            self.connection._fail(TooLarge(f"answer larger than {self.limit} bytes"))

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.headers = status, headers
        length = next((v for n, v in headers if n.lower() == b"content-length"), b"")
        if length.isdigit() and int(length) > self.limit:
            self._too_large()

    def body(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            self._too_large()
        else:
            self.chunks.append(chunk)

    def done(self) -> None:
        pass

    @property
    def content(self) -> bytes:
        return b"".join(self.chunks)


@dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes


class Connection(asyncio.Protocol):
    """One keep-alive connection to one upstream, one request at a time."""

    def __init__(self, pool: UpstreamPool, key: tuple[str, int, bool, str]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: Sink | None = None
        self.finished: asyncio.Future[None] | None = None
        self.answered = False  # at least the status line arrived
        self.reusable = False
        self.closed = False
        self.used = 0
        self.head_bytes = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self.on_pause: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # the response's time limit, while one is awaited

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if not self.answered:  # httptools keeps a header until it ends: bound what it may keep
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD:
                self._fail(BeforeResponse(f"response headers larger than {MAX_HEAD // 1024} KiB"))
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # pragma: no cover - we never ask for upgrades
            self._fail(UpstreamError("upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"malformed response from upstream: {exc}"))
        # What one read brought goes out in one write: no waiting, fewer syscalls.
        flush = getattr(sink, "flush", None)
        if flush is not None:
            flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.finished is not None and not self.finished.done():
            reason = f"connection lost: {exc}" if exc else "upstream closed the connection"
            self._fail(UpstreamError(reason) if self.answered else BeforeResponse(reason))

    def eof_received(self) -> bool | None:
        return None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.answered = True
        self._disarm()  # the limit is the head's: a body, a stream, may take as long as the member does
        if self.sink is not None:
            self.sink.head(self.parser.get_status_code(), self._headers)

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink.body(body)

    def on_message_complete(self) -> None:
        self.reusable = self.parser.should_keep_alive()
        sink, finished = self.sink, self.finished
        self.sink, self.finished = None, None
        if sink is not None:
            sink.done()
        if finished is not None and not finished.done():
            finished.set_result(None)
        self.pool._release(self)

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        self._disarm()
        finished = self.finished
        self.sink, self.finished = None, None
        if self.transport is not None:
            self.transport.close()
        if finished is not None and not finished.done():
            finished.set_exception(exc)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(ResponseTimedOut())

    def pause(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def send(self, request: bytes, sink: Sink, timeout: float | None = None) -> asyncio.Future[None]:
        """Write one request; the future is done when its response is complete, or fails: ResponseTimedOut when its
        head has not come in `timeout` seconds (a timer of the connection's own, where `asyncio.wait_for` around the
        future cost a second future, two callbacks and a step of the loop more on every request, and limited the
        whole response: a stream longer than the limit was cut)."""
        assert self.transport is not None
        self.sink = sink
        self.answered = False
        self.head_bytes = 0
        self.reusable = False
        self.used += 1
        loop = asyncio.get_running_loop()
        self.finished = loop.create_future()
        if timeout is not None:
            self._timer = loop.call_later(timeout, self._timed_out)
        self.transport.write(request)
        return self.finished


@dataclass
class UpstreamPool:
    allow_link_local: bool = False
    _idle: dict[tuple[str, int, bool, str], list[Connection]] = field(default_factory=dict)
    _contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    _resolved: dict[tuple[str, int], list[tuple[Any, ...]]] = field(default_factory=dict)

    def _context(self, endpoint: Endpoint) -> ssl.SSLContext:
        digest = endpoint.pool_key[3]
        context = self._contexts.get(digest)
        if context is None:
            context = ssl.create_default_context()  # the system roots ...
            if endpoint.ca_bundle:
                context.load_verify_locations(cadata=endpoint.ca_bundle.decode("utf-8"))  # ... plus the member's CA
            context.set_alpn_protocols(["http/1.1"])
            self._contexts[digest] = context
        return context

    async def _addresses(self, endpoint: Endpoint) -> list[tuple[Any, ...]]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise BeforeResponse(f"cannot resolve {endpoint.host}: {exc.strerror}") from None
        allowed: list[tuple[Any, ...]] = []
        refused: list[str] = []
        for info in infos:
            why = refused_address(str(info[4][0]), allow_link_local=self.allow_link_local)
            if why:
                refused.append(why)
            else:
                allowed.append(info)
        if not allowed:
            raise DialRefused(f"refusing to dial {endpoint.host}: {refused[0]}")
        return allowed

    async def _connect(self, endpoint: Endpoint, timeout: float) -> Connection:
        loop = asyncio.get_running_loop()
        key = endpoint.pool_key
        last: Exception | None = None
        for family, kind, proto, _, address in await self._addresses(endpoint):
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, address), timeout)
                _, protocol = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: Connection(self, key),
                        sock=sock,
                        ssl=self._context(endpoint) if endpoint.tls else None,
                        server_hostname=endpoint.host if endpoint.tls else None,
                    ),
                    timeout,
                )
                return protocol
            except ssl.SSLCertVerificationError as exc:
                sock.close()
                raise BeforeResponse(f"TLS certificate of {endpoint.host} not trusted: {exc.verify_message}") from None
            except (TimeoutError, OSError) as exc:
                sock.close()
                last = exc
            except asyncio.CancelledError:  # the caller's deadline (a probe's): no socket left behind
                sock.close()
                raise
        reason = "timed out" if isinstance(last, asyncio.TimeoutError) else (getattr(last, "strerror", None) or str(last))
        raise BeforeResponse(f"connect to {endpoint.host}:{endpoint.port}: {reason}")

    def _release(self, connection: Connection) -> None:
        if not connection.reusable or connection.closed:
            if connection.transport is not None:
                connection.transport.close()
            return
        idle = self._idle.setdefault(connection.key, [])
        if len(idle) < MAX_IDLE_PER_ENDPOINT:
            idle.append(connection)
        elif connection.transport is not None:
            connection.transport.close()

    def _take(self, endpoint: Endpoint) -> Connection | None:
        idle = self._idle.get(endpoint.pool_key)
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    async def send(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        sink: Sink,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        response_timeout: float | None = None,
    ) -> Connection:
        """Send one request; the response goes to `sink`. Returns once it is complete.

        Raises BeforeResponse (retry elsewhere is safe), DialRefused, or UpstreamError.
        """
        head = [f"{method} {endpoint.base_path}{path} HTTP/1.1\r\n".encode(), b"host: " + endpoint.host_header + b"\r\n"]
        head += [name + b": " + value + b"\r\n" for name, value in headers]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        request = b"".join(head) + body
        for fresh in (False, True):
            connection = None if fresh else self._take(endpoint)
            reused = connection is not None
            if connection is None:
                connection = await self._connect(endpoint, connect_timeout)
            attach = getattr(sink, "attach", None)
            if attach is not None:
                attach(connection)  # a relay pauses the upstream when its client reads slowly
            finished = connection.send(request, sink, response_timeout)
            try:
                await finished
            except BeforeResponse:
                if reused:  # a pooled connection the upstream had already closed: try a new one
                    continue
                raise
            except ResponseTimedOut:
                raise BeforeResponse(f"no answer from {endpoint.host}:{endpoint.port} in {response_timeout:g}s") from None
            except asyncio.CancelledError:
                connection._fail(UpstreamError("cancelled"))
                raise
            return connection
        raise BeforeResponse(f"connection to {endpoint.host}:{endpoint.port} keeps closing")  # pragma: no cover

    async def fetch(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes = b"",
        *,
        timeout: float = 5.0,
        max_body: int = MAX_FETCHED_BODY,
    ) -> Response:
        """A whole request and response (probes), in `timeout` seconds all told (name resolution
        included), its body at most `max_body` bytes (TooLarge past it)."""
        sink = _Buffered(max_body)
        try:
            async with asyncio.timeout(timeout):
                await self.send(endpoint, method, path, headers or [], body, sink, connect_timeout=timeout, response_timeout=timeout)
        except TimeoutError:
            raise BeforeResponse(f"no answer from {endpoint.host}:{endpoint.port} in {timeout:.0f}s") from None
        return Response(sink.status, sink.headers, sink.content)

    def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                if connection.transport is not None:
                    connection.transport.close()
        self._idle.clear()
