"""The router's edges through real sockets: malformed bodies for the echo member, redirects from
members, pipelined and partial requests, timeouts and limits (real NATS, real upstreams on
127.0.0.1, the router on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.gateway.probe import MAX_MODELS_BODY
from services.gateway.upstream import MAX_HEAD
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack, running_stack
from tests.support.waiting import eventually

TICK = 0.3


def member(name: str, url: str = "", *, backend: str = "vllm-openai", models: list[Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"backend": backend, "models": models if models is not None else [{"name": "m"}], **spec}
    if url:
        body["url"] = url
    return {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": name}, "spec": body}


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, probe_interval=TICK) as running:
        yield running


@pytest.fixture
async def upstreams() -> AsyncIterator[list[FakeOpenAI]]:
    started: list[FakeOpenAI] = []
    yield started
    for upstream in started:
        await upstream.stop()


async def serve(upstreams: list[FakeOpenAI], upstream: FakeOpenAI) -> FakeOpenAI:
    upstreams.append(await upstream.start())
    return upstream


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
