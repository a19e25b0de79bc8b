"""The router's edges through real sockets: malformed bodies for the echo member, redirects from
members, pipelined and partial requests, timeouts and limits (real NATS, real upstreams on
127.0.0.1, the router on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httptools
import pytest

from runtime.bus import connect
from services.router import protocol
from services.router.computeagent import ComputeAgent
from services.router.probe import MAX_MODELS_BODY
from services.router.signal import AGENT_PAUSE_AT, MAX_WAITING, ReplyStream
from services.router.upstream import MAX_HEAD, Endpoint, UpstreamPool
from testbed.waiting import eventually
from tests.e2e.test_router import member, serve  # one copy of the helpers: test_router's
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack, running_stack

TICK = 0.3


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, probe_interval=TICK) as running:
        yield running


async def echo_ready(stack: Stack) -> None:
    await stack.apply(member("echo", backend="echo", models=[{"name": "echo"}]))
    await eventually(lambda: stack.served("echo"), message="echo served")


async def post(stack: Stack, body: Any, path: str = "chat/completions") -> tuple[int, str, bytes]:
    async with stack.http.post(f"{stack.router_url}/{path}", json=body) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.read()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("messages", "param", "words"),
    [
        ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages[0].content[0].text", "must be a string"),
        ([{"role": "user", "content": [{"type": "text", "text": None}]}], "messages[0].content[0].text", "must be a string"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text", "must be a string"),
        ([{"role": "user", "content": ["hi"]}], "messages[0].content[0]", "must be an object"),
        ([{"role": "user", "content": [{"text": "hi", "type": 3}]}], "messages[0].content[0].type", "must be a string"),
        ([{"role": "system", "content": "s"}, {"role": "user", "content": 5}], "messages[1].content", "string, null or a list"),
        (["hi"], "messages[0]", "must be an object"),
        ([{"content": "hi"}], "messages[0].role", "must be a string"),
    ],
)
async def test_echo_answers_a_malformed_message_with_a_400_before_any_byte(
    stack: Stack, stream: bool, messages: list[Any], param: str, words: str
) -> None:
    await echo_ready(stack)
    status, content_type, raw = await post(stack, {"model": "echo", "stream": stream, "messages": messages})
    assert status == 400 and content_type == "application/json", raw
    error = json.loads(raw)["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["code"] == "invalid_request"
    assert words in error["message"] and param in error["message"]


async def test_echo_refuses_malformed_prompts_and_stream_options(stack: Stack) -> None:
    await echo_ready(stack)
    status, _, raw = await post(stack, {"model": "echo", "prompt": ["a", {"x": 1}]}, path="completions")
    assert status == 400 and json.loads(raw)["error"]["param"] == "prompt[1]"
    body = {"model": "echo", "stream": True, "stream_options": "yes", "messages": [{"role": "user", "content": "hi"}]}
    status, _, raw = await post(stack, body)
    assert status == 400 and json.loads(raw)["error"]["param"] == "stream_options"
    # what is well formed still echoes: parts of other types are skipped, null content is fine
    messages = [
        {"role": "assistant", "content": None},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "a b"}]},
    ]
    status, _, raw = await post(stack, {"model": "echo", "messages": messages})
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == "a b"
    status, _, raw = await post(stack, {"model": "echo", "prompt": ["a", 5, [1, 2]]}, path="completions")
    assert status == 200 and json.loads(raw)["choices"][0]["text"] == "a"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_from_a_member_is_a_502_and_its_location_never_reaches_the_client(
    stack: Stack, upstreams: list[FakeOpenAI], status: int
) -> None:
    metadata = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    upstream = await serve(upstreams, FakeOpenAI(name="gpu", models=["m"], redirect=(status, metadata)))
    await stack.apply(member("gpu", upstream.url))
    await eventually(lambda: stack.served("m"), message="gpu ready")
    for stream in (False, True):
        body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
        async with stack.http.post(f"{stack.router_url}/chat/completions", json=body, allow_redirects=False) as response:
            raw = await response.read()
            assert response.status == 502 and "Location" not in response.headers, (response.status, dict(response.headers))
            assert response.headers["x-jetway-member"] == "gpu"
        error = json.loads(raw)["error"]
        assert error["code"] == "upstream_redirect" and error["type"] == "server_error"
        assert f"answered {status}" in error["message"] and "redirect" in error["message"]
        assert b"169.254" not in raw
    assert len(upstream.completions) == 2, "no retry: the member answered"
    upstream.redirect = None
    assert (await stack.chat("m"))[0] == 200, "the connection and the member stay usable"


async def test_a_model_list_that_never_ends_fails_the_probe_at_the_size_bound(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    upstream = await serve(upstreams, FakeOpenAI(name="gpu", models=["m"], endless_models=True))
    await stack.apply(member("gpu", upstream.url))
    condition = await eventually(lambda: stack.condition("gpu", "Healthy"), timeout=60, message="probed")
    # ProbeFailed at the bound, not Unreachable at the probe's timeout after buffering all it got
    assert (condition["status"], condition["reason"]) == ("False", "ProbeFailed"), condition
    assert condition["message"] == f"GET /v1/models answered more than {MAX_MODELS_BODY // (1024 * 1024)} MiB", condition
    # the prober hung up at the bound: what the upstream got written is the bound plus socket buffers
    await eventually(lambda: upstream.models_sent > 0, message="the upstream saw its client go")
    assert upstream.models_sent < MAX_MODELS_BODY + 32 * 1024 * 1024
    assert not await stack.served("m")


async def test_response_headers_that_never_end_fail_the_probe_at_the_bound(stack: Stack) -> None:
    async def endless_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nx-endless: ")
        with contextlib.suppress(ConnectionError):
            while True:
                writer.write(b"a" * 65536)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(endless_head, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        await stack.apply(member("gpu", f"http://127.0.0.1:{port}"))
        condition = await eventually(lambda: stack.condition("gpu", "Healthy"), timeout=60, message="probed")
        assert (condition["status"], condition["reason"]) == ("False", "Unreachable"), condition
        assert condition["message"] == f"response headers larger than {MAX_HEAD // 1024} KiB", condition
    finally:
        server.close()


# --- the HTTP server's own limits: raw sockets, one router per test with short timeouts -------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class _Responses:
    """httptools splitting what the router wrote into responses (real parser, as clients use)."""

    def __init__(self) -> None:
        self.done: list[Answer] = []
        self.parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    def on_message_begin(self) -> None:
        self._headers, self._body = {}, []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.done.append(Answer(self.parser.get_status_code(), self._headers, b"".join(self._body)))


async def exchange(port: int, data: bytes | list[bytes], *, timeout: float = 15.0) -> tuple[list[Answer], bool]:
    """Send `data`, read until the router closes the connection (bounded by `timeout`): the
    responses, and whether the router closed it (False: still open when the wait ran out)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    responses = _Responses()
    closed = False
    try:
        for piece in [data] if isinstance(data, bytes) else data:
            writer.write(piece)
            await writer.drain()
        async with asyncio.timeout(timeout):
            while chunk := await reader.read(65536):
                responses.parser.feed_data(chunk)
            closed = True
    except TimeoutError:
        pass
    except ConnectionResetError:
        closed = True
    finally:
        writer.close()
    return responses.done, closed


