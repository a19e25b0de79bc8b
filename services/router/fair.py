"""Fair tenants (issue 26 #3): when a model's members are saturated, its requests wait in a queue that releases them
fairly by tenant (a client key, or the keys that share a tenant label), weighted, counted in tokens (docs/router.md,
"Fair tenants").

**Saturated** means, for a request: every ready member of its model that takes its API format and fits it (the
members `_dispatch` would choose among) has `per_member` requests in flight from this router
(`Traffic.outstanding`, counting the ones released from the queue and not yet sent). `per_member` 0 turns all of
this off. The members' own Saturated condition is not used to admit: it is a probe tick old and nothing this
router does frees it, so the cap and the members that may take a request are what a slot depends on: a request's end
(`freed`, in `_dispatch`) and a member that may have become ready (`wake`: its health folded, its failure mark
cleared; handlers.py) release the next ones.

**The queue** (one per model) is start-time fair queueing (Goyal, Vin and Cheng, 1996): a request of cost c from a
tenant of weight w gets the start tag max(V, the tenant's last finish tag) and the finish tag start + c / w; the
queue releases the request with the smallest start tag (ties: arrival), and V moves to that tag. A tenant that
keeps a backlog is charged for it in its later tags, so a light tenant's request starts at V and goes ahead of
the heavy backlog; over time each backlogged tenant is served tokens in proportion to its weight. The cost is the
router's estimate of the tokens (`policy.estimate(...).total`: the prompt at 4 characters a token, plus max_tokens),
or the body's length in tokens for an API without a prompt field. A tenant is a client key's `tenant` label, or the
key's name where it has none (never the key); the keys of one tenant share its place, at the largest of their
weights (keys.py, `tenants`). With client keys off every request is one tenant, and the queue is first come, first
served.

**Bounds**: `queue_max` requests per model (503 `fair_queue_full`), `tenant_max` per tenant and model (429
`tenant_queue_full`: the tenant's own share), `seconds` in the queue (503 `fair_queue_timeout`); a request that would
queue while the router drains is a 503 `router_stopping`. A client that leaves is out of the queue at once.

The decisions are pure (`Queue`, `cost`, `admit`, `refusal`); `Fair` keeps the queues and the slots released and
not yet taken, and answers the refusals in the called API's shape.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from contracts.subjects import Key
from services.router import policy
from services.router.apis import Api
from services.router.apis import error as api_error
from services.router.keys import Gate, presented_key
from services.router.metrics import RECORDER, Recorder
from services.router.projection import Member, Members
from services.router.protocol import HttpConnection, Request

RELEASED, FULL, TENANT_FULL, TIMED_OUT, GONE, STOPPING = "released", "full", "tenant_full", "timed_out", "gone", "stopping"
OUTCOMES = (RELEASED, FULL, TENANT_FULL, TIMED_OUT, GONE, STOPPING)
RETRY_AFTER = 1  # seconds: a slot frees when any request of the model ends, which under load is within seconds

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """JETWAY_ROUTER_FAIR_PER_MEMBER, _QUEUE_MAX, _TENANT_MAX, _SECONDS."""

    per_member: int = 0  # requests in flight to one member from this router before a model's requests queue; 0: off
    queue_max: int = 256  # requests waiting per model on this router
    tenant_max: int = 64  # of them, requests of one tenant (a client key, or the keys that share a tenant label)
    seconds: float = 30.0  # how long one waits

    @property
    def on(self) -> bool:
        return self.per_member > 0


# --- the decisions, pure ---------------------------------------------------------------------------


class Entry(Generic[T]):
    """One waiting request: its tenant, its tags in virtual time (start, finish) and its arrival number."""

    __slots__ = ("finish", "item", "seq", "start", "tenant")

    def __init__(self, tenant: str, start: float, finish: float, seq: int, item: T) -> None:
        self.tenant = tenant
        self.start = start
        self.finish = finish
        self.seq = seq
        self.item = item


class Queue(Generic[T]):
    """Start-time fair queueing over tenants, for one model: `push` tags a request, `pop` releases the one with the
    smallest start tag (first come among equals); each tenant's requests stay in their own arrival order."""

    def __init__(self) -> None:
        self.clock = 0.0  # virtual time V: the start tag of the last request released
        self.tenants: dict[str, deque[Entry[T]]] = {}
        self.finish: dict[str, float] = {}  # each tenant's last finish tag (kept while it is ahead of V)
        self.seq = 0
        self.size = 0
        self.released = 0  # for the I/O side: released requests not yet on their way (Fair)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Entry[T]]:
        for waiting in self.tenants.values():
            yield from waiting

    def count(self, tenant: str) -> int:
        waiting = self.tenants.get(tenant)
        return len(waiting) if waiting else 0

    def push(self, tenant: str, weight: float, cost: float, item: T) -> Entry[T]:
        start = max(self.clock, self.finish.get(tenant, self.clock))
        finish = start + max(cost, 1.0) / weight
        self.finish[tenant] = finish
        self.seq += 1
        entry = Entry(tenant, start, finish, self.seq, item)
        self.tenants.setdefault(tenant, deque()).append(entry)
        self.size += 1
        return entry

    def order(self) -> list[Entry[T]]:
        """Each tenant's first request, in the order `pop` would release them."""
        return sorted((waiting[0] for waiting in self.tenants.values()), key=lambda e: (e.start, e.seq))

    def pop(self, eligible: Callable[[T], bool] = lambda _: True) -> Entry[T] | None:
        """Release the next request that `eligible` takes (a tenant whose first request it does not take waits, in its
        own order); None when there is none."""
        for entry in self.order():
            if eligible(entry.item):
                self._take(entry)
                self.clock = max(self.clock, entry.start)
                if not self.size:
                    self.finish.clear()  # nobody waits: every tenant starts afresh at V
                else:
                    for tenant in [t for t, f in self.finish.items() if f <= self.clock and t not in self.tenants]:
                        del self.finish[tenant]  # idle and behind V: its next request starts at V anyway
                return entry
        return None

    def remove(self, entry: Entry[T]) -> bool:
        """Take out a request that will not be served (its client left, its wait ran out); its tenant's later requests
        move up by its cost, as if it had never come."""
        waiting = self.tenants.get(entry.tenant)
        if waiting is None or entry not in waiting:
            return False
        at = waiting.index(entry)
        self._take(entry)
        shift, expected = entry.finish - entry.start, entry.finish
        for later in list(waiting)[at:]:
            if later.start != expected:  # the tenant was idle in between: later tags do not follow from this one
                return True
            expected = later.finish
            later.start -= shift
            later.finish -= shift
        if self.finish.get(entry.tenant) == expected:
            self.finish[entry.tenant] = expected - shift
        return True

    def put_back(self, entry: Entry[T]) -> None:
        """A released request that found no slot after all: first of its tenant again, with its own tags."""
        self.tenants.setdefault(entry.tenant, deque()).appendleft(entry)
        self.size += 1

    def _take(self, entry: Entry[T]) -> None:
        waiting = self.tenants[entry.tenant]
        waiting.remove(entry)
        self.size -= 1
        if not waiting:
            del self.tenants[entry.tenant]


