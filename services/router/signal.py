"""The operator-signal transport: inference requests over NATS to an enrolled compute agent.

The homing side (the router, the prober) dials nothing: it publishes the request on
`jetway.signal.compute.<agent>.inference` (or `.probe`) with a reply inbox, and the agent,
running beside the model server, forwards it to its local upstream and streams the answer
back to the inbox, in order:

    head   headers Jetway-Status, Jetway-Headers (JSON pairs)
    chunk  data = body bytes (at most CHUNK each)
    end    header Jetway-End: 1, or Jetway-Error with a message

An agent is "enrolled" when it answers on its subject; none answering is NATS's 503
("no responders"), which the prober reports as ComputeOperatorNotEnrolled and the router as 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts.subjects import SIGNAL_PREFIX, encode_token
from services.router.upstream import BeforeResponse, Connection, Sink, UpstreamError

CHUNK = 256 * 1024
FIRST_BYTE_TIMEOUT = 600.0
BETWEEN_CHUNKS_TIMEOUT = 300.0
MAX_WAITING = 16 * 1024 * 1024  # bytes of an answer received and not yet taken by the client


def subject(agent: str, operation: str) -> str:
    return f"{SIGNAL_PREFIX}.compute.{encode_token(agent)}.{operation}"


def no_responders(msg: Msg) -> bool:
    return msg.headers is not None and msg.headers.get("Status") == "503" and not msg.data


class NoAgent(BeforeResponse):
    """No compute agent answers under that name."""


class ClientTooSlow(UpstreamError):
    """The client took the answer more slowly than the agent sent it, past MAX_WAITING: NATS has
    no flow control to slow the agent, so the router gives up rather than hold it in memory."""


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


class SignalClient:
    def __init__(self, nc: Client) -> None:
        self.nc = nc

    async def probe(self, agent: str, timeout: float) -> tuple[int, bytes]:
        """(status, body) of the agent's GET /v1/models on its upstream."""
        import nats.errors

        try:
            reply = await self.nc.request(subject(agent, "probe"), b"", timeout=timeout)
        except nats.errors.NoRespondersError:
            raise NoAgent(f"no compute agent named {agent!r} is enrolled (none answers on the bus)") from None
        except nats.errors.TimeoutError:
            raise BeforeResponse(f"compute agent {agent!r} did not answer in {timeout:.0f}s") from None
        headers = reply.headers or {}
        if "Jetway-Error" in headers:
            raise BeforeResponse(f"compute agent {agent!r}: {headers['Jetway-Error']}")
        return int(headers.get("Jetway-Status", "0")), reply.data

    async def forward(self, agent: str, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes, sink: Sink) -> None:
        """Relay one request through the agent; the response goes to `sink` as it arrives.

        A sink with a `writable` event (the router's relay) is waited on while its client cannot
        take more; what arrives meanwhile waits here, up to MAX_WAITING bytes (ClientTooSlow)."""
        queue: asyncio.Queue[Msg] = asyncio.Queue()
        inbox = self.nc.new_inbox()
        writable: asyncio.Event | None = getattr(sink, "writable", None)
        waiting = 0
        overflow = asyncio.Event()

        async def received(msg: Msg) -> None:
            nonlocal waiting
            if overflow.is_set():
                return
            waiting += len(msg.data)
            if waiting > MAX_WAITING:
                overflow.set()
                return
            queue.put_nowait(msg)

        sub = await self.nc.subscribe(inbox, cb=received)
        try:
            request_headers = {
                "Jetway-Method": method,
                "Jetway-Path": path,
                "Jetway-Headers": json.dumps([[n.decode("latin-1"), v.decode("latin-1")] for n, v in headers]),
            }
            await self.nc.publish(subject(agent, "inference"), body, reply=inbox, headers=request_headers)
            try:
                first = await asyncio.wait_for(queue.get(), FIRST_BYTE_TIMEOUT)
                waiting -= len(first.data)
            except TimeoutError:
                raise BeforeResponse(f"compute agent {agent!r} did not answer") from None
            if no_responders(first):
                raise NoAgent(f"no compute agent named {agent!r} is enrolled (none answers on the bus)")
            head = first.headers or {}
            if "Jetway-Error" in head:
                raise BeforeResponse(f"compute agent {agent!r}: {head['Jetway-Error']}")
            pairs = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in json.loads(head.get("Jetway-Headers", "[]"))]
            sink.head(int(head.get("Jetway-Status", "502")), pairs)
            while True:
                if writable is not None and not writable.is_set():
                    await _either(writable, overflow)  # the client's buffer is full: wait for it to drain
                if overflow.is_set():
                    raise ClientTooSlow(
                        f"the client reads more slowly than compute agent {agent!r} sends (over {MAX_WAITING >> 20} MiB waiting)"
                    )
                try:
                    msg = await asyncio.wait_for(queue.get(), BETWEEN_CHUNKS_TIMEOUT)
                except TimeoutError:
                    raise UpstreamError(f"compute agent {agent!r} stopped sending") from None
                waiting -= len(msg.data)
                meta = msg.headers or {}
                if "Jetway-Error" in meta:
                    raise UpstreamError(f"compute agent {agent!r}: {meta['Jetway-Error']}")
                if msg.data:
                    sink.body(msg.data)
                    flush = getattr(sink, "flush", None)
                    if flush is not None:
                        flush()
                if meta.get("Jetway-End"):
                    sink.done()
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


