"""Every API the router forwards, end to end: the official `openai` and `anthropic` SDKs as clients, the router,
and a real upstream server on 127.0.0.1 (tests/support/openai_upstream.py), streamed where the API streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.stack import Stack, running_stack

TOKEN = "member-token-not-for-clients"


def member(name: str, url: str, models: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
    return {
        "apiVersion": "airdress.co/v1alpha1",
        "kind": "InferencePoolMember",
        "metadata": metadata,
        "spec": {"backend": "vllm-openai", "url": url, "authSecretRef": "member-key", "models": [{"name": m} for m in models]},
    }


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path, probe_interval=0.3) as running:
        yield running


@pytest.fixture
async def upstream(stack: Stack, upstreams: list[FakeOpenAI]) -> FakeOpenAI:
    """A member that speaks every API, Anthropic's included (a label adds it: docs/router.md, API formats)."""
    server = await FakeOpenAI(name="vllm", models=["qwen"], token=TOKEN).start()
    upstreams.append(server)
    stack.secrets.set("member-key", TOKEN.encode())
    await stack.apply(member("vllm", server.url, ["qwen"], {"formats.jetway.dev/anthropic-messages": "true"}))
    await eventually(lambda: stack.served("qwen"), message="the member is ready")
    return server


def openai_client(stack: Stack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stack.router_url, api_key="client-key-the-router-ignores", max_retries=0)


def anthropic_client(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=stack.router_url.removesuffix("/v1"), api_key="client-key", max_retries=0)


async def test_openai_apis_plain_and_streamed(stack: Stack, upstream: FakeOpenAI) -> None:
    client = openai_client(stack)
    chat = await client.chat.completions.with_raw_response.create(model="qwen", messages=[{"role": "user", "content": "hi there"}])
    assert chat.parse().choices[0].message.content == "vllm: hi there"
    assert chat.headers["x-jetway-member"] == "vllm" and chat.headers["x-jetway-route"].startswith("prefix-cache; reason=")
    words = [
        chunk.choices[0].delta.content
        async for chunk in await client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "a b c"}], stream=True)
        if chunk.choices and chunk.choices[0].delta.content
    ]
    assert "".join(words).strip() == "vllm: a b c"

    response = await client.responses.create(model="qwen", input="tell me")
    assert response.output_text == "vllm: tell me"
    streamed = [event async for event in await client.responses.create(model="qwen", input="one two", stream=True)]
    assert "".join(e.delta for e in streamed if e.type == "response.output_text.delta").strip() == "vllm: one two"
    assert streamed[-1].type == "response.completed"

    embeddings = await client.embeddings.create(model="qwen", input=["a", "bbb"])
    assert [e.embedding[0] for e in embeddings.data] == [1.0, 3.0]

    audio = b"RIFF" + bytes(range(256)) * 40
    transcript = await client.audio.transcriptions.create(model="qwen", file=("speech.wav", audio, "audio/wav"))
    assert transcript.text == f"vllm: heard {len(audio)} bytes"
    heard = upstream.completions[-1]  # probes ask /v1/models meanwhile
    assert heard.path == "/v1/audio/transcriptions" and heard.body == {"model": "qwen", "file_bytes": len(audio)}
    assert heard.authorization == f"Bearer {TOKEN}", "the member's token, not the client's"
    await client.close()


async def test_anthropic_messages_plain_and_streamed(stack: Stack, upstream: FakeOpenAI) -> None:
    client = anthropic_client(stack)
    message = await client.messages.create(model="qwen", max_tokens=32, messages=[{"role": "user", "content": "bonjour"}])
    assert message.content[0].type == "text" and message.content[0].text == "vllm: bonjour"
    seen = upstream.completions[-1]
    assert seen.path == "/v1/messages" and seen.headers["anthropic-version"] and seen.headers["x-api-key"] == TOKEN
    async with client.messages.stream(model="qwen", max_tokens=32, messages=[{"role": "user", "content": "x y"}]) as stream:
        text = await stream.get_final_text()
    assert text.strip() == "vllm: x y"
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": missing.value.body["error"]["message"]},  # type: ignore[index]
    }
    await client.close()


async def test_vllm_apis(stack: Stack, upstream: FakeOpenAI) -> None:
    async def post(path: str, body: dict[str, Any]) -> tuple[int, Any, str]:
        async with stack.http.post(stack.router_url.removesuffix("/v1") + path, json=body) as response:
            return response.status, await response.json(), response.headers.get("x-jetway-member", "")

    assert await post("/tokenize", {"model": "qwen", "prompt": "ab"}) == (
        200,
        {"count": 2, "max_model_len": 4096, "tokens": [97, 98]},
        "vllm",
    )
    assert (await post("/detokenize", {"model": "qwen", "tokens": [104, 105]}))[1] == {"prompt": "hi"}
    status, reranked, _ = await post("/v1/rerank", {"model": "qwen", "query": "q", "documents": ["d1", "d2"]})
    assert status == 200 and [r["index"] for r in reranked["results"]] == [0, 1]
    status, scored, _ = await post("/v1/score", {"model": "qwen", "text_1": "a", "text_2": "b"})
    assert status == 200 and scored["data"][0]["score"] == 0.75