def cost(api: Api, body: dict[str, Any] | None, raw: bytes) -> int:
    """A request's cost in tokens: the router's estimate (prompt and max_tokens) where the API has a prompt field,
    else its body's length at 4 characters a token; at least 1."""
    if body is not None and api.prompt_field is not None:
        return max(1, policy.estimate(body, api.prompt_field == "messages").total)
    return max(1, math.ceil(len(raw) / policy.CHARS_PER_TOKEN))


def admit(queued: int, tenant_queued: int, settings: Settings, *, keyed: bool) -> str | None:
    """Why a request may not join a model's queue that holds `queued`, `tenant_queued` of them its tenant's; None: it
    may. The tenant's share is checked first: a tenant over it is refused (429) before the model's queue is (503).
    Without client keys there is one tenant, bounded by the queue alone."""
    if keyed and tenant_queued >= settings.tenant_max:
        return TENANT_FULL
    if queued >= settings.queue_max:
        return FULL
    return None


def refusal(model: str, outcome: str, settings: Settings, tenant: str = "", key: str = "") -> tuple[int, str, str, str, int]:
    """The answer to a request that is not served from the queue: (status, message, OpenAI type, code, Retry-After).
    `key`: the key's name where its tenant is more than that key (a label, or other keys beside it), else ""."""
    busy = f"every member of {model!r} has {settings.per_member} requests in flight from this router (JETWAY_ROUTER_FAIR_PER_MEMBER)"
    if outcome == TENANT_FULL:
        who = f"the tenant {tenant!r} (of the key {key!r})" if key else f"the key {tenant!r}"
        message = (
            f"{busy} and {who} already has {settings.tenant_max} requests waiting for one, its share of the "
            f"queue (JETWAY_ROUTER_FAIR_TENANT_MAX); retry after {RETRY_AFTER} s"
        )
        return 429, message, "rate_limit_error", "tenant_queue_full", RETRY_AFTER
    if outcome == FULL:
        message = (
            f"{busy} and {settings.queue_max} requests already wait for one (JETWAY_ROUTER_FAIR_QUEUE_MAX); retry after {RETRY_AFTER} s"
        )
        return 503, message, "server_error", "fair_queue_full", RETRY_AFTER
    if outcome == TIMED_OUT:
        message = f"{busy}, and none freed within {settings.seconds:g} s (JETWAY_ROUTER_FAIR_SECONDS); retry after {RETRY_AFTER} s"
        return 503, message, "server_error", "fair_queue_timeout", RETRY_AFTER
    return 503, "the router is stopping; retry the request", "server_error", "router_stopping", 1


