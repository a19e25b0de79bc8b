"""The router and the prober through real HTTP: real NATS, real upstream servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cli.config import ClientConfig
from runtime.bus import connect
from runtime.eventstore import EventStore
from services.router.computeagent import ComputeAgent
from testbed.waiting import eventually
from tests.support.cli import run_jetway
from tests.support.nats import NatsEndpoint
from tests.support.openai_upstream import FakeOpenAI
from tests.support.pki import make_ca
from tests.support.stack import Stack, running_stack

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


async def serve(upstreams: list[FakeOpenAI], upstream: FakeOpenAI) -> FakeOpenAI:
    upstreams.append(await upstream.start())
    return upstream


async def sse(stack: Stack, model: str, content: str, path: str = "chat/completions") -> tuple[int, list[Any], dict[str, str]]:
    body: dict[str, Any] = {"model": model, "stream": True}
    body.update({"messages": [{"role": "user", "content": content}]} if path == "chat/completions" else {"prompt": content})
    async with stack.http.post(f"{stack.router_url}/{path}", json=body) as response:
        raw = (await response.read()).decode()
        headers = dict(response.headers)
    events = [line[6:] for line in raw.split("\n\n") if line.startswith("data: ")]
    return response.status, [e if e == "[DONE]" else json.loads(e) for e in events], headers


async def test_echo_member_answers_streamed_and_unstreamed(stack: Stack) -> None:
    await stack.apply(member("echo", backend="echo", models=[{"name": "echo"}]))
    await eventually(lambda: stack.served("echo"), message="echo served")
    status, body, headers = await stack.chat("echo", "the quick brown fox")
    assert status == 200 and headers["x-jetway-member"] == "echo"
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {"role": "assistant", "content": "the quick brown fox"}
    assert body["usage"]["completion_tokens"] == 4 and body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 4

    status, events, headers = await sse(stack, "echo", "the quick brown fox")
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    assert events[-1] == "[DONE]"
    words = [e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"] and not e["choices"][0]["finish_reason"]]
    assert words == ["", "the ", "quick ", "brown ", "fox"], "one chunk per word after the role chunk"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"

    status, events, _ = await sse(stack, "echo", "plain prompt", path="completions")
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "plain prompt"
    async with stack.http.post(f"{stack.router_url}/completions", json={"model": "echo", "prompt": "abc"}) as response:
        assert (await response.json())["choices"][0]["text"] == "abc"


async def test_two_members_share_load_one_over_https_with_a_private_ca_and_tokens(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    ca = make_ca()
    plain = await serve(upstreams, FakeOpenAI(name="a", models=["qwen"], token="token-a"))
    secure = await serve(upstreams, FakeOpenAI(name="b", models=["qwen"], token="token-b", tls=ca.server_context()))
    stack.secrets.set("a", b"token-a\n")
    stack.secrets.set("b", b"token-b")
    stack.secrets.set("lab-ca", ca.ca_pem)
    await stack.apply(member("a", plain.url, models=[{"name": "qwen"}], authSecretRef="a"))
    await stack.apply(member("b", secure.url, models=[{"name": "qwen"}], authSecretRef="b", caFileRef="lab-ca"))

    async def both_ready() -> bool:
        async with stack.http.get(f"{stack.router_url}/models") as response:
            return (await response.json())["data"] == [
                {"id": "qwen", "object": "model", "created": 0, "owned_by": "jetway", "members": ["a", "b"]}
            ]

    await eventually(both_ready, message="both members ready")
    served = Counter()
    for i in range(40):
        status, body, headers = await stack.chat("qwen", f"q{i}")
        assert status == 200, body
        served[headers["x-jetway-member"]] += 1
        assert body["choices"][0]["message"]["content"] == f"{headers['x-jetway-member']}: q{i}"
    assert served == {"a": 20, "b": 20}, "equal members share sequential load evenly"
    # concurrent load spreads too
    results = await asyncio.gather(*(stack.chat("qwen", f"c{i}") for i in range(30)))
    assert {r[2]["x-jetway-member"] for r in results} == {"a", "b"}
    assert all(r.authorization == "Bearer token-a" for r in plain.requests)
    assert all(r.authorization == "Bearer token-b" for r in secure.requests)


async def test_https_without_the_ca_is_unreachable_with_the_reason(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    secure = await serve(upstreams, FakeOpenAI(models=["m"], tls=make_ca().server_context()))
    await stack.apply(member("untrusted", secure.url))
    condition = await eventually(lambda: stack.condition("untrusted", "Healthy"), message="probed")
    assert condition["status"] == "False" and condition["reason"] == "Unreachable"
    assert "certificate" in condition["message"] and "not trusted" in condition["message"]
    assert (await stack.status("untrusted"))["phase"] == "Failed"


async def test_missing_declared_model_flips_models_advertised_and_is_not_routed(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    upstream = await serve(upstreams, FakeOpenAI(models=["m"]))
    await stack.apply(member("gpu", upstream.url, models=[{"name": "m"}, {"name": "missing-a"}, {"name": "missing-b"}]))

    async def advertised() -> dict[str, Any] | None:
        found = await stack.condition("gpu", "ModelsAdvertised")
        return found if found and found["status"] != "Unknown" else None

    condition = await eventually(advertised, message="probed")
    assert condition["status"] == "False" and condition["reason"] == "ModelsMissing"
    assert condition["message"] == "declared models not advertised by the upstream: missing-a, missing-b"
    assert (await stack.condition("gpu", "Healthy"))["status"] == "True"
    assert (await stack.chat("m"))[0] == 200
    status, body, _ = await stack.chat("missing-a")
    assert status == 503 and body["error"]["code"] == "upstream_unavailable"

    upstream.models = ["m", "missing-a", "missing-b"]
    await eventually(lambda: stack.served("missing-a"), message="advertised after the next tick")

    async def advertised_all() -> bool:  # the router knows first; the condition follows through the event stream
        return (await stack.condition("gpu", "ModelsAdvertised"))["status"] == "True"

    await eventually(advertised_all, message="ModelsAdvertised True")


async def test_draining_lets_an_in_flight_stream_finish_and_takes_no_new_request(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    held = await serve(upstreams, FakeOpenAI(name="held", models=["m"]))
    other = await serve(upstreams, FakeOpenAI(name="other", models=["m"]))
    await stack.apply(member("held", held.url))
    await eventually(lambda: stack.served("m"), message="held ready")
    held.hold = asyncio.Event()
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "one two three"}]}
    async with stack.http.post(f"{stack.router_url}/chat/completions", json=body) as response:
        first = await response.content.readuntil(b"\n\n")
        assert b"held:" in first and response.headers["x-jetway-member"] == "held"
        # the stream is in flight: drain the member and bring another in
        await stack.apply(member("held", held.url, draining=True))
        await stack.apply(member("other", other.url))
        await eventually(lambda: stack.served("m", by="other"), message="other ready")
        for _ in range(5):
            status, _, headers = await stack.chat("m", "new")
            assert status == 200 and headers["x-jetway-member"] == "other"
        held.hold.set()
        rest = (await response.read()).decode()
    assert "one " in rest and "three " in rest and rest.rstrip().endswith("data: [DONE]")
    assert len(held.completions) == 1

    # undraining re-admits the member only after a successful probe
    await held.stop()
    await stack.apply(member("held", held.url, draining=False))
    await eventually(lambda: stack.condition("held", "Healthy"), message="probed")
    for _ in range(4):
        assert (await stack.chat("m"))[2]["x-jetway-member"] == "other"


async def test_a_member_whose_upstream_dies_stops_getting_traffic_within_one_tick(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    doomed = await serve(upstreams, FakeOpenAI(name="doomed", models=["m"]))
    steady = await serve(upstreams, FakeOpenAI(name="steady", models=["m"]))
    await stack.apply(member("doomed", doomed.url))
    await stack.apply(member("steady", steady.url))

    async def two() -> bool:
        async with stack.http.get(f"{stack.router_url}/models") as response:
            data = (await response.json())["data"]
            return bool(data) and data[0]["members"] == ["doomed", "steady"]

    await eventually(two, message="both ready")
    await doomed.stop()
    # requests right away are retried on the steady member: no error reaches the client
    for _ in range(6):
        status, body, headers = await stack.chat("m")
        assert status == 200 and headers["x-jetway-member"] == "steady", body

    async def unhealthy() -> dict[str, Any] | None:
        found = await stack.condition("doomed", "Healthy")
        return found if found and found["status"] == "False" else None

    condition = await eventually(unhealthy, timeout=15, message="probed unhealthy")
    assert condition["reason"] == "Unreachable" and "connect" in condition["message"]


async def test_retry_happens_once_then_503(stack: Stack, upstreams: list[FakeOpenAI]) -> None:
    only = await serve(upstreams, FakeOpenAI(models=["m"]))
    await stack.apply(member("only", only.url))
    await eventually(lambda: stack.served("m"), message="ready")
    await only.stop()
    status, body, headers = await stack.chat("m")
    assert status == 503 and headers.get("Retry-After") == "1"
    assert body["error"]["type"] == "server_error" and "only" in body["error"]["message"]


async def test_bearer_token_reaches_the_upstream_and_nowhere_else(
    stack: Stack, upstreams: list[FakeOpenAI], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = "sk-super-secret-value-3141592653"
    upstream = await serve(upstreams, FakeOpenAI(models=["m"], token=token))
    stack.secrets.set("vault-key", token.encode())
    await stack.apply(member("gpu", upstream.url, authSecretRef="vault-key"))
    await eventually(lambda: stack.served("m"), message="ready")
    status, _, _ = await stack.chat("m", "hi", stream=False)
    assert status == 200 and upstream.completions[-1].authorization == f"Bearer {token}"
    upstream.token = "rotated"  # the upstream now wants another token: probes fail until the secret is rotated
    await eventually(lambda: stack.condition("gpu", "Healthy"), message="probed")

    async def unhealthy() -> bool:
        return (await stack.condition("gpu", "Healthy") or {}).get("reason") == "ProbeFailed"

    await eventually(unhealthy, message="401 seen")

    nc = await connect(stack.nats_url, name="check")
    items = await EventStore(nc, producer="t").read()
    await nc.close()
    everything = json.dumps([i.__struct_fields__ and str(i) for i in items])
    assert token not in everything and "vault-key" in everything
    _, view = await stack.get("/v1/kinds/ipm/gpu")
    assert token not in json.dumps(view)
    assert token not in caplog.text
    config = ClientConfig(stack.api_url, stack.router_url, stack.token, stack.nats_url).write(tmp_path / "client")
    shown = await asyncio.get_running_loop().run_in_executor(
        None, lambda: run_jetway("get", "ipm", "gpu", "-o", "yaml", "--data-dir", str(config.parent))
    )
    assert shown.returncode == 0 and "authSecretRef: vault-key" in shown.stdout and token not in shown.stdout + shown.stderr


async def test_rotated_secret_takes_effect_without_reapplying_and_a_missing_one_is_a_condition(
    stack: Stack, upstreams: list[FakeOpenAI]
) -> None:
    upstream = await serve(upstreams, FakeOpenAI(models=["m"], token="old"))
    await stack.apply(member("gpu", upstream.url, authSecretRef="key"))
    missing = await eventually(lambda: stack.condition("gpu", "Healthy"), message="probed")
    assert (missing["status"], missing["reason"]) == ("False", "SecretNotFound")
    assert missing["message"] == "secret 'key' (authSecretRef) not found in the secret store"
    stack.secrets.set("key", b"old")
    await eventually(lambda: stack.served("m"), message="healthy once the secret exists")
    upstream.token = "new"
    stack.secrets.set("key", b"new")
    await eventually(lambda: upstream.requests[-1].authorization == "Bearer new", message="the next probe uses the new token")

    async def chat_ok() -> bool:  # a probe caught between the two changes above may have marked it unhealthy
        return (await stack.chat("m"))[0] == 200

    await eventually(chat_ok, message="served with the new token")
    assert upstream.completions[-1].authorization == "Bearer new"


async def test_openai_shaped_errors(stack: Stack) -> None:
    await stack.apply(member("echo", backend="echo", models=[{"name": "echo", "contextWindow": 50}]))
    await eventually(lambda: stack.served("echo"), message="ready")

    async def post(body: Any, path: str = "chat/completions", raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
        kwargs: dict[str, Any] = {"data": raw} if raw is not None else {"json": body}
        async with stack.http.post(f"{stack.router_url}/{path}", **kwargs) as response:
            return response.status, await response.json(content_type=None)

    status, body = await post(None, raw=b"{oops")
    assert status == 400 and body["error"]["type"] == "invalid_request_error" and "not valid JSON" in body["error"]["message"]
    assert (await post({"messages": []}))[1]["error"]["param"] == "model"
    assert (await post({"model": "echo"}))[1]["error"]["param"] == "messages"
    assert (await post({"model": "echo"}, path="completions"))[1]["error"]["param"] == "prompt"
    status, body = await post({"model": "gpt-9", "messages": []})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    status, body = await post({"model": "echo", "messages": [{"role": "user", "content": "x" * 200}], "max_tokens": 10})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"  # as OpenAI's API and vLLM answer
    assert (
        "about 64 tokens (54 prompt tokens, estimated at 4 characters per token plus 4 per message, and 10 max_tokens)"
        in body["error"]["message"]
        and "50-token context window" in body["error"]["message"]
    )
    assert (await post({"model": "echo", "messages": [{"role": "user", "content": "x" * 100}]}))[0] == 200
    async with stack.http.get(f"{stack.router_url}/chat/completions") as response:
        assert response.status == 405
    async with stack.http.get(f"{stack.router_url}/nowhere") as response:
        assert response.status == 404 and "error" in await response.json()


async def test_models_lists_ready_members_and_the_operator_agent_ands_traits(stack: Stack) -> None:
    async with stack.http.get(f"{stack.router_url}/chat/agents/operator") as response:
        assert await response.json() == {"id": "operator", "supports_multi_conversation": True}, "an empty pool supports it"
    await stack.apply(member("one", backend="echo", models=[{"name": "e1"}]))
    await stack.apply(member("two", backend="echo", models=[{"name": "e2"}], traits={"supportsMultiConversation": False}))
    await stack.apply(member("drained", backend="echo", models=[{"name": "e3"}], draining=True))

    async def listed() -> list[str]:
        async with stack.http.get(f"{stack.router_url}/models") as response:
            return [m["id"] for m in (await response.json())["data"]]

    await eventually(lambda: _equals(listed(), ["e1", "e2"]), message="ready models listed")
    async with stack.http.get(f"{stack.router_url}/chat/agents/operator") as response:
        assert (await response.json())["supports_multi_conversation"] is False
    await stack.apply(member("two", backend="echo", models=[{"name": "e2"}]))

    async def supported() -> bool:
        async with stack.http.get(f"{stack.router_url}/chat/agents/operator") as response:
            return bool((await response.json())["supports_multi_conversation"])

    await eventually(supported, message="the trait change reaches the router")


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_operator_signal_member_answers_through_a_compute_agent(stack: Stack, upstreams: list[FakeOpenAI], tmp_path: Path) -> None:
    local = await serve(upstreams, FakeOpenAI(name="nas", models=["llama"], token="agent-token"))
    await stack.apply(member("ai-nas-0", models=[{"name": "llama"}], transport="operator-signal", computeOperatorRef="nas-compute"))
    absent = await eventually(lambda: stack.condition("ai-nas-0", "Healthy"), message="probed")
    assert (absent["status"], absent["reason"]) == ("False", "ComputeOperatorNotEnrolled")
    assert (await stack.chat("llama"))[0] == 503

    token_file = tmp_path / "agent-token"
    token_file.write_text("agent-token\n")
    nc = await connect(stack.nats_url, name="agent")
    stop = asyncio.Event()
    agent = ComputeAgent(nc, "nas-compute", local.url, token_file=token_file)
    running = asyncio.create_task(agent.run(stop))
    try:
        await eventually(lambda: stack.served("llama"), message="healthy through the agent")

        async def healthy() -> bool:  # the status follows the router's state through the event stream
            return (await stack.status("ai-nas-0"))["phase"] == "Healthy"

        await eventually(healthy, message="phase Healthy")
        status, body, headers = await stack.chat("llama", "over the bus")
        assert status == 200 and body["choices"][0]["message"]["content"] == "nas: over the bus"
        assert headers["x-jetway-member"] == "ai-nas-0"
        status, events, _ = await sse(stack, "llama", "streamed over the bus")
        assert status == 200 and events[-1] == "[DONE]"
        assert "".join(e["choices"][0]["delta"]["content"] for e in events[:-1]) == "nas: streamed over the bus "
        assert all(r.authorization == "Bearer agent-token" for r in local.requests), "the agent adds its own token"
    finally:
        stop.set()
        await running
        await nc.close()


async def test_client_gone_mid_stream_does_not_mark_the_member_failed(
    stack: Stack, upstreams: list[FakeOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jetway")
    upstream = await serve(upstreams, FakeOpenAI(models=["m"]))
    upstream.hold = asyncio.Event()
    await stack.apply(member("gpu", upstream.url))
    await eventually(lambda: stack.served("m"), message="ready")
    session = aiohttp.ClientSession()
    response = await session.post(
        f"{stack.router_url}/chat/completions", json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "a b c"}]}
    )
    await response.content.readuntil(b"\n\n")
    response.close()
    await session.close()
    await eventually(lambda: upstream.closed_early > 0, message="the upstream request closed when the client left")
    upstream.hold.set()
    upstream.hold = None
    for _ in range(3):
        assert (await stack.chat("m"))[0] == 200
    assert not [r for r in caplog.records if r.getMessage() == "member failed a request"]
