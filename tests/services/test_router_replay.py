"""The routing replay's model (services/router/replay.py), on records made here: the engine cache, the load, and
the policy through the router's own decision."""

from __future__ import annotations

import dataclasses

import msgspec

from contracts.routing import RoutingRecord
from services.router import policy, replay
from services.router.replay import EngineCache

SETTINGS = policy.Settings(block_chars=16)


def record(
    at: float, text: str, member: str, *, elapsed: float = 0.5, session: int | None = None, reason: str = "round-robin"
) -> RoutingRecord:
    blocks = tuple(policy.block_hashes(text, 16, 256))
    return RoutingRecord(
        at=at,
        model="m",
        status=200,
        member=member,
        candidates=("a", "b"),
        policy="round-robin",
        reason=reason,
        blocks=blocks,
        block_chars=16,
        session=session,
        tokens_in=len(text) // 4,
        elapsed=elapsed,
    )


def conversations(count: int, turns: int) -> list[list[str]]:
    """Each conversation's prompts, each turn the one before and more: what an engine's prefix cache is for."""
    found = []
    for c in range(count):
        prompt, prompts = f"system prompt number {c:03d} " * 8, []
        for t in range(turns):
            prompt += f" user turn {t} of conversation {c}, some words to fill a block. " * 2
            prompts.append(prompt)
        found.append(prompts)
    return found


def round_robin_traffic(count: int = 4, turns: int = 5) -> list[RoutingRecord]:
    records, at, i = [], 0.0, 0
    for t in range(turns):
        for prompts in conversations(count, turns):
            records.append(record(at, prompts[t], "ab"[i % 2]))
            at, i = at + 1.0, i + 1  # one at a time: no two in flight
    return records


def test_an_engine_cache_hits_its_leading_blocks_and_forgets_the_least_recent() -> None:
    cache = EngineCache(capacity=5)
    chain = [1, 2, 3]
    assert cache.serve(chain, 3) == 0
    assert cache.serve([1, 2, 9], 2) == 2  # the shared head; never past `usable`
    assert cache.serve([5, 6, 7], 3) == 0  # 3 9 2 1 then 7 6 5: the chains' heads were refreshed last, so 3 and 9 go
    assert cache.serve([1, 2], 2) == 2


def test_replayed_as_recorded_the_hit_rate_is_the_traffic_s_own() -> None:
    traffic = replay.routed(round_robin_traffic())
    recorded = replay.replay(traffic, None, cache_blocks=10_000)
    assert recorded.requests == 20 and recorded.per_member == {"a": 10, "b": 10}
    assert recorded.assigned == [r.member for r in traffic]
    # round robin over an even count of conversations keeps each conversation on one member: its turns hit
    assert recorded.hit_rate > 0.5


def test_prefix_cache_replayed_on_scattered_traffic_predicts_the_hits_it_would_have_made() -> None:
    traffic = []
    for i, r in enumerate(round_robin_traffic(count=3)):  # three conversations over two members: they wander
        traffic.append(msgspec.structs.replace(r, member="ab"[i % 2]))
    recorded = replay.replay(replay.routed(traffic), None, cache_blocks=10_000)
    prefix = replay.replay(replay.routed(traffic), dataclasses.replace(SETTINGS, policy=policy.PREFIX_CACHE), cache_blocks=10_000)
    assert prefix.hit_rate > recorded.hit_rate + 0.15, (prefix.hit_rate, recorded.hit_rate)
    assert prefix.changed(recorded) > 0 and set(prefix.reasons) <= {"prefix", "load"}


def test_least_outstanding_replayed_sees_the_concurrency_the_traffic_had() -> None:
    # four requests at once, each taking 10 s: least-outstanding spreads them two and two
    burst = [record(0.1 * i, f"request {i} " * 10, "a", elapsed=10.0) for i in range(4)]
    outcome = replay.replay(replay.routed(burst), dataclasses.replace(SETTINGS, policy=policy.LEAST_OUTSTANDING))
    assert outcome.per_member == {"a": 2, "b": 2}
    # one after another (each done before the next), every one ties at 0 and the turn alternates
    spaced = [msgspec.structs.replace(r, at=20.0 * i) for i, r in enumerate(burst)]
    assert replay.replay(replay.routed(spaced), dataclasses.replace(SETTINGS, policy=policy.LEAST_OUTSTANDING)).per_member == {
        "a": 2,
        "b": 2,
    }


def test_synthetic_members_stand_in_for_the_recorded_ones() -> None:
    traffic = replay.routed(round_robin_traffic())
    outcome = replay.replay(traffic, dataclasses.replace(SETTINGS, policy=policy.ROUND_ROBIN), members=4)
    assert outcome.per_member == {"m0": 5, "m1": 5, "m2": 5, "m3": 5}


def test_a_session_keeps_its_member_in_the_replay_as_in_the_router() -> None:
    traffic = [record(float(i), f"unrelated prompt {i} " * 6, "ab"[i % 2], session=42) for i in range(6)]
    outcome = replay.replay(replay.routed(traffic), dataclasses.replace(SETTINGS, policy=policy.ROUND_ROBIN))
    assert len(set(outcome.assigned)) == 1 and outcome.reasons.get("session") == 5


def test_records_without_a_member_or_of_another_model_are_left_out() -> None:
    kept = replay.routed(
        [
            record(2.0, "x" * 40, "a"),
            msgspec.structs.replace(record(1.0, "y" * 40, ""), status=503),
            msgspec.structs.replace(record(0.0, "z" * 40, "b"), model="other"),
        ]
    )
    assert [r.at for r in kept] == [0.0, 2.0] and [r.at for r in replay.routed(kept, "m")] == [2.0]