# --- the queues ------------------------------------------------------------------------------------


class Waiter:
    """One queued request: how its wait ends is its future's result; `slot` is the member whose slot it was released
    on, kept for it until it is on its way."""

    __slots__ = ("client", "format", "future", "needed", "slot")

    def __init__(self, future: asyncio.Future[str], api_format: str, needed: policy.Estimate | None, client: HttpConnection) -> None:
        self.future = future
        self.format = api_format
        self.needed = needed  # the estimate a member's context window must hold; None: no window to fit
        self.client = client
        self.slot: Key | None = None

    def end(self, outcome: str) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

    def gone(self) -> None:
        self.end(GONE)


class Fair:
    """The fair queues of one router, one per model. `wait` lets a request through at once when a member has a slot
    and nobody waits, else queues it; `freed` (a request ended) and `wake` (a member may have become ready) release
    the next ones. On the event loop only."""

    def __init__(self, members: Members, settings: Settings | None = None, *, recorder: Recorder = RECORDER) -> None:
        self.members = members
        self.settings = settings or Settings()
        self.recorder = recorder
        self.queues: dict[str, Queue[Waiter]] = {}
        self.reserved: dict[Key, int] = {}  # slots released to a queued request that has not taken them yet

    def counts(self) -> list[tuple[str, int]]:
        """(model, requests waiting for it now), for the gauge at scrape time."""
        return [(model, len(queue)) for model, queue in list(self.queues.items())]

    def room(self, member: Member) -> bool:
        traffic = self.members.traffic.get(member.key)
        return (traffic.outstanding if traffic else 0) + self.reserved.get(member.key, 0) < self.settings.per_member

    async def wait(
        self,
        keys: Gate | None,
        client: HttpConnection,
        request: Request,
        api: Api,
        model: str,
        body: dict[str, Any] | None,
        fitting: list[Member],
    ) -> list[Member] | None:
        """The members of `fitting` (the ready ones that fit the request) with a slot, once it is this request's turn;
        None once a refusal is answered (429, 503) or the client left. No member ready: `fitting` as it is (the
        caller answers as it would without a queue)."""
        if not fitting:
            return fitting
        queue = self.queues.get(model)
        if queue is None:
            open_ = [m for m in fitting if self.room(m)]
            if open_:
                return open_
        # saturated, or others wait before it: its turn comes in fair order
        ring = keys.ring() if keys is not None else None
        found = ring.lookup(presented_key(request.headers)) if ring is not None else None
        tenant, weight, named = "", 1.0, ""
        if ring is not None and found is not None:
            of = ring.tenant_of(found)
            tenant, weight = of.name, of.weight
            named = found.name if of.keys > 1 or of.name != found.name else ""
        if client.listener.draining:
            self._refuse(client, api, model, STOPPING, tenant)
            return None
        refused = admit(len(queue) if queue else 0, queue.count(tenant) if queue else 0, self.settings, keyed=found is not None)
        if refused is not None:
            self._refuse(client, api, model, refused, tenant, named)
            return None
        windowed = body if api.generates and api.prompt_field is not None and any(m.window(model) for m in fitting) else None
        needed = policy.estimate(windowed, api.prompt_field == "messages") if windowed is not None else None
        loop = asyncio.get_running_loop()
        if queue is None:
            queue = self.queues[model] = Queue()
        waiter = Waiter(loop.create_future(), api.format, needed, client)
        entry = queue.push(tenant, weight, cost(api, body, request.body), waiter)
        deadline = loop.time() + self.settings.seconds
        client.on_lost = waiter.gone  # a client that leaves is out of the queue at once
        try:
            self._wake(model, queue)  # a slot may be free already: a member that became ready, a slot given back
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        outcome = await waiter.future
                except TimeoutError:
                    future = waiter.future  # released in the same turn as the deadline: released
                    outcome = future.result() if future.done() and not future.cancelled() else TIMED_OUT
                if outcome != RELEASED:
                    break
                if client.closed:  # gone before it could take its slot: the finally hands the slot on
                    outcome = GONE
                    break
                self._unreserve(waiter, queue)
                open_ = [m for m in self.eligible(model, api.format, needed) if self.room(m)]
                if open_:
                    self.recorder.unqueued(model, RELEASED)
                    return open_  # taken before the caller's next await: the slot is its own
                waiter.future = loop.create_future()  # its slot went elsewhere (a member shared by models): wait on
                queue.put_back(entry)
        finally:
            client.on_lost = None
            if waiter.slot is not None:  # released, and leaving without its slot: the next one gets it
                self._unreserve(waiter, queue)
                self._wake(model, queue)
            queue.remove(entry)
            self._forget(model, queue)
        if outcome == GONE:
            self.recorder.unqueued(model, GONE)
            return None
        self._refuse(client, api, model, outcome, tenant)
        return None

    def eligible(self, model: str, api_format: str, needed: policy.Estimate | None) -> list[Member]:
        """The members that may take a request for `model` in `api_format` now and whose window holds `needed`."""
        ready = policy.candidates(self.members, model, api_format).ready
        return ready if needed is None else [m for m in ready if policy.fits(m, model, needed)]

    def freed(self, member: Member) -> None:
        """A request to `member` ended: its slot goes to the next request in fair order of each model it serves."""
        self.wake(member.declared)

    def wake(self, models: Iterable[str]) -> None:
        """Release what the members of `models` have slots for now. Called where a member may have become ready (its
        health folded, its failure mark cleared: handlers.py) as well as where a slot freed: a request queued while
        every member was saturated goes to a member that turns Healthy at once, not when a busy one frees a slot."""
        if self.queues:
            for model in models:
                queue = self.queues.get(model)
                if queue is not None:
                    self._wake(model, queue)

    def _wake(self, model: str, queue: Queue[Waiter]) -> None:
        """Release, in fair order, as many waiting requests as there are slots for them, each on a slot of its own."""
        ready: dict[tuple[str, Any], list[Member]] = {}

        def slot_of(waiter: Waiter) -> Member | None:
            if waiter.future.done():
                return None  # leaving (gone, timed out): not given a slot
            found = ready.get((waiter.format, waiter.needed))
            if found is None:
                found = ready[(waiter.format, waiter.needed)] = self.eligible(model, waiter.format, waiter.needed)
            return next((m for m in found if self.room(m)), None)

        while queue.size:
            entry = queue.pop(lambda waiter: slot_of(waiter) is not None)
            if entry is None:
                return
            member = slot_of(entry.item)
            assert member is not None
            entry.item.slot = member.key
            self.reserved[member.key] = self.reserved.get(member.key, 0) + 1
            queue.released += 1
            entry.item.end(RELEASED)

    def _unreserve(self, waiter: Waiter, queue: Queue[Waiter]) -> None:
        key, waiter.slot = waiter.slot, None
        if key is None:
            return
        queue.released -= 1
        left = self.reserved.get(key, 0) - 1
        if left > 0:
            self.reserved[key] = left
        else:
            self.reserved.pop(key, None)

    def _forget(self, model: str, queue: Queue[Waiter]) -> None:
        if not queue.size and not queue.released and self.queues.get(model) is queue:
            del self.queues[model]

    def _refuse(self, client: HttpConnection, api: Api, model: str, outcome: str, tenant: str, key: str = "") -> None:
        status, message, kind, code, retry = refusal(model, outcome, self.settings, tenant, key)
        self.recorder.unqueued(model, outcome)
        if status == 503:
            self.recorder.refused(model)
        client.respond(*api_error(api, status, message, kind, code), extra=[(b"retry-after", str(retry).encode())])
