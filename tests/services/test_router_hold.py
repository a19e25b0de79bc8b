"""Holding requests for a model starting from zero: the decisions of services/router/hold.py, with plain data."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from contracts.events import Envelope, Event, ResourceApplied
from contracts.objects import MODEL_DEPLOYMENT, MODEL_DEPLOYMENT_NAMESPACE
from contracts.poolmember import FORMAT_LABEL
from contracts.router import MemberHealthChanged
from contracts.scaling import SCALE_FROM_ZERO
from contracts.subjects import SPEC, Key
from services.router import hold
from services.router.apis import ANTHROPIC_MESSAGES, OPENAI_CHAT
from services.router.projection import Members

AT_ZERO = {SCALE_FROM_ZERO: "true", MODEL_DEPLOYMENT: "qwen", MODEL_DEPLOYMENT_NAMESPACE: "team-a"}


def envelope(key: Key, facet: str, event: Event) -> Envelope:
    return Envelope(id="1", subject=key.subject(facet), producer=facet, time=datetime.now(UTC), event=event)


def members(*specs: tuple[str, dict[str, str], dict[str, Any]]) -> Members:
    folded = Members()
    for name, labels, extra in specs:
        key = Key("InferencePoolMember", "", name)
        spec = {"backend": "vllm-openai", "url": f"http://{name}:8000", "models": [{"name": "qwen"}], **extra}
        folded.fold(
            envelope(
                key, SPEC, ResourceApplied(kind="InferencePoolMember", namespace="", name=name, generation=1, spec=spec, labels=labels)
            )
        )
    return folded


def healthy(folded: Members, name: str) -> None:
    key = Key("InferencePoolMember", "", name)
    folded.fold(envelope(key, "router", MemberHealthChanged(generation=1, healthy=True, advertised=("qwen",))))


def waiter(api_format: str) -> hold.Waiter:
    return hold.Waiter(asyncio.get_running_loop().create_future(), api_format, 0.0, None)  # type: ignore[arg-type]


def test_a_model_is_held_only_through_a_member_marked_for_zero_in_the_request_s_format() -> None:
    marked = members(("a", AT_ZERO, {}))
    assert hold.holdable(marked.declaring("qwen"), OPENAI_CHAT)
    assert not hold.holdable(marked.declaring("qwen"), ANTHROPIC_MESSAGES), "no member of it takes /v1/messages"
    assert not hold.holdable(members(("a", {MODEL_DEPLOYMENT: "qwen"}, {})).declaring("qwen"), OPENAI_CHAT), "not marked: a 503"
    assert not hold.holdable(members(("a", AT_ZERO, {"draining": True})).declaring("qwen"), OPENAI_CHAT), "drained: no traffic"
    assert marked.declaring("qwen")[0].deployment == "team-a/qwen"


def test_the_bound() -> None:
    settings = hold.Settings(hold_max=2)
    assert hold.admit(0, settings) and hold.admit(1, settings) and not hold.admit(2, settings)
    assert not hold.admit(0, hold.Settings(hold_max=0))


async def test_released_in_arrival_order_when_a_member_takes_their_format() -> None:
    labels = {**AT_ZERO, f"{FORMAT_LABEL}{ANTHROPIC_MESSAGES}": "true"}
    folded = members(("chat-only", AT_ZERO, {}), ("both", labels, {}))
    queue = [waiter(OPENAI_CHAT), waiter(ANTHROPIC_MESSAGES), waiter(OPENAI_CHAT)]
    assert hold.ready_formats(folded, "qwen") == frozenset()
    healthy(folded, "chat-only")
    ready = hold.ready_formats(folded, "qwen")
    assert hold.releasable(queue, ready) == [queue[0], queue[2]], "the Anthropic request waits for a member that takes it"
    healthy(folded, "both")
    assert hold.releasable(queue, hold.ready_formats(folded, "qwen")) == queue
    queue[0].gone()
    assert hold.releasable(queue, hold.ready_formats(folded, "qwen")) == queue[1:], "a client that left is not released"


def test_demand_names_the_deployment_and_refusals_say_why() -> None:
    folded = members(("user", {}, {}), ("a", AT_ZERO, {}))
    demand = hold.demand_of("qwen", folded.declaring("qwen"), 3, "router-1")
    assert (demand.model, demand.deployment, demand.held, demand.router) == ("qwen", "team-a/qwen", 3, "router-1")
    settings = hold.Settings(hold_max=8, hold_seconds=30)
    message, code, retry = hold.refusal("qwen", hold.FULL, settings)
    assert code == "hold_queue_full" and "8 requests already wait" in message and retry == hold.RETRY_AFTER
    message, code, _ = hold.refusal("qwen", hold.TIMED_OUT, settings)
    assert code == "hold_timeout" and "within 30 s" in message
    assert hold.refusal("qwen", hold.STOPPING, settings)[1:] == ("router_stopping", 1)
