"""Recorded traffic through another routing policy: what it would have done, beside what happened (pure).

`jetway replay routing --policy P` (cli/routing.py) reads the routing records (contracts/routing.py) and calls
`replay` once for what happened (each request on the member it really went to) and once for the policy asked,
through the very decision the router makes (`policy.decide`), with:

- **each member's prefix cache** as an engine keeps one: an LRU of prompt blocks (`cache_blocks` each), a
  request hitting its leading cached blocks (never its last token, as vLLM computes at least one) and then
  caching all of its blocks. The hit rate is hit tokens over prompt tokens, as vLLM's and the simulator's
  counters count it;
- **each member's load** as the router sees it: a request is in flight on its member from its arrival for as long
  as it really took (`elapsed`), so least-outstanding and the load terms see the concurrency the traffic had;
- **the members**: those each request could go to when it was routed (`candidates`), or with `members` N, N
  members always ready.

What the model cannot know: how long a request would have taken elsewhere (its recorded time is kept), and the
members' own queues and KV use (0). docs/router.md ("Routing records") gives its measured accuracy.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from contracts.routing import RoutingRecord
from services.router import policy

CHARS_PER_TOKEN = policy.CHARS_PER_TOKEN
DEFAULT_CACHE_BLOCKS = 2048  # vLLM's simulator's default (docs/simulator.md); a real engine's is its KV-cache size


class EngineCache:
    """One member's prefix cache: an LRU of block hashes (each a hash of its whole prefix)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def serve(self, chain: Sequence[int], usable: int) -> int:
        """Blocks of the first `usable` of `chain` found cached; then the whole chain is cached, its head last
        to be evicted (refreshed tail first, as vLLM frees a request's blocks)."""
        blocks = self.blocks
        hit = 0
        while hit < usable and chain[hit] in blocks:
            hit += 1
        for block in reversed(chain):
            blocks[block] = None
            blocks.move_to_end(block)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return hit


@dataclass
class Outcome:
    """What a policy did (or would have done) with the traffic."""

    policy: str
    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    per_member: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    assigned: list[str] = field(default_factory=list)  # each request's member, in order

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def spread(self) -> float:
        """The busiest member's share over the mean (1.0: even)."""
        if not self.per_member:
            return 0.0
        return max(self.per_member.values()) / (self.requests / len(self.per_member))

    def changed(self, other: Outcome) -> int:
        """How many requests went to another member than in `other`."""
        return sum(1 for a, b in zip(self.assigned, other.assigned, strict=True) if a != b)


def routed(records: Iterable[RoutingRecord], model: str | None = None) -> list[RoutingRecord]:
    """The records a replay can use, in arrival order: answered by a member, with the prompt's blocks."""
    kept = [r for r in records if r.member and (model is None or r.model == model)]
    kept.sort(key=lambda r: r.at)
    return kept


def prompt_tokens(record: RoutingRecord) -> int:
    """The prompt's tokens: as the member reported them, else estimated from the hashed blocks."""
    if record.tokens_in > 0:
        return record.tokens_in
    return max(1, len(record.blocks) * record.block_chars // CHARS_PER_TOKEN)


def _usable(record: RoutingRecord, tokens: int) -> int:
    """Blocks that may hit: never the prompt's last token (an engine computes at least one)."""
    per_block = max(1, record.block_chars // CHARS_PER_TOKEN)
    return min(len(record.blocks), (tokens - 1) // per_block)


def replay(
    records: Sequence[RoutingRecord],
    settings: policy.Settings | None,
    *,
    members: int | None = None,
    cache_blocks: int = DEFAULT_CACHE_BLOCKS,
) -> Outcome:
    """The traffic through `settings`'s policy, or with None as it really went; `records` as `routed` gives them."""
    caches: dict[str, EngineCache] = {}
    memory = policy.Memory.of(settings) if settings is not None else None
    synthetic = [f"m{i}" for i in range(members)] if members else None
    busy: dict[str, int] = {}  # member → requests in flight
    ending: list[tuple[float, int, str]] = []  # (end, order, member): a heap of requests in flight
    outcome = Outcome(settings.policy if settings is not None else "as recorded")
    for order, record in enumerate(records):
        while ending and ending[0][0] <= record.at:
            _, _, done = heapq.heappop(ending)
            busy[done] -= 1
        if settings is None or memory is None:
            member, reason = record.member, record.reason
        else:
            names = synthetic or list(record.candidates) or [record.member]
            views = [policy.View(outstanding=busy.get(name, 0)) for name in names]
            hashes = list(record.blocks) if record.block_chars == settings.block_chars else []
            home = hashes[0] if hashes else None
            session = record.session
            choice = policy.ONLY if len(names) == 1 else policy.decide(settings, memory, names, views, hashes, home, session)
            member, reason = names[choice.index], choice.reason
        tokens = prompt_tokens(record)
        cache = caches.get(member)
        if cache is None:
            cache = caches[member] = EngineCache(cache_blocks)
        hit = cache.serve(record.blocks, _usable(record, tokens))
        outcome.requests += 1
        outcome.prompt_tokens += tokens
        outcome.hit_tokens += hit * max(1, record.block_chars // CHARS_PER_TOKEN)
        outcome.per_member[member] = outcome.per_member.get(member, 0) + 1
        outcome.reasons[reason] = outcome.reasons.get(reason, 0) + 1
        outcome.assigned.append(member)
        busy[member] = busy.get(member, 0) + 1
        heapq.heappush(ending, (record.at + record.elapsed, order, member))
    return outcome