def chat_request(content: str, *, close: bool = False) -> bytes:
    body = json.dumps({"model": "echo", "messages": [{"role": "user", "content": content}]}).encode()
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


def router_port(stack: Stack) -> int:
    return int(stack.router_url.rsplit(":", 1)[1].split("/", 1)[0])


@pytest.fixture
async def limited(stack: Stack) -> AsyncIterator[tuple[Stack, int]]:
    """A second router on the same routes, with timeouts short enough to see."""
    limits = protocol.Limits(header_timeout=0.5, body_timeout=1.0, idle_timeout=1.0, max_connections=8)
    server, port = await protocol.serve(stack.router.routes, "127.0.0.1", 0, limits=limits)
    try:
        yield stack, port
    finally:
        server.close()


def error_of(answer: Answer) -> dict[str, Any]:
    return dict(json.loads(answer.body)["error"])


async def test_pipelined_requests_then_garbage_are_each_answered_in_order_then_a_400_and_a_close(stack: Stack) -> None:
    await echo_ready(stack)
    garbage = b"\x16\x03\x01 this is not HTTP\r\n\r\n"
    answers, closed = await exchange(router_port(stack), b"".join(chat_request(f"r{i}") for i in range(5)) + garbage)
    assert [a.status for a in answers] == [200, 200, 200, 200, 200, 400] and closed
    assert [json.loads(a.body)["choices"][0]["message"]["content"] for a in answers[:5]] == ["r0", "r1", "r2", "r3", "r4"]
    assert answers[5].headers["connection"] == "close" and error_of(answers[5])["message"] == "malformed HTTP request"
    # a request that asks to close ends the connection: what follows it is not read
    answers, closed = await exchange(router_port(stack), chat_request("a") + chat_request("b", close=True) + chat_request("c") + garbage)
    assert [a.status for a in answers] == [200, 200] and closed


