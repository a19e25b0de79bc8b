"""A TCP proxy on 127.0.0.1 in front of an API server, for tests that cut a client off from it.

It passes bytes through untouched (TLS included: the client still checks the server's certificate,
issued for 127.0.0.1), so it stands between one client and either the emulator or a real
kube-apiserver. `hold()` is a network partition: every open connection is cut and new ones wait,
accepted but unanswered, until `release()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class TcpProxy:
    def __init__(self, upstream: str) -> None:
        """`upstream`: the server's URL (scheme, host and port); `url` is the same with the proxy's port."""
        parts = urlsplit(upstream)
        assert parts.hostname and parts.port, f"an upstream with host and port: {upstream!r}"
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.url = ""
        self.accepted = 0  # connections taken, held ones included
        self._open = asyncio.Event()
        self._open.set()
        self._writers: set[asyncio.StreamWriter] = set()  # every socket the proxy holds, both sides
        self._server: asyncio.Server | None = None

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{self.scheme}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._open.set()  # held connections go on to be cut
        self.drop()
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def hold(self) -> None:
        """Cut every connection and keep new ones waiting until `release`."""
        self._open.clear()
        self.drop()

    def release(self) -> None:
        self._open.set()

    def drop(self) -> None:
        """Cut every connection now, mid-stream: the client sees the server vanish, as on a network failure."""
        for writer in list(self._writers):
            if writer.transport is not None:
                writer.transport.abort()
        # waiting connections are left waiting: they came after the cut

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await self._open.wait()
        if writer.transport.is_closing():
            return
        self._writers.add(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.add(upstream_writer)
        pipes = [asyncio.create_task(_pipe(reader, upstream_writer)), asyncio.create_task(_pipe(upstream_reader, writer))]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)  # one side gone: the connection is over
        finally:
            for task in pipes:
                task.cancel()
            for side in (writer, upstream_writer):
                self._writers.discard(side)
                side.transport.abort()
            await asyncio.gather(*pipes, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
