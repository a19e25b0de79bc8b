"""An upstream's answer passed to the client as it arrives (`Relay`): no buffering, with backpressure.

The upstream pool (services/router/upstream.py) and the operator-signal client (services/router/signal.py)
feed it a head, body chunks and the end; it writes them to the client's connection (services/router/protocol.py)
and takes the notes the metrics want on the way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from services.router.apis import openai_error
from services.router.metrics import USAGE_TAIL, usage
from services.router.protocol import HttpConnection
from services.router.upstream import Connection

log = logging.getLogger("jetway.router")
HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"proxy-connection", b"te", b"trailer", b"upgrade"}


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
        self.on_end: Callable[[], None] | None = None  # the member has answered all of it (before the client has it)

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
        if self.on_end is not None:
            self.on_end()
        self.flush()
        self.client.end()
        self.client.upstream = None

    def usage(self) -> tuple[int, int]:
        before, last = self.tail
        return usage(last if len(last) >= USAGE_TAIL else (before[-USAGE_TAIL:] + last))
