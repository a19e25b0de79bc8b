"""The choice of member in one place (services/router/policy.py): from the members the router knows to the one a
request goes to, with plain data and no I/O."""

from __future__ import annotations

from typing import Any

from contracts.poolmember import InferencePoolMemberSpec
from contracts.subjects import Key
from services.router import apis, decide, policy
from services.router.decide import ProbeOutcome
from services.router.load import Load
from services.router.projection import Member, Members, Traffic

PROMPT = {"model": "m", "messages": [{"role": "user", "content": "a question long enough to fill a few blocks " * 4}]}


def member(name: str, *, window: int = 0, healthy: bool = True, saturated: bool = False, **spec: Any) -> Member:
    body = {"backend": "vllm-openai", "url": f"http://{name}:8000", "models": [{"name": "m", "contextWindow": window}], **spec}
    parsed = InferencePoolMemberSpec.model_validate(body)
    m = Member(Key("InferencePoolMember", "", name), 1, parsed, needs_probe=False, formats=apis.formats_of("vllm-openai", None))
    if healthy:
        outcome = ProbeOutcome(models=("m",), load=Load(waiting=16) if saturated else None)
        m.health = decide.health(m, outcome, "http-direct")
        m.probed_generation = 1
    return m


def pool(*found: Member) -> Members:
    members = Members()
    for m in found:
        members.items[m.key] = m
        members.traffic[m.key] = Traffic()
        members.by_model.setdefault("m", set()).add(m.key)
    return members


def test_candidates_are_the_ready_members_of_the_model_that_accept_the_format() -> None:
    members = pool(member("a"), member("b", draining=True), member("c", healthy=False), member("d"))
    members.traffic[Key("InferencePoolMember", "", "d")].failed = True
    found = policy.candidates(members, "m", apis.OPENAI_CHAT)
    assert found.declared and found.accepted and [m.name for m in found.ready] == ["a"]
    assert not policy.candidates(members, "other", apis.OPENAI_CHAT).declared
    refusing = policy.candidates(members, "m", apis.ANTHROPIC_MESSAGES)
    assert refusing.declared and not refusing.accepted and refusing.ready == []


def test_fitting_keeps_the_members_whose_window_holds_the_estimate_or_says_why_none_does() -> None:
    small, large, unstated = member("small", window=20), member("large", window=4000), member("unstated")
    body = {**PROMPT, "max_tokens": 100}
    fit, refusal = policy.fitting([small, large, unstated], "m", body, chat=True)
    assert [m.name for m in fit] == ["large", "unstated"] and refusal is None
    fit, refusal = policy.fitting([small], "m", body, chat=True)
    assert fit == [] and refusal is not None and "more than the 20-token context window of 'm'" in refusal
    assert policy.fitting([small], "m", None, chat=True) == ([small], None), "nothing to fit: every member"
    assert policy.fitting([unstated], "m", body, chat=True) == ([unstated], None), "no window stated: no estimate"


def test_one_ready_member_is_taken_without_touching_what_choosing_remembers() -> None:
    settings, memory = policy.Settings(), policy.Memory.of(policy.Settings())
    only = member("a")
    prompt = policy.Prompt(PROMPT, "s1")
    chosen, choice = policy.pick(settings, memory, [only], {}, prompt)
    assert chosen is only and choice is policy.ONLY and choice.reason == "only"
    assert prompt.hashes is None, "nothing hashed"
    assert memory.turn == 0 and not memory.index.blocks and memory.sessions.get(policy.session_key("s1")) is None
    assert (
        policy.route_header(choice, settings.policy)
        == policy.ONLY.header(settings.policy)
        == (b"prefix-cache; reason=only; score=0.000; prefix=0.00")
    )


def test_a_prompt_goes_back_to_the_member_that_was_sent_it() -> None:
    settings = policy.Settings(block_chars=16)
    memory = policy.Memory.of(settings)
    ready = [member("a"), member("b"), member("c")]
    traffic = {m.key: Traffic() for m in ready}
    first, choice = policy.pick(settings, memory, ready, traffic, policy.Prompt(PROMPT, None))
    assert choice.reason == "load" and memory.turn == 1
    again, choice = policy.pick(settings, memory, ready, traffic, policy.Prompt(PROMPT, None))
    assert again is first and choice.reason == "prefix" and choice.prefix == 1.0


def test_load_in_flight_and_reported_turns_a_request_away() -> None:
    settings = policy.Settings(policy=policy.LEAST_OUTSTANDING)
    memory = policy.Memory.of(settings)
    a, b = member("a"), member("b")
    traffic = {a.key: Traffic(outstanding=3), b.key: Traffic(outstanding=1)}
    assert policy.pick(settings, memory, [a, b], traffic, policy.Prompt(PROMPT, None))[0] is b
    prefix = policy.Settings()
    traffic = {a.key: Traffic(load=Load(waiting=12)), b.key: Traffic()}
    assert policy.pick(prefix, policy.Memory.of(prefix), [a, b], traffic, policy.Prompt(PROMPT, None))[0] is b, "the queue it reports"


def test_a_session_stays_on_its_member_while_it_is_ready_and_not_saturated() -> None:
    settings = policy.Settings(policy=policy.ROUND_ROBIN)
    memory = policy.Memory.of(settings)
    a, b = member("a"), member("b")
    traffic = {a.key: Traffic(), b.key: Traffic()}
    first, _ = policy.pick(settings, memory, [a, b], traffic, policy.Prompt(PROMPT, "s1"))
    for _ in range(3):
        kept, choice = policy.pick(settings, memory, [a, b], traffic, policy.Prompt(PROMPT, "s1"))
        assert kept is first and choice.reason == "session"
    assert memory.turn == 1, "a kept session takes no turn"
    full = member(first.name, saturated=True)
    other = b if first is a else a
    moved, choice = policy.pick(settings, memory, sorted([full, other], key=lambda m: m.name), traffic, policy.Prompt(PROMPT, "s1"))
    assert choice.reason == "round-robin" and moved is other
    assert memory.sessions.get(policy.session_key("s1")) == other.key, "the session follows"


def test_a_prompt_is_hashed_once_for_its_retry_and_not_at_all_when_the_policy_ignores_it() -> None:
    settings = policy.Settings(block_chars=16)
    memory = policy.Memory.of(settings)
    ready = [member("a"), member("b"), member("c")]
    prompt = policy.Prompt(PROMPT, None)
    first, _ = policy.pick(settings, memory, ready, {}, prompt)
    hashes = prompt.hashes
    assert hashes and prompt.home is not None
    retry, _ = policy.pick(settings, memory, [m for m in ready if m is not first], {}, prompt)
    assert retry is not first and prompt.hashes is hashes
    unhashed = policy.Prompt(PROMPT, None)
    policy.pick(policy.Settings(policy=policy.ROUND_ROBIN), memory, ready, {}, unhashed)
    assert unhashed.hashes == [] and unhashed.home is None


def test_a_session_is_the_header_else_the_openai_user() -> None:
    assert policy.session_of(b"s-1", {"user": "u"}) == "s-1"
    assert policy.session_of(None, {"user": "u"}) == "u"
    assert policy.session_of(None, {"user": ""}) is None
    assert policy.session_of(None, {"user": 3}) is None
    assert policy.session_of(None, None) is None
