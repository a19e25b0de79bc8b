"""A conversation's previous turn, served by another router replica, is not counted against its member
(services/router/learn.py, `policy.pick`'s `ended`): the pure choice, then two replicas' learners on a real NATS
server, where the turn is counted out only until the counts of the replica that served it say it ended."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from contracts.poolmember import InferencePoolMemberSpec
from contracts.routing import ROUTING_PREFIX
from contracts.subjects import Key
from runtime.bus import connect
from services.router import policy
from services.router.app import InFlight
from services.router.learn import ALIVE_SECONDS, Learner, placer_of
from services.router.projection import Member, Members
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint

SETTINGS = policy.Settings()  # prefix-cache, load bound 1.25
NAMES = ("a", "b", "c")
KEYS = {name: Key("InferencePoolMember", "", name) for name in NAMES}
SYSTEM = "You are the assistant of a large company; answer politely and briefly. " * 8


def members() -> Members:
    found = Members()
    spec = InferencePoolMemberSpec.model_validate({"backend": "vllm-openai", "url": "http://10.0.0.1:8000", "models": [{"name": "m"}]})
    for key in KEYS.values():
        found.items[key] = Member(key, 1, spec)
        found.by_model.setdefault("m", set()).add(key)
    return found


def turn(*questions: str, session: str | None = None) -> policy.Prompt:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for question in questions:
        messages += [{"role": "user", "content": question * 40}, {"role": "assistant", "content": "noted. " * 20}]
    return policy.Prompt({"model": "m", "messages": messages}, session)


def test_the_previous_turn_counted_out_keeps_the_conversation_on_its_member() -> None:
    team = members()
    team.traffic_of(KEYS["a"]).others = 1  # another replica sent the last turn to a, and its last count still holds it
    ready = team.declaring("m")

    def memory() -> policy.Memory:
        found = policy.Memory.of(SETTINGS)
        found.index.record(turn("how long is the warranty?").hashed(SETTINGS), KEYS["a"])
        return found

    counted, choice = policy.pick(SETTINGS, memory(), ready, team.traffic, turn("how long is the warranty?", "and after?"))
    assert counted.name != "a" and choice.reason == "load", "counted in flight, a is past the load bound: the turn moves"

    kept, choice = policy.pick(SETTINGS, memory(), ready, team.traffic, turn("how long is the warranty?", "and after?"), ended=KEYS["a"])
    assert (kept.name, choice.reason) == ("a", "prefix")
    assert team.traffic[KEYS["a"]].others == 1, "the count itself is left as the other replica said it"


@contextlib.asynccontextmanager
async def learner(url: str, name: str) -> AsyncIterator[Learner]:
    nc = await connect(url, name=name)
    team = members()
    found = Learner(nc, f"{ROUTING_PREFIX}.{name}", team, policy.Memory.of(SETTINGS), SETTINGS)
    await found.start(0)
    try:
        yield found
    finally:
        await found.stop()
        await nc.close()


async def test_a_turn_is_counted_out_only_until_its_replica_says_it_ended(nats: NatsEndpoint) -> None:
    async with learner(nats.url, "one") as one, learner(nats.url, "two") as two:
        await two._publish(())  # each finds the other by its counts
        await one._publish(())
        await eventually(lambda: one.has_peers() and two.has_peers(), timeout=10, message="the replicas find each other")
        a = KEYS["a"]
        for session in (None, "conv-7"):  # found by the prompt's last block, then by the session
            last = turn("what does it cost?", session=session)
            told = await one.tell("m", "a", last.hashed(SETTINGS), last.session_key)
            assert told is not None
            in_flight = InFlight(one.members.traffic_of(a), one, told)
            await eventually(lambda: two.members.traffic_of(a).others == 1, timeout=5, message="two counts one's request")

            # the next turn reaches two while one's request still counts there: taken for this turn's previous one
            assert two.previous(turn("what does it cost?", "in euros?", session=session), SETTINGS) == a
            assert two.previous(turn("what does it cost?", "in euros?", session=session), SETTINGS) is None, "once"

            # told again, and ended: once one's counts say so, nothing is counted out any more
            told = await one.tell("m", "a", last.hashed(SETTINGS), last.session_key)
            await eventually(lambda: two.members.traffic_of(a).others == 2, timeout=5, message="two counts it again")
            in_flight.end()
            await eventually(lambda: two.members.traffic_of(a).others == 0, timeout=5, message="one's end reaches two")
            assert two.previous(turn("what does it cost?", "in euros?", session=session), SETTINGS) is None
        # a turn of another conversation is not this one's
        other = turn("where is my parcel?")
        told = await one.tell("m", "b", other.hashed(SETTINGS), None)
        await eventually(lambda: two.members.traffic_of(KEYS["b"]).others == 1, timeout=5, message="two counts the parcel")
        assert two.previous(turn("what does it cost?", "in euros?"), SETTINGS) is None


def test_the_placer_is_the_least_replica_alive_and_one_that_did_not_answer_is_passed_over_until_heard_again() -> None:
    now = 100.0
    assert placer_of("b", {}, {}, now) == "b", "alone, a replica places its own"
    assert placer_of("b", {"a": now - 0.2, "c": now - 0.1}, {}, now) == "a"
    assert placer_of("b", {"a": now - ALIVE_SECONDS - 0.1, "c": now}, {}, now) == "b", "a silent replica is not alive"
    assert placer_of("c", {"a": now - 0.5, "b": now - 0.1}, {"a": now - 0.2}, now) == "b", "a failed to answer since"
    assert placer_of("c", {"a": now - 0.1, "b": now - 0.1}, {"a": now - 0.2}, now) == "a", "a heard from again"