async def test_a_format_no_member_accepts_is_a_404_in_that_apis_shape(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    server = await FakeOpenAI(name="plain", models=["llama"]).start()
    upstreams.append(server)
    stack.secrets.set("member-key", b"any")
    await stack.apply(member("plain", server.url, ["llama"], {"formats.jetway.dev/openai-embeddings": "false"}))
    await eventually(lambda: stack.served("llama"), message="ready")
    client = anthropic_client(stack)
    with pytest.raises(anthropic.NotFoundError) as refused:
        await client.messages.create(model="llama", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "accepts /v1/messages" in refused.value.body["error"]["message"]  # type: ignore[index]
    await client.close()
    with pytest.raises(openai.NotFoundError) as embeddings:
        await openai_client(stack).embeddings.create(model="llama", input="x")
    assert embeddings.value.code == "unsupported_api"
    assert not [r for r in server.requests if r.path != "/v1/models"], "nothing reached the member"


async def test_bad_bodies_are_400s_in_the_apis_shape_and_reach_no_member(stack: Stack, upstream: FakeOpenAI) -> None:
    base = stack.router_url.removesuffix("/v1")
    cases = [
        (
            "/v1/audio/transcriptions",
            {
                "data": b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\nxx\r\n--b--\r\n',
                "headers": {"content-type": "multipart/form-data; boundary=b"},
            },
            "the form field 'model' is required",
        ),
        ("/v1/audio/transcriptions", {"json": {"model": "qwen"}}, "takes a multipart/form-data body"),
        ("/v1/embeddings", {"json": {"input": "x"}}, "'model' is required"),
        ("/v1/messages", {"json": {"model": "qwen", "messages": "hi"}}, "'messages' is required and must be a list"),
    ]
    before = len(upstream.requests)
    for path, request, words in cases:
        async with stack.http.post(base + path, **request) as response:
            body = json.loads(await response.read())
        assert response.status == 400, path
        message = body["error"]["message"]
        assert words in message, (path, message)
        assert ("type" in body and body["type"] == "error") == (path == "/v1/messages"), "Anthropic's shape for Anthropic's API"
    assert len([r for r in upstream.requests[before:] if r.path != "/v1/models"]) == 0


async def test_the_sdks_retrieve_and_list_models_each_in_its_own_shape(stack: Stack, upstream: FakeOpenAI) -> None:
    """Both SDKs' `models.retrieve`, and `models.list` from Anthropic's SDK (its headers ask for its list shape)."""
    client = openai_client(stack)
    found = await client.models.retrieve("qwen")
    assert (found.id, found.object, found.owned_by) == ("qwen", "model", "jetway")
    with pytest.raises(openai.NotFoundError) as missing:
        await client.models.retrieve("nope")
    assert missing.value.code == "model_not_found"
    assert [m.id for m in (await client.models.list()).data] == ["qwen"]  # OpenAI's list, as before

    claude = anthropic_client(stack)
    info = await claude.models.retrieve("qwen")
    assert (info.type, info.id, info.display_name) == ("model", "qwen", "qwen")
    listed = await claude.models.list()
    assert [m.id for m in listed.data] == ["qwen"] and listed.has_more is False
    assert (listed.first_id, listed.last_id) == ("qwen", "qwen")
    with pytest.raises(anthropic.NotFoundError) as gone:
        await claude.models.retrieve("nope")
    assert gone.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    await claude.close()


async def test_count_tokens_goes_to_a_member_and_unknown_message_paths_answer_in_anthropics_shape(
    stack: Stack, upstream: FakeOpenAI
) -> None:
    client = anthropic_client(stack)
    counted = await client.messages.count_tokens(model="qwen", messages=[{"role": "user", "content": "one two three"}])
    assert counted.input_tokens == 3
    assert upstream.requests[-1].path == "/v1/messages/count_tokens"
    async with stack.http.post(
        stack.router_url + "/messages/nope", json={"model": "qwen"}, headers={"anthropic-version": "2023-06-01"}
    ) as response:
        body = await response.json()
    assert response.status == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error", body
    await client.close()


async def test_a_prompt_over_the_context_window_is_a_400_each_sdk_raises_as_bad_request(stack: Stack) -> None:
    await stack.apply(
        {
            "apiVersion": "airdress.co/v1alpha1",
            "kind": "InferencePoolMember",
            "metadata": {"name": "small", "labels": {"formats.jetway.dev/anthropic-messages": "true"}},
            "spec": {"backend": "echo", "models": [{"name": "small", "contextWindow": 50}]},
        }
    )
    await eventually(lambda: stack.served("small"), message="the member is ready")
    long = [{"role": "user", "content": "x" * 400}]
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_client(stack).chat.completions.create(model="small", messages=long)  # type: ignore[arg-type]
    assert refused.value.code == "context_length_exceeded"
    client = anthropic_client(stack)
    with pytest.raises(anthropic.BadRequestError) as too_long:
        await client.messages.create(model="small", max_tokens=8, messages=long)  # type: ignore[arg-type]
    assert too_long.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    await client.close()
