"""Input bounds through real HTTP, on the real watcher and gateway services and a real NATS.

Each case is a defect adversarial testing of `jetway up` found (issue 11, D1-D3 and D5): an
input that gave a 500, stalled the process or broke the NATS connection. Each must now be a
4xx with a field path and the rule, leave nothing stored, and leave the stack healthy. The
client timeout bounds every answer (a bound, not a measurement): a refusal is cheap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts.documents import MAX_DEPTH
from contracts.subjects import facet_filter
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.natsserver import NatsServer
from testbed.waiting import eventually
from tests.contracts.cases import IPC, MD, changed
from tests.support.stack import Stack, running_stack

ECHO: dict[str, Any] = {
    "apiVersion": "airdress.co/v1alpha1",
    "kind": "InferencePoolMember",
    "metadata": {"name": "echo"},
    "spec": {"backend": "echo", "models": [{"name": "echo"}]},
}
BOUND = aiohttp.ClientTimeout(total=2)  # no refusal may take longer than this


async def post(stack: Stack, body: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
    async with stack.http.post(
        f"{stack.api_url}/v1/apply", data=body, headers={**stack.auth, "Content-Type": content_type}, timeout=BOUND
    ) as response:
        return response.status, await response.json()


async def stored_specs(stack: Stack) -> int:
    nc = await connect(stack.nats_url, name="count")
    try:
        return len(await EventStore(nc, producer="t").read(facet_filter("spec")))
    finally:
        await nc.close()


async def still_healthy(stack: Stack) -> None:
    """The stack still takes a valid apply and says it is healthy."""
    status, body = await stack.apply(changed(ECHO, {"metadata.name": "after"}))
    assert status in (200, 201), body
    async with stack.http.get(f"{stack.api_url}/healthz", timeout=BOUND) as response:
        assert response.status == 200


def alias_bomb(levels: int = 8, width: int = 10) -> bytes:
    """The "billion laughs": `levels` anchors each aliasing the one before `width` times."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    manifest = "apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata: {name: bomb}\n"
    manifest += f"spec: {{backend: echo, models: [], x: *a{levels}}}\n"
    return ("\n".join(lines) + "\n" + manifest).encode()


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# --- D1: names and namespaces -----------------------------------------------------------------


async def test_a_namespace_longer_than_a_dns_label_is_a_400_and_the_bus_survives(stack: Stack) -> None:
    status, body = await post(stack, json.dumps(changed(MD, {"metadata.namespace": "n" * 4000})).encode(), "application/json")
    assert status == 400, body
    assert body["path"] == "metadata.namespace"
    assert "DNS label" in body["error"] and "63 characters" in body["error"]
    assert await stored_specs(stack) == 0
    assert stack.watcher.runner.nc.is_connected
    await still_healthy(stack)


async def test_names_and_namespaces_follow_kubernetes_rules_for_each_kind(stack: Stack) -> None:
    refused = [
        (changed(MD, {"metadata.namespace": "Prod_Team"}), "metadata.namespace", "DNS label"),
        (changed(MD, {"metadata.namespace": "a.b"}), "metadata.namespace", "DNS label"),
        (changed(IPC, {"metadata.name": "Acme Provider"}), "metadata.name", "DNS subdomain"),
        (changed(IPC, {"metadata.name": "a" * 254}), "metadata.name", "253"),
        (changed(ECHO, {"metadata.name": "e" * 254}), "metadata.name", "253"),
        (changed(ECHO, {"spec.transport": "operator-signal", "spec.computeOperatorRef": "c" * 4000}), "spec.computeOperatorRef", "253"),
    ]
    for doc, path, words in refused:
        status, body = await post(stack, json.dumps(doc).encode(), "application/json")
        assert (status, body["path"]) == (400, path), body
        assert words in body["error"], body
    assert await stored_specs(stack) == 0
    # The longest names each kind admits still make subjects the bus carries.
    longest = [
        changed(MD, {"metadata.namespace": "n" * 63, "metadata.name": "m" * 63}),
        changed(IPC, {"metadata.name": ".".join(["a" * 63] * 4)[:253]}),
        changed(ECHO, {"metadata.name": "\U0001f680" * 253}),
    ]
    for doc in longest:
        status, body = await post(stack, json.dumps(doc).encode(), "application/json")
        assert status == 201, body
    await still_healthy(stack)


# --- D2: alias bombs ---------------------------------------------------------------------------


async def test_a_yaml_alias_bomb_is_refused_at_once_and_the_api_keeps_answering(stack: Stack) -> None:
    body = alias_bomb()
    assert len(body) < 1024  # a few hundred bytes in, 10**8 nodes out
    status, answer = await post(stack, body, "application/yaml")
    assert status == 413, answer
    assert answer["code"] == "too_large" and "alias" in answer["error"]
    assert await stored_specs(stack) == 0
    await still_healthy(stack)


async def test_a_recursive_yaml_alias_is_a_400(stack: Stack) -> None:
    status, answer = await post(stack, b"&a [*a]\n", "application/yaml")
    assert status == 400 and answer["code"] == "invalid_manifest", answer
    assert "recursive" in answer["error"]


async def test_yaml_with_a_few_aliases_is_still_accepted(stack: Stack) -> None:
    body = (
        b"apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\n"
        b"metadata: {name: anchored, labels: &l {tier: demo}, annotations: *l}\n"
        b"spec: {backend: echo, models: [{name: a}]}\n"
    )
    status, answer = await post(stack, body, "application/yaml")
    assert status == 201, answer
    _, view = await stack.get("/v1/kinds/InferencePoolMember/anchored")
    assert view["metadata"]["annotations"] == {"tier": "demo"}


