"""Client keys' rpm and tpm for the whole deployment, however many router replicas serve it.

Each key has one ledger in the NATS KV bucket `jetway-router-budgets`: per whole second of the last 61 (the
sliding minute of keys.py), the requests the replicas were granted and the tokens they spent. A replica
admits a request from a *slice*: requests it was granted for the current second. Slices are claimed with a
compare-and-set on the ledger's revision, so the requests granted in any window never pass the key's rpm,
whichever replicas asked. The hot path reads only the slice (a dict lookup and two integers):

- a tick before each second ends claims the next second's slice for every key in use, sized by what the
  replica admitted in the second before, gives back what the last slice left unused, and adds the tokens
  spent since the last tick;
- a request that finds its slice empty claims another at once (the one request per burst that waits on NATS);
- a slice is good only in the second it was granted for: a request counts from the whole second it was
  admitted in, exactly as one replica counts it (keys.Limiter).

The bound (docs/router.md, "Limits across replicas"):
- rpm is never exceeded while NATS answers. A replica killed holding a slice only leaves its unused requests
  counted until that second leaves the window: the key may get fewer, never more.
- tpm is checked before a request against the ledger as of the last tick plus the replica's own spending since:
  a key can go over by the tokens of the answers in flight when it reached its limit (as with one replica) plus
  at most one tick (1 s) of the other replicas' spending, and a killed replica's unreported second.
- Without NATS (a partition, an outage) a replica falls back to its own limiter with an equal share of each limit
  (the limit over the replicas the ledger last saw): a partition of p of N replicas lets a key reach at most
  limit x (1 + p / N) in the window it lasts.

`settle` and `window` are pure; `SharedLimiter` is the I/O around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from runtime.bus import key_value
from runtime.tasks import retrieved
from services.router.keys import ADMITTED, SLOTS, ClientKey, KeyRing, Limiter, Verdict, over_limit

log = logging.getLogger("jetway.router.budget")
T = TypeVar("T")

BUCKET = "jetway-router-budgets"
STREAM = f"KV_{BUCKET}"
TICK_LEAD = 0.2  # the next second's slice is claimed this long before the second starts
CLAIM_TIMEOUT = 1.0  # seconds a request waits for the ledger before the replica falls back to its share
# seconds a ledger's compare-and-set may take (the JetStream context's timeout): longer than a request waits, because a
# write is never given up while in flight: one cut off after it landed granted requests no replica then used
LEDGER_TIMEOUT = 5.0
CONFLICT_RETRIES = 16  # compare-and-set attempts per claim (3 replicas ticking on the same second meet often)
IDLE_AFTER = 3  # seconds without a request after which a key's slice is no longer claimed ahead


class Ledger(msgspec.Struct, forbid_unknown_fields=False):
    """One key's use over the last 61 seconds, as the bucket stores it (JSON): second → count."""

    requests: dict[int, int] = msgspec.field(default_factory=dict)  # granted to replicas, for that second
    tokens: dict[int, int] = msgspec.field(default_factory=dict)  # spent, reported in that second
    replicas: dict[str, int] = msgspec.field(default_factory=dict)  # replica → the last second it wrote


@dataclass(frozen=True, slots=True)
class Window:
    requests: int
    tokens: int


def window(ledger: Ledger, second: int) -> Window:
    """The requests granted and tokens spent in the 61 seconds ending with `second`."""
    first = second - SLOTS + 1
    return Window(
        sum(n for s, n in ledger.requests.items() if first <= s <= second),
        sum(n for s, n in ledger.tokens.items() if first <= s <= second),
    )


def wait(ledger: Ledger, key: ClientKey, second: int) -> int:
    """Whole seconds until the key has room again, from `second` (what Retry-After says)."""
    for k in range(1, SLOTS + 1):
        room = window(ledger, second + k)
        if over_limit(key, room.requests, room.tokens) is None:
            return k
    return SLOTS