async def test_an_upgrade_request_is_refused_in_its_turn(stack: Stack) -> None:
    health = b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n"
    upgrade = b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}"
    answers, closed = await exchange(router_port(stack), health + upgrade + health)
    assert [a.status for a in answers] == [200, 400] and closed
    assert error_of(answers[1])["message"] == "protocol upgrades are not supported"


async def test_headers_that_never_finish_get_a_408_and_a_close(limited: tuple[Stack, int]) -> None:
    _, port = limited
    partial = b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
    results = await asyncio.gather(*(exchange(port, partial) for _ in range(6)))
    for answers, closed in results:
        assert closed and [a.status for a in answers] == [408]
        assert error_of(answers[0])["message"] == "request headers not received within 0.5 s"
    # a connection that sends nothing at all is closed without a word
    assert await exchange(port, b"") == ([], True)


async def test_a_body_trickled_slower_than_the_body_timeout_gets_a_408_and_a_close(limited: tuple[Stack, int]) -> None:
    _, port = limited
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    responses = _Responses()
    async with asyncio.timeout(15):
        while True:  # the adversary: 2 bytes at a time, paced (this pacing is the input, not a wait on the router)
            try:
                writer.write(b"{ ")
                await writer.drain()
            except ConnectionError:
                break
            try:
                chunk = await asyncio.wait_for(reader.read(65536), 0.1)
            except TimeoutError:
                continue
            if not chunk:
                break
            responses.parser.feed_data(chunk)
    writer.close()
    assert [a.status for a in responses.done] == [408]
    assert error_of(responses.done[0])["message"] == "request body not received within 1 s"


async def test_an_idle_keep_alive_connection_is_closed(limited: tuple[Stack, int]) -> None:
    stack, port = limited
    await echo_ready(stack)
    answers, closed = await exchange(port, chat_request("hi"))
    assert [a.status for a in answers] == [200] and closed, "closed after the idle timeout, silently"


async def test_expect_100_continue_with_an_oversized_length_gets_413_at_once(stack: Stack) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n"
    answers, closed = await exchange(router_port(stack), head + b"Expect: 100-continue\r\n\r\n")
    assert [a.status for a in answers] == [413] and closed, "no 100 Continue, a 413 and a close"
    assert error_of(answers[0])["message"] == "request body larger than 16 MiB"
    # without Expect, and the client already sending: refused as soon as the headers say so
    answers, closed = await exchange(router_port(stack), head + b"\r\n" + b"x" * 65536)
    assert [a.status for a in answers] == [413] and closed


async def test_oversized_request_headers_get_a_431_and_a_close(stack: Stack) -> None:
    port = router_port(stack)  # the default header timeout: the pieces may take their time
    pieces = [b"GET /healthz HTTP/1.1\r\nHost: r\r\nx-filler: "] + [b"a" * 16384] * 16
    answers, closed = await exchange(port, pieces)
    assert [a.status for a in answers] == [431] and closed
    assert error_of(answers[0])["message"] == f"request headers larger than {protocol.MAX_HEAD // 1024} KiB"


