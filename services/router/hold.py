"""Requests held while a model starts from zero (issue 25): a bounded queue per model, released in arrival order
as soon as a member of the model is ready.

A request whose model has no ready member, when a member that serves it in the request's API format carries
`jetway.dev/scale-from-zero: "true"` (the gateway's mark on the member of a deployment whose autoscaling
allows zero), is held here instead of answered 503 (services/router/app.py). While any request is held for a
model:

- a `Demand` goes out on DEMAND_SIGNALS at once and then about every second: the scaler starts a replica on it;
- the model's members that are not ready are probed every half second, so one turning Healthy is found quickly;
- the queue is woken by what makes a member ready, not polled per request: the fold of a health decision and a
  probe that cleared a failure mark call `wake`.

A held request ends `released` (a member that takes its format is ready: it is then routed as any other),
`timed_out` (its hold time is up), `full` (the model's queue was at its bound when it came: refused at once),
`gone` (its client left) or `stopping` (the router drains). The decisions are pure functions (`holdable`,
`admit`, `releasable`, `ready_formats`, `demand_of`, `refusal`); `Holds` keeps the queues, and a ticker per
held model publishes and probes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import msgspec

from contracts.scaling import DEMAND_SIGNALS, Demand
from services.router import policy
from services.router.metrics import RECORDER, Recorder
from services.router.projection import Member, Members, Traffic
from services.router.protocol import HttpConnection

log = logging.getLogger("jetway.router")

RELEASED, TIMED_OUT, FULL, GONE, STOPPING = "released", "timed_out", "full", "gone", "stopping"
OUTCOMES = (RELEASED, TIMED_OUT, FULL, GONE, STOPPING)
TICK = 0.5  # the held model's members are probed this often
DEMAND_TICKS = 2  # a Demand every this many ticks: about a second
RETRY_AFTER = 5  # seconds, on a refusal: a start from zero takes tens of seconds, a client retrying at once gains nothing
REQUEST_ID_CHARS = 128  # of a client's x-request-id, in the release's log line


@dataclass(frozen=True)
class Settings:
    """How many requests one router holds per model, and for how long (JETWAY_ROUTER_HOLD_MAX, _SECONDS)."""

    hold_max: int = 64  # 0: none held, a 503 at once as for any model with no ready member
    hold_seconds: float = 60.0


class Waiter:
    """One held request: how it ends is its future's result (one of OUTCOMES)."""

    __slots__ = ("arrived", "client", "format", "future", "request_id")

    def __init__(self, future: asyncio.Future[str], api_format: str, arrived: float, client: HttpConnection, request_id: str = "") -> None:
        self.future = future
        self.format = api_format
        self.arrived = arrived
        self.client = client
        self.request_id = request_id

    def end(self, outcome: str) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

    def gone(self) -> None:
        self.end(GONE)


# --- the decisions, pure ---------------------------------------------------------------------------


def holdable(members: Sequence[Member], api_format: str) -> bool:
    """Whether a request in `api_format` for a model these members declare waits for one instead of a 503: some
    member that takes the format may scale from zero, and is not drained (a drain means no traffic, not later)."""
    return any(m.scale_from_zero and api_format in m.formats and not m.spec.draining for m in members)


def admit(held: int, settings: Settings) -> bool:
    """Whether one more request joins a queue that holds `held`."""
    return held < settings.hold_max


def ready_formats(members: Members, model: str) -> frozenset[str]:
    """The API formats some ready member of `model` takes now (empty: none is ready)."""
    formats: set[str] = set()
    traffic = members.traffic
    for member in members.declaring(model):
        if policy.serves(member, model, traffic.get(member.key) or Traffic()):
            formats |= member.formats
    return frozenset(formats)


def releasable(waiting: Iterable[Waiter], ready: frozenset[str]) -> list[Waiter]:
    """The held requests a ready member takes, in arrival order (a request in another format waits on)."""
    return [w for w in waiting if w.format in ready and not w.future.done()]


def deployment_of(members: Sequence[Member]) -> str:
    """The deployment a held model belongs to: the first member that names one and may scale from zero."""
    return next((m.deployment for m in members if m.scale_from_zero and m.deployment), "")


def demand_of(model: str, members: Sequence[Member], held: int, router: str) -> Demand:
    return Demand(model=model, deployment=deployment_of(members), held=held, router=router)


def refusal(model: str, outcome: str, settings: Settings) -> tuple[str, str, int]:
    """The 503 of a hold that did not end in a release: (message, code, Retry-After seconds)."""
    if outcome == FULL:
        return (
            f"no member of {model!r} is ready yet (it is starting from zero) and {settings.hold_max} requests already "
            f"wait for one on this router, its limit (JETWAY_ROUTER_HOLD_MAX); retry after {RETRY_AFTER} s",
            "hold_queue_full",
            RETRY_AFTER,
        )
    if outcome == TIMED_OUT:
        return (
            f"no member of {model!r} became ready within {settings.hold_seconds:g} s (JETWAY_ROUTER_HOLD_SECONDS) while "
            f"it starts from zero; retry after {RETRY_AFTER} s",
            "hold_timeout",
            RETRY_AFTER,
        )
    return "the router is stopping; retry the request", "router_stopping", 1


# --- the queues ------------------------------------------------------------------------------------