AGENT_PAUSE_AT = 4 * 1024 * 1024  # bytes read from the upstream and not yet published: stop reading
AGENT_RESUME_AT = 1024 * 1024


class ReplyStream:
    """The agent side: an upstream response, published to the requester's inbox in order. The
    upstream is paused while more than AGENT_PAUSE_AT bytes wait to be published."""

    def __init__(self, nc: Client, reply: str) -> None:
        self.nc = nc
        self.reply = reply
        self.queue: asyncio.Queue[tuple[bytes, dict[str, str]] | None] = asyncio.Queue()
        self.waiting = 0
        self.connection: Connection | None = None  # the upstream's, paused and resumed
        self.paused = False
        self.task = asyncio.get_running_loop().create_task(self._drain())

    def attach(self, connection: Connection) -> None:
        self.connection = connection

    async def _drain(self) -> None:
        while (item := await self.queue.get()) is not None:
            data, headers = item
            await self.nc.publish(self.reply, data, headers=headers or None)
            self.waiting -= len(data)
            if self.paused and self.waiting < AGENT_RESUME_AT and self.connection is not None:
                self.paused = False
                self.connection.resume()

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        pairs = [
            [n.decode("latin-1"), v.decode("latin-1")]
            for n, v in headers
            if n.lower() not in (b"connection", b"keep-alive", b"transfer-encoding", b"content-length")
        ]
        self.queue.put_nowait((b"", {"Jetway-Status": str(status), "Jetway-Headers": json.dumps(pairs)}))

    def body(self, chunk: bytes) -> None:
        for start in range(0, len(chunk), CHUNK):
            self.queue.put_nowait((chunk[start : start + CHUNK], {}))
        self.waiting += len(chunk)
        if not self.paused and self.waiting > AGENT_PAUSE_AT and self.connection is not None:
            self.paused = True
            self.connection.pause()

    def done(self) -> None:
        self.queue.put_nowait((b"", {"Jetway-End": "1"}))

    async def fail(self, message: str) -> None:
        self.queue.put_nowait((b"", {"Jetway-Error": message, "Jetway-End": "1"}))
        await self.close()

    async def close(self) -> None:
        self.queue.put_nowait(None)
        await self.task


def request_of(msg: Msg) -> tuple[str, str, list[tuple[bytes, bytes]], bytes] | None:
    headers: dict[str, Any] = msg.headers or {}
    method, path = headers.get("Jetway-Method"), headers.get("Jetway-Path")
    if method not in ("GET", "POST") or not isinstance(path, str) or not (path.startswith("/v1/") or path in ("/tokenize", "/detokenize")):
        return None
    pairs = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in json.loads(headers.get("Jetway-Headers", "[]"))]
    return method, path, pairs, msg.data