@dataclass(frozen=True, slots=True)
class Report:
    """What a replica brings to the ledger in one compare-and-set."""

    replica: str
    second: int  # the second the claim is for
    want: int  # requests asked for that second (0: only reporting)
    given_back: dict[int, int] = field(default_factory=dict)  # second → requests granted then and not used
    spent: dict[int, int] = field(default_factory=dict)  # second → tokens spent then
    now: int = 0  # the replica's current second (the ledger forgets what left the window before it)


def settle(ledger: Ledger, key: ClientKey, report: Report) -> tuple[Ledger, int]:
    """The ledger after the report, and how many requests it grants for `report.second` (pure).

    Grants never take the window ending at that second past rpm; none are granted while tpm is spent."""
    now = max(report.now, report.second - 1)
    first = now - SLOTS + 1
    requests = {s: n for s, n in ledger.requests.items() if s >= first}
    tokens = {s: n for s, n in ledger.tokens.items() if s >= first}
    for s, n in report.given_back.items():
        if s in requests:
            requests[s] = max(0, requests[s] - n)
    for s, n in report.spent.items():
        if s >= first and n > 0:
            tokens[s] = tokens.get(s, 0) + n
    replicas = {r: s for r, s in ledger.replicas.items() if s >= first}
    replicas[report.replica] = now
    settled = Ledger({s: n for s, n in requests.items() if n}, tokens, replicas)
    granted = 0
    if report.want > 0:
        room = window(settled, report.second)
        if key.tpm is None or room.tokens < key.tpm:
            granted = report.want if key.rpm is None else max(0, min(report.want, key.rpm - room.requests))
        if granted:
            settled.requests[report.second] = settled.requests.get(report.second, 0) + granted
    return settled, granted


