"""Fair tenants: the decisions of services/router/fair.py with plain data (which request goes next, the bounds, the
answers), and its queue with stand-in clients on the event loop, without a socket."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from contracts.events import Envelope, Event, ResourceApplied
from contracts.poolmember import FORMAT_LABEL
from contracts.router import MemberHealthChanged
from contracts.subjects import SPEC, Key
from runtime import settings
from services.router import fair
from services.router import main as router_main
from services.router.apis import ANTHROPIC_MESSAGES, APIS
from services.router.keys import (
    TENANT_WORDS,
    ClientKey,
    Gate,
    KeyRing,
    KeysError,
    Tenant,
    hash_key,
    new_key,
    parse_document,
    tenants,
)
from services.router.metrics import Recorder
from services.router.projection import Members

CHAT, MESSAGES, EMBEDDINGS = APIS["/v1/chat/completions"], APIS["/v1/messages"], APIS["/v1/embeddings"]


def drain(queue: fair.Queue[str]) -> list[str]:
    order = []
    while (entry := queue.pop()) is not None:
        order.append(entry.item)
    return order


# --- which request goes next --------------------------------------------------------------------------------


def test_a_light_tenant_goes_ahead_of_a_heavy_backlog() -> None:
    queue: fair.Queue[str] = fair.Queue()
    for i in range(10):
        queue.push("heavy", 1.0, 100, f"h{i}")
    queue.push("light", 1.0, 100, "l0")
    order = drain(queue)
    assert order.index("l0") <= 1, order  # at most the heavy tenant's first, which came before it
    assert [x for x in order if x.startswith("h")] == [f"h{i}" for i in range(10)], "each tenant's own order is kept"


def test_backlogged_tenants_are_served_tokens_in_proportion_to_their_weights() -> None:
    queue: fair.Queue[str] = fair.Queue()
    for i in range(60):
        queue.push("a", 2.0, 100, f"a{i}")
        queue.push("b", 1.0, 100, f"b{i}")
    first = Counter(x[0] for x in drain(queue)[:30])
    assert first == {"a": 20, "b": 10}, first


def test_the_cost_is_in_tokens_not_requests() -> None:
    queue: fair.Queue[str] = fair.Queue()
    for i in range(20):
        queue.push("long", 1.0, 1000, f"long{i}")
        queue.push("short", 1.0, 100, f"short{i}")
    first = Counter(x.rstrip("0123456789") for x in drain(queue)[:22])
    assert first == {"short": 20, "long": 2}, first  # ten short ones for each long one


def test_a_tenant_that_was_idle_gets_no_credit_for_it() -> None:
    queue: fair.Queue[str] = fair.Queue()
    queue.push("a", 1.0, 100, "a0")
    assert drain(queue) == ["a0"]
    for i in range(5):
        queue.push("b", 1.0, 100, f"b{i}")
    for i in range(5):
        drain_one = queue.pop()
        assert drain_one is not None and drain_one.item == f"b{i}"
    for i in range(3):
        queue.push("a", 1.0, 100, f"a{i + 1}")
        queue.push("b", 1.0, 100, f"b{i + 5}")
    assert drain(queue) == ["a1", "b5", "a2", "b6", "a3", "b7"], "a idle while b was served: they alternate from now, a not first thrice"


def test_a_request_that_leaves_gives_its_place_back_to_its_tenant() -> None:
    queue: fair.Queue[str] = fair.Queue()
    entries = [queue.push("a", 1.0, 100, f"a{i}") for i in range(3)]
    queue.push("b", 1.0, 100, "b0")
    queue.push("b", 1.0, 100, "b1")
    assert queue.remove(entries[0]) and not queue.remove(entries[0])
    assert (entries[1].start, entries[2].start) == (0.0, 100.0), "a's later requests moved up by its cost"
    assert len(queue) == 4 and queue.count("a") == 2
    assert drain(queue) == ["a1", "b0", "a2", "b1"]
    assert len(queue) == 0 and not queue.tenants


def test_a_released_request_put_back_is_first_again_and_pop_skips_what_is_not_eligible() -> None:
    queue: fair.Queue[str] = fair.Queue()
    queue.push("a", 1.0, 100, "a0")
    queue.push("b", 1.0, 100, "b0")
    queue.push("a", 1.0, 100, "a1")
    first = queue.pop()
    assert first is not None and first.item == "a0"
    queue.put_back(first)
    skipped = queue.pop(lambda item: item != "a0")
    assert skipped is not None and skipped.item == "b0", "a's first is not eligible: a waits, in its order"
    assert drain(queue) == ["a0", "a1"]


def test_idle_tenants_are_forgotten() -> None:
    queue: fair.Queue[str] = fair.Queue()
    for name in ("a", "b", "c"):
        queue.push(name, 1.0, 100, name)
    drain(queue)
    assert not queue.finish, "nobody waits: every tenant starts afresh"
    queue.push("a", 1.0, 100, "a")
    for i in range(4):
        queue.push("b", 1.0, 100, f"b{i}")
    for _ in range(3):
        queue.pop()
    assert set(queue.finish) == {"b"}, "a is idle and behind the clock: forgotten"


# --- the bounds and the answers -------------------------------------------------------------------------


def test_the_bounds_tenant_first_then_the_model() -> None:
    settings = fair.Settings(per_member=1, queue_max=4, tenant_max=2)
    assert fair.admit(0, 0, settings, keyed=True) is None
    assert fair.admit(3, 1, settings, keyed=True) is None
    assert fair.admit(3, 2, settings, keyed=True) == fair.TENANT_FULL
    assert fair.admit(4, 1, settings, keyed=True) == fair.FULL
    assert fair.admit(3, 3, settings, keyed=False) is None, "without keys one tenant: the queue's bound alone"
    assert fair.admit(4, 4, settings, keyed=False) == fair.FULL


def test_the_answers_say_why_and_name_the_setting() -> None:
    settings = fair.Settings(per_member=2, queue_max=8, tenant_max=3, seconds=5)
    status, message, kind, code, retry = fair.refusal("qwen", fair.TENANT_FULL, settings, "team-a")
    assert (status, kind, code, retry) == (429, "rate_limit_error", "tenant_queue_full", 1)
    assert "'team-a' already has 3 requests waiting" in message and "JETWAY_ROUTER_FAIR_TENANT_MAX" in message
    status, message, _, code, _ = fair.refusal("qwen", fair.FULL, settings)
    assert (status, code) == (503, "fair_queue_full") and "JETWAY_ROUTER_FAIR_QUEUE_MAX" in message
    status, message, _, code, _ = fair.refusal("qwen", fair.TIMED_OUT, settings)
    assert (status, code) == (503, "fair_queue_timeout") and "within 5 s" in message
    assert fair.refusal("qwen", fair.STOPPING, settings)[3] == "router_stopping"


def test_the_cost_is_the_router_s_estimate() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 50}
    assert fair.cost(CHAT, body, b"") == 100 + 4 + 50
    assert fair.cost(EMBEDDINGS, {"model": "m", "input": "y" * 40}, b"z" * 80) == 20, "no prompt field: the body's length"
    assert fair.cost(CHAT, {"model": "m", "messages": []}, b"") == 1


def test_a_key_may_carry_a_weight_and_a_bad_one_is_named() -> None:
    sha = "a" * 64
    ring = parse_document({"keys": [{"name": "a", "sha256": sha, "weight": 2.5}]})
    assert ring.keys[0].weight == 2.5 and ring.keys[0].to_json()["weight"] == 2.5
    assert "weight" not in parse_document({"keys": [{"name": "a", "sha256": sha}]}).keys[0].to_json()
    for bad in (0, -1, "2", True, 1001):
        with pytest.raises(KeysError) as refused:
            parse_document({"keys": [{"name": "a", "sha256": sha, "weight": bad}]})
        assert refused.value.problems[0].startswith("keys[0].weight: must be a positive number"), refused.value.problems


def test_a_key_may_carry_a_tenant_label_and_a_bad_one_is_named_without_its_value() -> None:
    sha = "b" * 64
    ring = parse_document({"keys": [{"name": "a", "sha256": sha, "tenant": "research"}]})
    assert ring.keys[0].tenant == "research" and ring.keys[0].to_json()["tenant"] == "research"
    assert parse_document(json.loads(ring.dump())) == ring, "it survives a dump and a read"
    old = parse_document({"keys": [{"name": "a", "sha256": sha, "weight": 2}]})  # a document from before tenants
    assert old.keys[0].tenant is None and "tenant" not in old.keys[0].to_json() and old.tenant_of(old.keys[0]).name == "a"
    for bad in ("Research", "-x", "a_b", "x" * 64, "", 7, True):
        with pytest.raises(KeysError) as refused:
            parse_document({"keys": [{"name": "a", "sha256": sha, "tenant": bad}]})
        assert refused.value.problems == (f"keys[0].tenant: {TENANT_WORDS}",), refused.value.problems
    assert parse_document({"keys": [{"name": "a", "sha256": sha, "tenant": "x" * 63}]}).keys[0].tenant == "x" * 63


def test_the_keys_of_one_tenant_are_one_tenant_at_the_largest_of_their_weights() -> None:
    keys = (
        ClientKey("ci", "1" * 64, weight=3, tenant="research"),
        ClientKey("notebooks", "2" * 64, tenant="research"),  # weight absent: 1
        ClientKey("research", "3" * 64, weight=0.5),  # no label, named as the tenant: its own tenant is the same one
        ClientKey("ops", "4" * 64, weight=2),
        ClientKey("batch", "5" * 64),
    )
    found = tenants(keys)
    assert found == {
        "research": Tenant("research", 3, 3),
        "ops": Tenant("ops", 2, 1),
        "batch": Tenant("batch", 1.0, 1),
    }
    ring = KeyRing(keys)
    assert {ring.tenant_of(k) for k in keys[:3]} == {Tenant("research", 3, 3)}, "whichever key sent it, one weight"
    assert ring.tenant_of(ClientKey("stray", "6" * 64, weight=4)) == Tenant("stray", 4, 1), "a key not in the ring"
    assert tenants([*keys, ClientKey("more", "7" * 64, tenant="research")])["research"].weight == 3, "a key more: no more share"


def test_a_tenant_s_keys_share_its_place_in_the_queue() -> None:
    queue: fair.Queue[str] = fair.Queue()
    ring = KeyRing((ClientKey("a1", "1" * 64, tenant="a"), ClientKey("a2", "2" * 64, tenant="a"), ClientKey("b", "3" * 64)))
    for i in range(4):
        for key in ("a1", "a2", "b"):
            named = ring.named(key)
            assert named is not None
            of = ring.tenant_of(named)
            queue.push(of.name, of.weight, 100, f"{key}.{i}")
    first = Counter(x.split(".")[0] for x in drain(queue)[:6])
    assert first == {"a1": 2, "a2": 1, "b": 3}, "a's two keys get a's half between them, b alone gets the other half"


def test_the_tenant_s_429_names_the_tenant_and_the_key() -> None:
    settings = fair.Settings(per_member=2, queue_max=8, tenant_max=3)
    message = fair.refusal("qwen", fair.TENANT_FULL, settings, "research", "ci")[1]
    assert "the tenant 'research' (of the key 'ci') already has 3 requests waiting" in message
    assert "the key 'team-a' already has" in fair.refusal("qwen", fair.TENANT_FULL, settings, "team-a")[1]


# --- the queue on the loop, with stand-in clients ---------------------------------------------------------


@dataclass
class Listener:
    draining: bool = False


@dataclass
class Client:
    listener: Listener = field(default_factory=Listener)
    closed: bool = False
    on_lost: Any = None
    answers: list[tuple[int, dict[str, Any], dict[bytes, bytes]]] = field(default_factory=list)

    def respond(self, status: int, body: bytes, content_type: bytes = b"", extra: Any = ()) -> None:
        self.answers.append((status, json.loads(body), dict(extra)))

    def leave(self) -> None:
        self.closed = True
        if self.on_lost is not None:
            self.on_lost()


@dataclass
class Asked:
    headers: dict[bytes, bytes]
    body: bytes = b""


def envelope(key: Key, facet: str, event: Event) -> Envelope:
    return Envelope(id="1", subject=key.subject(facet), producer=facet, time=datetime.now(UTC), event=event)


def applied(folded: Members, name: str) -> Key:
    """A member of qwen applied, not yet probed."""
    key = Key("InferencePoolMember", "", name)
    spec = {"backend": "vllm-openai", "url": f"http://{name}:8000", "models": [{"name": "qwen"}]}
    labels = {f"{FORMAT_LABEL}{ANTHROPIC_MESSAGES}": "true"}
    event = ResourceApplied(kind="InferencePoolMember", namespace="", name=name, generation=1, spec=spec, labels=labels)
    folded.fold(envelope(key, SPEC, event))
    return key


def healthy(folded: Members, key: Key) -> None:
    folded.fold(envelope(key, "router", MemberHealthChanged(generation=1, healthy=True, advertised=("qwen",))))


def ready_members(*names: str) -> Members:
    folded = Members()
    for name in names:
        healthy(folded, applied(folded, name))
    return folded


class Stand:
    """A Fair over ready members, keys a, b (weight 1) and the calls a router would make."""

    def __init__(self, settings: fair.Settings, *names: str) -> None:
        self.members = ready_members(*names)
        self.keys = {name: new_key() for name in ("a", "b", "c")}
        ring = KeyRing(tuple(ClientKey(name, hash_key(key)) for name, key in self.keys.items()))
        self.gate = Gate(lambda: ring)
        self.fair = fair.Fair(self.members, settings, recorder=Recorder())

    def ask(self, tenant: str, client: Client | None = None, api: Any = CHAT) -> tuple[Client, asyncio.Task[list[Any] | None]]:
        client = client or Client()
        body = {"model": "qwen", "messages": [{"role": "user", "content": "hello " * 40}], "max_tokens": 10}
        headers = {b"authorization": f"Bearer {self.keys[tenant]}".encode()}
        fitting = self.fair.eligible("qwen", api.format, None)
        task = asyncio.create_task(self.fair.wait(self.gate, client, Asked(headers), api, "qwen", body, fitting))  # type: ignore[arg-type]
        return client, task

    async def sent(self, task: asyncio.Task[list[Any] | None]) -> Any:
        """What the caller does once let through: the request is in flight on the first member offered."""
        members = await task
        assert members, "let through"
        member = members[0]
        self.members.traffic_of(member.key).outstanding += 1
        return member

    def done(self, member: Any) -> None:
        self.members.traffic_of(member.key).outstanding -= 1
        self.fair.freed(member)

    def queued(self) -> int:
        return sum(count for _, count in self.fair.counts())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_released_in_fair_order_as_slots_free() -> None:
    stand = Stand(fair.Settings(per_member=1, queue_max=16, tenant_max=8), "m0")
    _, first = stand.ask("a")
    member = await stand.sent(first)
    heavy = [stand.ask("a")[1] for _ in range(4)]
    await settle()
    _, light = stand.ask("b")
    await settle()
    assert stand.queued() == 5
    order = []
    for _ in range(5):
        stand.done(member)
        await settle()
        released = [t for t in (*heavy, light) if t.done() and t not in order]
        assert len(released) == 1, "one slot, one request released"
        order += released
        member = await stand.sent(released[0])
    assert order.index(light) <= 1, "the light tenant goes ahead of the heavy backlog"
    assert [t for t in order if t is not light] == heavy, "the heavy tenant's own order is kept"
    assert stand.queued() == 0 and not stand.fair.queues and not stand.fair.reserved


async def test_a_client_that_leaves_frees_its_place_and_its_slot() -> None:
    stand = Stand(fair.Settings(per_member=1), "m0")
    member = await stand.sent(stand.ask("a")[1])
    leaving, gone = stand.ask("a")
    _, stays = stand.ask("b")
    await settle()
    leaving.leave()
    await settle()
    assert gone.done() and gone.result() is None and not leaving.answers, "no answer to a client that left"
    assert stand.queued() == 1
    stand.done(member)
    await settle()
    assert stays.done() and ((await stays) or [None])[0] is member
    # a request released at the moment its client leaves hands its slot on
    member = await stand.sent(stays)
    leaving, gone = stand.ask("a")
    _, next_one = stand.ask("b")
    await settle()
    stand.done(member)
    leaving.leave()  # released, not yet resumed
    await settle()
    assert gone.result() is None and next_one.done() and next_one.result(), "the slot went to the next one"


async def test_full_queues_and_the_wait_s_end_are_answered() -> None:
    stand = Stand(fair.Settings(per_member=1, queue_max=3, tenant_max=2, seconds=0.05), "m0")
    await stand.sent(stand.ask("a")[1])
    waiting = [stand.ask("a") for _ in range(2)]
    await settle()
    over, refused = stand.ask("a")
    assert await refused is None
    status, body, extra = over.answers[0]
    assert (status, body["error"]["code"], extra[b"retry-after"]) == (429, "tenant_queue_full", b"1")
    assert stand.keys["a"] not in json.dumps(body), "never the key, only its name"
    stand.ask("b")
    await settle()
    full, refused = stand.ask("b", api=MESSAGES)
    assert await refused is None
    status, body, extra = full.answers[0]
    assert (status, body["type"], body["error"]["type"], extra[b"retry-after"]) == (503, "error", "overloaded_error", b"1")
    for client, task in waiting:
        assert await task is None
        assert client.answers[0][0] == 503 and client.answers[0][1]["error"]["code"] == "fair_queue_timeout"


async def test_no_queue_while_a_member_has_room_nor_when_none_is_ready() -> None:
    stand = Stand(fair.Settings(per_member=2), "m0", "m1")
    first = await stand.sent(stand.ask("a")[1])
    _, second = stand.ask("a")
    offered = await second
    assert offered is not None and {m.name for m in offered} == {"m0", "m1"}, "both still have room"
    stand.members.traffic_of(first.key).outstanding += 1
    _, third = stand.ask("a")
    assert [m.name for m in (await third) or []] == ["m1"], "only the member with room"
    assert await stand.fair.wait(stand.gate, Client(), Asked({}), CHAT, "qwen", None, []) == []  # type: ignore[arg-type]


async def test_a_member_that_becomes_ready_takes_the_queued_when_the_queue_is_woken() -> None:
    stand = Stand(fair.Settings(per_member=1), "m0")
    await stand.sent(stand.ask("a")[1])
    _, waiting = stand.ask("b")
    await settle()
    assert stand.queued() == 1
    key = applied(stand.members, "m1")
    stand.fair.wake(["qwen"])
    await settle()
    assert not waiting.done(), "applied but not yet probed: not ready, no slot"
    healthy(stand.members, key)
    stand.fair.wake(["other-model"])
    await settle()
    assert not waiting.done(), "a wake for another model leaves qwen's queue alone"
    stand.fair.wake(["qwen"])  # what the router service does when it folds a member's health (handlers.py)
    await settle()
    assert [m.name for m in (await waiting) or []] == ["m1"], "released on the member that became ready"
    assert stand.queued() == 0 and not stand.fair.queues


async def test_a_tenant_s_keys_count_against_one_share() -> None:
    stand = Stand(fair.Settings(per_member=1, tenant_max=2), "m0")
    ring = KeyRing(
        (
            ClientKey("a", hash_key(stand.keys["a"]), tenant="team"),
            ClientKey("b", hash_key(stand.keys["b"]), tenant="team", weight=2),
            ClientKey("c", hash_key(stand.keys["c"])),
        )
    )
    stand.gate = Gate(lambda: ring)
    await stand.sent(stand.ask("c")[1])
    waiting = [stand.ask("a")[1], stand.ask("b")[1]]
    await settle()
    tokens = 240 // 4 + 4 + 10  # Stand's prompt, its one message and max_tokens
    assert [(e.tenant, e.finish - e.start) for e in stand.fair.queues["qwen"]] == [("team", tokens / 2)] * 2, "one tenant, weight 2"
    over, refused = stand.ask("a")
    assert await refused is None
    status, body, _ = over.answers[0]
    assert (status, body["error"]["code"]) == (429, "tenant_queue_full") and "the tenant 'team' (of the key 'a')" in body["error"][
        "message"
    ]
    _, other = stand.ask("c")
    await settle()
    assert not other.done() and stand.queued() == 3, "another tenant still queues"
    for task in (*waiting, other):
        task.cancel()
    await asyncio.gather(*waiting, other, return_exceptions=True)


async def test_a_draining_router_queues_nothing_new() -> None:
    stand = Stand(fair.Settings(per_member=1), "m0")
    await stand.sent(stand.ask("a")[1])
    client = Client(Listener(draining=True))
    _, refused = stand.ask("b", client)
    assert await refused is None and client.answers[0][1]["error"]["code"] == "router_stopping"


def test_the_settings_come_from_the_environment_and_a_bad_one_is_named() -> None:
    config = settings.load({"JETWAY_ROUTER_FAIR_PER_MEMBER": "4", "JETWAY_ROUTER_FAIR_SECONDS": "2.5"}).router
    routes = SimpleNamespace(fair=None)
    router_main.fair_queue(SimpleNamespace(routes=routes, service=SimpleNamespace(members=Members())), config)  # type: ignore[arg-type]
    assert routes.fair is not None and routes.fair.settings == fair.Settings(per_member=4, queue_max=256, tenant_max=64, seconds=2.5)
    off = SimpleNamespace(fair=None)
    router_main.fair_queue(SimpleNamespace(routes=off, service=None), settings.load({}).router)  # type: ignore[arg-type]
    assert off.fair is None, "off unless JETWAY_ROUTER_FAIR_PER_MEMBER is set"
    bad = (("JETWAY_ROUTER_FAIR_PER_MEMBER", "-1"), ("JETWAY_ROUTER_FAIR_QUEUE_MAX", "0"), ("JETWAY_ROUTER_FAIR_SECONDS", "x"))
    for name, value in bad:
        with pytest.raises(ValueError, match=f"^{name} must be"):
            settings.load({name: value})
