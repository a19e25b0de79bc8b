"""The router's edges through real sockets: malformed bodies for the echo member, redirects from
members, pipelined and partial requests, timeouts and limits (real NATS, real upstreams on
127.0.0.1, the router on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

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