class Holds:
    """The held requests of one router, a queue per model; `hold` waits in one, `wake` releases what a ready
    member takes. On the event loop, never from another thread."""

    def __init__(
        self,
        members: Members,
        settings: Settings | None = None,
        *,
        publish: Callable[[str, bytes], Awaitable[None]] | None = None,
        probe: Callable[[str], None] | None = None,
        router: str = "",
        recorder: Recorder = RECORDER,
    ) -> None:
        self.members = members
        self.settings = settings or Settings()
        self.publish = publish  # the bus's publish (nats-py's Client.publish): Demand signals
        self.probe = probe  # probe the model's members that are not ready, now (handlers.py)
        self.router = router
        self.recorder = recorder
        self.queues: dict[str, deque[Waiter]] = {}
        self._tickers: dict[str, asyncio.Task[None]] = {}
        self._published_failure = False

    def counts(self) -> list[tuple[str, int]]:
        """(model, requests held for it now), for the held gauge at scrape time."""
        return [(model, len(queue)) for model, queue in list(self.queues.items())]

    async def hold(self, model: str, api_format: str, client: HttpConnection, deadline: float, request_id: str = "") -> str:
        """Wait until a member of `model` that takes `api_format` is ready, or until `deadline` (the loop's clock);
        how it ended, one of OUTCOMES."""
        if client.closed:
            return self._ended(model, GONE)
        if client.listener.draining:
            return self._ended(model, STOPPING)
        queue = self.queues.get(model)
        if not admit(len(queue) if queue else 0, self.settings):
            return self._ended(model, FULL)
        loop = asyncio.get_running_loop()
        if queue is None:
            queue = self.queues[model] = deque()
            # a new hold: Demand at once, from a ticker of its own (one that still sleeps after the last hold ended)
            previous = self._tickers.get(model)
            if previous is not None:
                previous.cancel()
            self._tickers[model] = loop.create_task(self._tick(model), name=f"hold-{model}")
        waiter = Waiter(loop.create_future(), api_format, loop.time(), client, request_id)
        queue.append(waiter)
        client.on_lost = waiter.gone  # a client that leaves is out of the queue at once
        try:
            async with asyncio.timeout_at(deadline):
                outcome = await waiter.future
        except TimeoutError:
            future = waiter.future  # released in the same turn as the deadline: released
            outcome = future.result() if future.done() and not future.cancelled() else TIMED_OUT
        finally:
            client.on_lost = None
            self._leave(model, waiter)
        if outcome == RELEASED:
            held = loop.time() - waiter.arrived
            extra = {"model": model, "held_seconds": round(held, 3)}
            if request_id:
                extra["request_id"] = request_id[:REQUEST_ID_CHARS]
            log.info("held request released after %.3f s: a member of %r is ready", held, model, extra=extra)
        return self._ended(model, outcome)

    def _ended(self, model: str, outcome: str) -> str:
        self.recorder.unheld(model, outcome)
        return outcome

    def _leave(self, model: str, waiter: Waiter) -> None:
        queue = self.queues.get(model)
        if queue is None:
            return
        if waiter in queue:
            queue.remove(waiter)
        if not queue:
            del self.queues[model]

    def wake(self, models: Iterable[str]) -> None:
        """Release, in arrival order, the held requests of `models` that a ready member takes now. Called where a
        member may have become ready: the fold of its health, a probe that cleared its failure mark."""
        for model in models:
            queue = self.queues.get(model)
            if not queue:
                continue
            ready = ready_formats(self.members, model)
            if ready:
                self._end_all(model, releasable(queue, ready), RELEASED)

    def _end_all(self, model: str, waiters: list[Waiter], outcome: str) -> None:
        if not waiters:
            return
        for waiter in waiters:  # resumed in this order: each chooses its member and is sent in turn
            waiter.end(outcome)
        queue = self.queues.get(model)
        if queue is not None:
            left = [w for w in queue if not w.future.done()]
            if left:
                queue.clear()
                queue.extend(left)
            else:
                del self.queues[model]

    async def _tick(self, model: str) -> None:
        """While requests are held for `model`: a Demand now and about every second, the members that are not ready
        probed every tick, and the held requests answered once the router drains."""
        beat = 0
        try:
            while queue := self.queues.get(model):
                if beat % DEMAND_TICKS == 0:
                    await self._publish(model, len(queue))
                self._end_all(model, [w for w in queue if w.client.listener.draining], STOPPING)
                if self.probe is not None:
                    self.probe(model)
                beat += 1
                await asyncio.sleep(TICK)
        finally:
            if self._tickers.get(model) is asyncio.current_task():
                del self._tickers[model]

    async def _publish(self, model: str, held: int) -> None:
        if self.publish is None:
            return
        demand = demand_of(model, self.members.declaring(model), held, self.router)
        try:
            await self.publish(DEMAND_SIGNALS, msgspec.json.encode(demand))
        except Exception as exc:  # the bus away: held requests still wait, and are answered at their deadline
            if not self._published_failure:
                log.warning("demand signal not published: %s", exc, extra={"model": model})
            self._published_failure = True
        else:
            self._published_failure = False

    def close(self) -> None:
        """The router stops: every held request is answered (`stopping`), and the tickers end."""
        for model, queue in list(self.queues.items()):
            self._end_all(model, list(queue), STOPPING)
        for ticker in list(self._tickers.values()):
            ticker.cancel()