def share(key: ClientKey, replicas: int) -> ClientKey:
    """The key's limits divided among `replicas` (at least 1 each): what a replica cut off from the ledger allows."""
    count = max(1, replicas)
    split = lambda limit: None if limit is None else max(1, limit // count)  # noqa: E731
    return ClientKey(key.name, key.sha256, key.models, split(key.rpm), split(key.tpm), key.created)


# --- one replica's side


@dataclass
class _Budget:
    """A key's state in this replica: its slices, what it used, what it has not reported."""

    slices: dict[int, int] = field(default_factory=dict)  # second → requests left to admit then
    granted: dict[int, int] = field(default_factory=dict)  # second → requests granted then (for give-back)
    used: dict[int, int] = field(default_factory=dict)  # second → requests admitted then
    spent: dict[int, int] = field(default_factory=dict)  # second → tokens not yet reported
    tokens: int = 0  # the window's tokens as of the last claim (the ledger's)
    ledger: Ledger = field(default_factory=Ledger)
    last_used: int = 0
    replicas: int = 1
    refused: Verdict | None = None  # the ledger's last refusal, answered locally until `refused_until`
    refused_until: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SharedLimiter:
    """keys.Limiter's contract for every replica at once (module docstring). `admit` answers from the slice or
    returns None, then `claim` asks the ledger; `run` ticks until stopped."""

    def __init__(self, js: JetStreamContext, replica: str, *, clock: Callable[[], float] = time.time) -> None:
        self.js = js
        self.replica = replica
        self.clock = clock
        self.fallback = Limiter()  # each key's share while the ledger cannot be reached
        self.degraded = False
        self.claims = 0  # compare-and-sets that went through (bench and tests read it)
        self._budgets: dict[str, _Budget] = {}
        self._keys: dict[str, ClientKey] = {}  # the keys in force, by name (their limits), as of the last tick
        self._kv: KeyValue | None = None
        self._stopping = asyncio.Event()

    def _budget(self, key: ClientKey) -> _Budget:
        budget = self._budgets.get(key.name)
        if budget is None:
            budget = self._budgets[key.name] = _Budget()
        return budget

    def admit(self, key: ClientKey, now: float) -> Verdict | None:
        """From the slice: ADMITTED, a refusal while tpm is spent, or None (ask `claim`). `now` is ignored: the
        ledger's seconds are the wall clock's, shared by every replica."""
        if key.rpm is None and key.tpm is None:
            return ADMITTED
        second = int(self.clock())
        budget = self._budget(key)
        budget.last_used = second
        if budget.refused is not None:
            if second < budget.refused_until:
                return Verdict(False, budget.refused.limit, budget.refused_until - second)
            budget.refused = None
        if key.tpm is not None and budget.tokens + sum(budget.spent.values()) >= key.tpm:
            return None  # the ledger may have let tokens go since: ask it
        left = budget.slices.get(second, 0)
        if left <= 0:
            return None
        budget.slices[second] = left - 1
        budget.used[second] = budget.used.get(second, 0) + 1
        return ADMITTED

    async def claim(self, key: ClientKey, now: float) -> Verdict:
        """A request the slice could not admit: a new slice from the ledger, or the refusal it gives."""
        budget = self._budget(key)
        asked = self._in_turn(budget, functools.partial(self._claimed, key, budget, now))
        try:
            async with asyncio.timeout(CLAIM_TIMEOUT):  # the request waits this long; the claim goes on (`_in_turn`)
                answer = await asyncio.shield(asked)
        except (TimeoutError, nats.errors.Error, OSError) as failure:
            return self._offline(key, budget, now, failure)
        if isinstance(answer, Verdict):
            return answer
        second, granted = answer
        self._recovered()
        if granted:
            return ADMITTED  # its request taken from the slice as the grant landed (`_claimed`)
        limit = over_limit(key, window(budget.ledger, second).requests, budget.tokens) or ("tpm" if key.rpm is None else "rpm")
        refused = Verdict(False, limit, wait(budget.ledger, key, second))
        budget.refused, budget.refused_until = refused, second + refused.retry_after  # no ledger round trip per refusal
        return refused

    async def _claimed(self, key: ClientKey, budget: _Budget, now: float) -> Verdict | tuple[int, int]:
        """Under the budget's lock: the slice's answer if another claim filled it meanwhile, else (second, granted),
        the claiming request's one taken from the new slice at once (in the same step as it lands: taken later, by its
        waiter, another request could have emptied the slice first, one more than granted)."""
        again = self.admit(key, now)
        if again is not None:
            return again
        second = int(self.clock())
        want = max(1, 2 * budget.used.get(second, 0), budget.used.get(second - 1, 0))
        granted = await self._report(key, budget, second, want)
        if granted:
            budget.slices[second] -= 1
            budget.used[second] = budget.used.get(second, 0) + 1
        return second, granted

    def _in_turn(self, budget: _Budget, work: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """`work()` under the budget's lock, in a task of its own that a caller's timeout does not cancel: a ledger's
        compare-and-set cut off after it landed granted requests that no replica's slice then held, and the key's
        rpm went unused (a loaded full run: the survivors of a killed replica stopped 5 short of the limit)."""

        async def locked() -> T:
            async with budget.lock:
                return await work()

        task = asyncio.ensure_future(locked())
        task.add_done_callback(retrieved)  # its waiter may have given up: an outcome unread is no error to report
        return task

    def spend(self, key: ClientKey, tokens: int, now: float) -> None:
        """An answer's tokens: reported to the ledger at the next tick."""
        if key.tpm is None or tokens <= 0:
            return
        second = int(self.clock())
        budget = self._budget(key)
        budget.spent[second] = budget.spent.get(second, 0) + tokens
        if self.degraded:
            self.fallback.spend(share(key, budget.replicas), tokens, now)

    def retain(self, ring: KeyRing) -> None:
        kept = {key.name for key in ring}
        for name in [name for name in self._budgets if name not in kept]:
            del self._budgets[name]
        self.fallback.retain(ring)

    def tracked(self) -> int:
        return len(self._budgets)

    def _offline(self, key: ClientKey, budget: _Budget, now: float, failure: BaseException) -> Verdict:
        self._lost(failure)
        return self.fallback.admit(share(key, budget.replicas), now)

    def _lost(self, failure: BaseException) -> None:
        if not self.degraded:
            log.warning(
                "client key limits: the budget ledger cannot be reached (%s); each replica allows its share of each "
                "limit until it answers (docs/router.md, Limits across replicas)",
                type(failure).__name__,
            )
            self.degraded = True

    def _recovered(self) -> None:
        if self.degraded:
            log.info("client key limits: the budget ledger answers again; limits hold across replicas")
            self.degraded = False

    async def _bucket(self) -> KeyValue:
        if self._kv is None:  # three copies where the cluster can place them, as the leases' bucket: a ledger outlives a server
            config = api.KeyValueConfig(
                bucket=BUCKET, description="client keys' rpm and tpm across router replicas", history=1, ttl=2 * SLOTS, direct=True
            )
            self._kv = await key_value(self.js, config, deadline=asyncio.get_running_loop().time() + 30)
        return self._kv

    async def _report(self, key: ClientKey, budget: _Budget, second: int, want: int) -> int:
        """One compare-and-set of the key's ledger (retried on conflict): what this replica has not reported, and a
        claim of `want` requests for `second`. The caller holds the budget's lock."""
        kv = await self._bucket()
        now = int(self.clock())
        given_back = {s: budget.slices[s] for s in budget.slices if s < now and budget.slices[s] > 0}
        spent = dict(budget.spent)
        report = Report(self.replica, second, want, given_back, spent, now)
        for _ in range(CONFLICT_RETRIES):
            try:
                entry = await kv.get(key.name)
                ledger, revision = msgspec.json.decode(entry.value or b"{}", type=Ledger), entry.revision or 0
            except nats.js.errors.KeyNotFoundError:  # never written, or expired with the bucket's TTL: a new ledger
                ledger, revision = Ledger(), 0
            settled, granted = settle(ledger, key, report)
            encoded = msgspec.json.encode(settled)
            try:
                if revision:
                    await kv.update(key.name, encoded, last=revision)
                else:
                    await kv.create(key.name, encoded)  # refused as a wrong last sequence when another made it first
            except nats.js.errors.KeyWrongLastSequenceError:
                continue
            self.claims += 1
            for s in given_back:
                budget.slices.pop(s, None)
            for s, n in spent.items():
                left = budget.spent.get(s, 0) - n
                if left > 0:
                    budget.spent[s] = left
                else:
                    budget.spent.pop(s, None)
            for s in [s for s in budget.slices if s < now]:
                del budget.slices[s]
            for s in [s for s in budget.used if s < now - 1]:
                del budget.used[s]
            if granted:
                budget.slices[second] = budget.slices.get(second, 0) + granted
            budget.ledger = settled
            budget.tokens = window(settled, max(second, now)).tokens
            budget.replicas = len(settled.replicas)
            return granted
        raise TimeoutError(f"the ledger of {key.name!r} kept changing")

    async def tick(self, second: int) -> None:
        """Before `second` starts: each key in use gets its slice for it; every key reports what it has not."""
        for name, budget in list(self._budgets.items()):
            key = self._keys.get(name)
            if key is None:
                continue
            busy = budget.last_used >= second - IDLE_AFTER
            if not busy and not budget.spent and not any(n > 0 for n in budget.slices.values()):
                continue
            want = max(budget.used.get(second - 1, 0), 1) if busy else 0
            reported = self._in_turn(budget, functools.partial(self._report, key, budget, second, want))
            try:
                async with asyncio.timeout(CLAIM_TIMEOUT):
                    await asyncio.shield(reported)
                self._recovered()
            except (TimeoutError, nats.errors.Error, OSError) as failure:
                self._lost(failure)

    async def run(self, ring: Callable[[], KeyRing]) -> None:
        """Tick TICK_LEAD before each second until stopped; `ring` gives the keys in force (their limits)."""
        while not self._stopping.is_set():
            now = self.clock()
            next_second = int(now) + 1
            delay = max(0.0, next_second - TICK_LEAD - now)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
            if self._stopping.is_set():
                break
            self._keys = {key.name: key for key in ring()}
            await self.tick(next_second)

    def stop(self) -> None:
        self._stopping.set()
