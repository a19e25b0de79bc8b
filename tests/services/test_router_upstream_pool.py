"""The router's keep-alive pool to members (services/router/upstream.py): a response's time limit, against real
HTTP servers on 127.0.0.1 that answer, say nothing, or stop half-way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from services.router.upstream import BeforeResponse, Endpoint, UpstreamPool, _Buffered

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


async def serve(reply: Callable[[bytes], bytes]) -> tuple[asyncio.Server, str]:
    """A server answering each request with `reply(request head)` (b"": nothing, the connection kept open)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                writer.write(reply(head))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    made = UpstreamPool()
    yield made
    made.close()


async def test_a_member_that_never_answers_fails_the_request_as_retryable_once_its_time_is_up(pool: UpstreamPool) -> None:
    server, url = await serve(lambda head: b"" if b"/silent" in head else ANSWER)
    async with server:
        endpoint = Endpoint.parse(url)
        with pytest.raises(BeforeResponse, match=r"no answer from 127\.0\.0\.1:\d+ in 0\.2s"):
            await asyncio.wait_for(pool.send(endpoint, "GET", "/silent", [], b"", _Buffered(1024), response_timeout=0.2), 10)
        answered = _Buffered(1024)  # the pool goes on: the next request gets its answer
        await asyncio.wait_for(pool.send(endpoint, "GET", "/", [], b"", answered, response_timeout=0.2), 10)
        assert (answered.status, b"".join(answered.chunks)) == (200, b"ok")


async def past(url: str, seconds: float) -> None:
    """Return once `seconds` have passed on the loop's own timers: a request of its own pool to the member's /silent
    path, which never answers, failing at that limit (waited for as an event, not slept)."""
    other = UpstreamPool()
    try:
        with pytest.raises(BeforeResponse):
            silent = other.send(Endpoint.parse(url), "GET", "/silent", [], b"", _Buffered(1024), response_timeout=seconds)
            await asyncio.wait_for(silent, 10)
    finally:
        other.close()


async def test_a_member_that_answers_in_time_may_take_longer_than_the_limit_for_the_rest(pool: UpstreamPool) -> None:
    # the limit is the head's: a stream may go on as long as the member does (docs/router.md, "Client limits")
    rest = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"/silent" in head:
                await reader.read()  # never answered: kept open until the client leaves
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfi")
            await rest.wait()  # the member slow for the rest, past the client's limit: what is tested
            writer.write(b"rst")
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        sink = _Buffered(1024)
        answering = asyncio.ensure_future(pool.send(Endpoint.parse(url), "GET", "/", [], b"", sink, response_timeout=0.1))
        await past(url, 0.3)  # begun after it, so past its limit
        assert not answering.done()
        rest.set()
        await asyncio.wait_for(answering, 10)
        assert (sink.status, b"".join(sink.chunks)) == (200, b"first")


async def test_a_connection_kept_after_an_answer_in_time_is_not_closed_by_its_time_limit(pool: UpstreamPool) -> None:
    server, url = await serve(lambda head: b"" if b"/silent" in head else ANSWER)
    async with server:
        endpoint = Endpoint.parse(url)
        first = await asyncio.wait_for(pool.send(endpoint, "GET", "/", [], b"", _Buffered(1024), response_timeout=0.05), 10)
        await past(url, 0.2)  # the first request's limit has passed meanwhile
        second = await asyncio.wait_for(pool.send(endpoint, "GET", "/", [], b"", _Buffered(1024), response_timeout=5), 10)
        assert second is first and not first.closed  # kept, open, and it took the next request