# --- D3: deep nesting --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 1000, 100_000])
async def test_json_nested_too_deep_is_a_400(stack: Stack, depth: int) -> None:
    body = b'{"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "deep"}, '
    body += b'"spec": {"backend": "echo", "models": ' + b"[" * depth + b"]" * depth + b"}}"
    status, answer = await post(stack, body, "application/json")
    assert status == 400, answer
    assert answer["code"] == "invalid_manifest" and f"more than {MAX_DEPTH} levels" in answer["error"]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 100_000])
async def test_yaml_nested_too_deep_is_a_400(stack: Stack, depth: int) -> None:
    body = b"spec: " + b"[" * depth + b"x" + b"]" * depth + b"\n"
    status, answer = await post(stack, body, "application/yaml")
    assert status == 400, answer
    assert f"more than {MAX_DEPTH} levels" in answer["error"]
    await still_healthy(stack)


@pytest.mark.parametrize(
    ("number", "content_type"),
    [
        ("1" + "0" * 5000, "application/yaml"),  # once a 500: Python's 4,300-digit conversion limit, a traceback logged
        ("1" + "0" * 5000, "application/json"),
        ("9223372036854775808", "application/json"),
        (".nan", "application/yaml"),
        ("-.inf", "application/yaml"),
        ("1e400", "application/json"),
    ],
)
async def test_a_number_out_of_range_is_a_400_and_nothing_is_stored(stack: Stack, number: str, content_type: str) -> None:
    body = (
        "apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata: {name: big}\n"
        f"spec: {{backend: echo, models: [{{name: m, contextWindow: {number}}}]}}\n"
        if content_type == "application/yaml"
        else '{"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": "big"}, '
        f'"spec": {{"backend": "echo", "models": [{{"name": "m", "contextWindow": {number}}}]}}}}'
    )
    status, answer = await post(stack, body.encode(), content_type)
    assert status == 400, answer
    said = json.dumps(answer)
    assert "out of range" in said or "not finite" in said, answer
    assert await stored_specs(stack) == 0
    await still_healthy(stack)


async def test_nesting_up_to_the_bound_is_read(stack: Stack) -> None:
    doc = changed(ECHO, {"metadata.name": "deep"})
    doc["spec"]["x"] = nested(MAX_DEPTH - 2)  # the document and spec are two levels
    status, answer = await post(stack, json.dumps(doc).encode(), "application/json")
    assert status == 400 and answer["path"] == "spec.x", answer  # read, then refused for the field, not the depth


async def test_a_chat_request_nested_too_deep_is_a_400_from_the_router(stack: Stack) -> None:
    assert (await stack.apply(ECHO))[0] == 201
    await eventually(lambda: stack.served("echo"), timeout=20, message="echo served")
    for body in (
        json.dumps({"model": "echo", "messages": [{"role": "user", "content": nested(500)}]}).encode(),
        b'{"model": "echo", "messages": [{"role": "user", "content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
    ):
        async with stack.http.post(
            f"{stack.router_url}/chat/completions", data=body, headers={"Content-Type": "application/json"}, timeout=BOUND
        ) as response:
            answer = await response.json(content_type=None)
            assert response.status == 400, answer
            assert answer["error"]["type"] == "invalid_request_error" and "levels" in answer["error"]["message"]
    status, answer, _ = await stack.chat("echo")
    assert status == 200, answer


# --- D5: decoded size and event size -----------------------------------------------------------


async def test_a_big_string_aliased_many_times_is_a_413(stack: Stack) -> None:
    big = "x" * 200_000
    body = (
        f"apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata:\n  name: wide\n  annotations:\n"
        f"    a0: &big {big}\n" + "".join(f"    a{i}: *big\n" for i in range(1, 61)) + "spec: {backend: echo, models: []}\n"
    ).encode()
    assert len(body) < 4 * 1024 * 1024
    status, answer = await post(stack, body, "application/yaml")
    assert status == 413, answer
    assert answer["code"] == "too_large" and "MiB" in answer["error"]
    assert await stored_specs(stack) == 0
    await still_healthy(stack)


async def test_a_manifest_whose_event_exceeds_the_nats_payload_limit_is_a_413(tmp_path: Path) -> None:
    # NATS' own default max_payload (1 MiB), as a cluster's NATS runs unless configured otherwise.
    server = NatsServer(store_dir=tmp_path / "nats", max_payload=1024 * 1024).start()
    try:
        async with running_stack(server.url, tmp_path) as stack:
            doc = changed(ECHO, {"metadata.annotations": {f"k{i}": "v" * 100_000 for i in range(15)}})
            body = json.dumps(doc).encode()
            assert 1024 * 1024 < len(body) < 4 * 1024 * 1024
            status, answer = await post(stack, body, "application/json")
            assert status == 413, answer
            assert answer["code"] == "too_large" and "bytes" in answer["error"]
            assert await stored_specs(stack) == 0
            assert stack.watcher.runner.nc.is_connected
            await still_healthy(stack)
    finally:
        server.stop()


# --- health tells the truth --------------------------------------------------------------------


async def test_healthz_is_503_once_the_nats_connection_is_closed(stack: Stack) -> None:
    async with stack.http.get(f"{stack.api_url}/healthz", timeout=BOUND) as response:
        assert response.status == 200
    await stack.watcher.runner.nc.close()
    async with stack.http.get(f"{stack.api_url}/healthz", timeout=BOUND) as response:
        assert response.status == 503
        assert (await response.json())["ok"] is False