async def test_connections_past_the_limit_get_a_503_and_the_rest_are_served(stack: Stack) -> None:
    await echo_ready(stack)
    server, port = await protocol.serve(stack.router.routes, "127.0.0.1", 0, limits=protocol.Limits(max_connections=8))
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
    try:
        for reader, writer in held:  # each connection is in (a request answered on each)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n")
            assert (await asyncio.wait_for(reader.readuntil(b'{"ok":true}'), 10)).startswith(b"HTTP/1.1 200")
        answers, closed = await exchange(port, chat_request("one too many"))
        assert [a.status for a in answers] == [503] and closed
        assert error_of(answers[0])["message"] == "the router has 8 connections open, its limit; try again shortly"
        assert answers[0].headers["retry-after"] == "1"
        for _, writer in held:
            writer.close()

        async def served_again() -> bool:
            answers, _ = await exchange(port, chat_request("back", close=True))
            return [a.status for a in answers] == [200]

        await eventually(served_again, message="a connection is served once others have closed")
    finally:
        for _, writer in held:
            writer.close()
        server.close()


def test_limits_come_from_the_environment_and_bad_values_say_which() -> None:
    env = {"JETWAY_ROUTER_HEADER_TIMEOUT": "2.5", "JETWAY_ROUTER_MAX_CONNECTIONS": "100"}
    assert protocol.Limits.from_env(env.get) == protocol.Limits(header_timeout=2.5, max_connections=100)
    assert protocol.Limits.from_env({}.get) == protocol.Limits()
    for name, value in (
        ("JETWAY_ROUTER_BODY_TIMEOUT", "soon"),
        ("JETWAY_ROUTER_IDLE_TIMEOUT", "0"),
        ("JETWAY_ROUTER_MAX_CONNECTIONS", "1.5"),
    ):
        with pytest.raises(ValueError, match=name):
            protocol.Limits.from_env({name: value}.get)


async def test_a_client_slower_than_a_compute_agent_is_cut_off_at_the_bound_not_buffered(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    total = 64 * 1024 * 1024
    local = await serve(upstreams, FakeOpenAI(name="nas", models=["llama"], stream_bytes=total))
    await stack.apply(member("nas-0", models=[{"name": "llama"}], transport="operator-signal", computeOperatorRef="nas"))
    nc = await connect(stack.nats_url, name="agent")
    stop = asyncio.Event()
    running = asyncio.create_task(ComputeAgent(nc, "nas", local.url).run(stop))
    sock = socket.socket()
    try:
        await eventually(lambda: stack.served("llama"), message="healthy through the agent")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing for now
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, ("127.0.0.1", router_port(stack)))
        body = json.dumps({"model": "llama", "stream": True, "messages": [{"role": "user", "content": "big"}]}).encode()
        await loop.sock_sendall(sock, b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await eventually(lambda: local.streams_done == 1, timeout=60, message="the upstream wrote its whole stream")
        received, tail = 0, b""
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(60):
                while not tail.endswith(b"0\r\n\r\n") and (chunk := await loop.sock_recv(sock, 1 << 20)):
                    received, tail = received + len(chunk), (tail + chunk)[-16:]
        assert not tail.endswith(b"0\r\n\r\n"), f"the router held the whole stream for the client ({received} bytes)"
        assert received < total - MAX_WAITING
        assert (await stack.status("nas-0"))["phase"] == "Healthy", "a slow client is not the member's fault"
    finally:
        sock.close()
        stop.set()
        await running
        await nc.close()


async def test_the_compute_agent_stops_reading_its_upstream_while_the_bus_lags(nats: NatsEndpoint, upstreams: list[FakeOpenAI]) -> None:
    local = await serve(upstreams, FakeOpenAI(models=["m"]))
    nc = await connect(nats.url, name="agent")
    connection = await UpstreamPool()._connect(Endpoint.parse(local.url), 5)
    try:
        assert connection.transport is not None
        stream = ReplyStream(nc, nc.new_inbox())
        stream.attach(connection)
        stream.body(b"x" * (AGENT_PAUSE_AT + 1))  # read faster than published: nothing published yet
        assert stream.paused and not connection.transport.is_reading()
        await eventually(lambda: not stream.paused, message="resumed once published")
        assert connection.transport.is_reading()
        await stream.close()
    finally:
        if connection.transport is not None:
            connection.transport.close()
        await nc.close()
