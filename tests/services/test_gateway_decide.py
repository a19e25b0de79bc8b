"""The gateway's pure decisions: health from probes, routability, balancing, token estimates, endpoints."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.conditions import carried, same_decision
from contracts.poolmember import InferencePoolMemberSpec
from contracts.rules.urls import refused_address, url_host
from contracts.subjects import Key
from services.router import decide, policy
from services.router.decide import ProbeOutcome
from services.router.policy import Estimate
from services.router.probe import advertised
from services.router.projection import Member, Traffic
from services.router.upstream import Endpoint


def member(name: str = "a", models: list[dict[str, Any]] | None = None, generation: int = 1, **spec: Any) -> Member:
    body = {"backend": "vllm-openai", "url": "http://h:8000", "models": models or [{"name": "m"}], **spec}
    return Member(Key("InferencePoolMember", "", name), generation, InferencePoolMemberSpec.model_validate(body), needs_probe=False)


def healthy(m: Member, models: tuple[str, ...] = ("m",)) -> Member:
    m.health = decide.health(m, ProbeOutcome(models=models), "http-direct")
    m.probed_generation = m.generation
    return m


def test_health_from_a_failed_probe() -> None:
    decision = decide.health(member(), ProbeOutcome(reason="Unreachable", message="connect to h:8000: Connection refused"), "http-direct")
    assert not decision.healthy and decision.status.phase == "Failed"
    conditions = {c.type: c for c in decision.status.conditions}
    assert (conditions["Healthy"].status, conditions["Healthy"].reason) == ("False", "Unreachable")
    assert conditions["Healthy"].message == "connect to h:8000: Connection refused"
    assert conditions["ModelsAdvertised"].status == "Unknown"


def test_health_names_the_missing_models() -> None:
    decision = decide.health(member(models=[{"name": "m"}, {"name": "x"}]), ProbeOutcome(models=("m", "extra")), "http-direct")
    conditions = {c.type: c for c in decision.status.conditions}
    assert decision.healthy and decision.missing == ("x",) and decision.status.phase == "Healthy"
    assert conditions["ModelsAdvertised"].message == "declared models not advertised by the upstream: x"


def test_same_decision_ignores_nothing_but_transition_times() -> None:
    m = member()
    a = carried(decide.health(m, ProbeOutcome(models=("m",)), "http-direct"), None)
    later = carried(decide.health(m, ProbeOutcome(models=("m",)), "http-direct"), None)
    assert same_decision(later, a)
    assert not same_decision(decide.health(m, ProbeOutcome(models=("m", "n")), "http-direct"), a)
    assert not same_decision(decide.health(member(generation=2), ProbeOutcome(models=("m",)), "http-direct"), a)
    assert not same_decision(a, None)


@pytest.mark.parametrize(
    ("change", "routable"),
    [
        ({}, True),
        ({"draining": True}, False),
        ({"needs_probe": True}, False),
        ({"failed": True}, False),
        ({"unhealthy": True}, False),
        ({"not_advertised": True}, False),
    ],
)
def test_serves(change: dict[str, bool], routable: bool) -> None:
    m = healthy(member(draining=change.get("draining", False)), models=() if change.get("not_advertised") else ("m",))
    if change.get("needs_probe"):
        m.needs_probe = True
    if change.get("unhealthy"):
        m.health = decide.health(m, ProbeOutcome(reason="Unreachable"), "http-direct")
    assert policy.serves(m, "m", Traffic(failed=change.get("failed", False))) is routable


def test_echo_serves_what_it_declares() -> None:
    m = member(backend="echo", url="")
    m.health = decide.health(m, ProbeOutcome(models=m.declared), "http-direct")
    assert policy.serves(m, "m", Traffic())


def test_least_outstanding_then_round_robin() -> None:
    views = [policy.View(outstanding=2), policy.View(outstanding=1), policy.View(outstanding=1)]
    assert [policy.least_outstanding(views, turn).index for turn in range(4)] == [1, 2, 1, 2]
    views[0] = policy.View(outstanding=0)
    assert policy.least_outstanding(views, 1).index == 0


def test_estimate_counts_characters_messages_and_max_tokens() -> None:
    chat = {
        "messages": [{"role": "system", "content": "x" * 8}, {"role": "user", "content": [{"type": "text", "text": "y" * 8}]}],
        "max_tokens": 100,
    }
    assert policy.estimate(chat, chat=True) == Estimate(prompt=4 + 8, completion=100)
    assert policy.estimate({"prompt": "abcde", "max_completion_tokens": 7}, chat=False) == Estimate(2, 7)
    assert policy.estimate({"prompt": ["ab", "cd"], "max_tokens": True}, chat=False) == Estimate(1, 0)
    m = member(models=[{"name": "m", "contextWindow": 20}])
    assert policy.fits(m, "m", Estimate(10, 10)) and not policy.fits(m, "m", Estimate(10, 11))
    assert policy.fits(member(models=[{"name": "m", "contextWindow": 0}]), "m", Estimate(10**6, 0)), "0 is no hint"


def test_advertised_reads_openai_model_lists_only() -> None:
    assert advertised(b'{"object":"list","data":[{"id":"a"},{"id":"b"},{"x":1}]}') == ("a", "b")
    assert advertised(b'{"models": []}') is None
    assert advertised(b"<html>") is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://gpu:8000", ("gpu", 8000, False, "")),
        ("https://gpu.lab", ("gpu.lab", 443, True, "")),
        ("http://10.0.0.1:8000/v1", ("10.0.0.1", 8000, False, "")),
        ("https://[fd00::1]:8443/openai/", ("fd00::1", 8443, True, "/openai")),
    ],
)
def test_endpoint_parse(url: str, expected: tuple[Any, ...]) -> None:
    endpoint = Endpoint.parse(url)
    assert (endpoint.host, endpoint.port, endpoint.tls, endpoint.base_path) == expected


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("0.0.0.0", "not a unicast"),
        ("127.0.0.1", None),
        ("10.1.2.3", None),
        ("192.168.1.20", None),
        ("gpu.lab", None),
        # IPv6 forms that embed a refused IPv4 address are refused like it (D12)
        ("::169.254.169.254", "cloud metadata"),  # IPv4-compatible, ::/96
        ("::a9fe:a9fe", "cloud metadata"),
        ("::ffff:0:169.254.1.1", "link-local"),  # IPv4-translated
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 well-known prefix
        ("64:ff9b::169.254.7.7", "link-local"),
        ("64:ff9b:1::a9fe:a9fe", "cloud metadata"),  # NAT64 local-use prefix, /96 layout
        ("64:ff9b:1:a9fe:a9:fe00::", "cloud metadata"),  # the same, /48 layout (RFC 6052)
        ("64:ff9b:1:1:a9:fea9:fe00:0", "cloud metadata"),  # /64 layout
        ("2002:a9fe:a9fe::1", "cloud metadata"),  # 6to4
        ("2001:0:4136:e378:8000:63bf:5601:5601", "cloud metadata"),  # Teredo client 169.254.169.254
        ("2001:0:a9fe:a9fe:0:0:f5fe:fdfc", "cloud metadata"),  # Teredo server 169.254.169.254
        ("::1", None),
        ("::10.1.2.3", None),
        ("64:ff9b::a01:203", None),
        ("64:ff9b:1::a01:203", None),
        ("2002:a01:203::1", None),
        ("2001:db8::1", None),
        ("2001:0:4136:e378:8000:63bf:f5fe:fdfc", None),  # Teredo client 10.1.2.3
    ],
)
def test_dial_policy(address: str, refused: str | None) -> None:
    why = refused_address(address)
    assert (why is None) if refused is None else (why is not None and refused in why)
    assert refused_address(address, allow_link_local=True) is None


def test_url_host() -> None:
    assert url_host("http://[fe80::1]:80/x") == "fe80::1"
    assert url_host("https://169.254.169.254/latest") == "169.254.169.254"
    assert url_host("http://h:1") == "h"
    # unclosed brackets are a field error of admission; the host helper must not raise on them (D4)
    assert url_host("http://[::1") == "::1"
    assert url_host("http://[fe80::1") == "fe80::1"
