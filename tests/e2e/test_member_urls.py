"""Member URLs at the apply API (real watcher, real NATS): malformed ones are field errors, and the
dial policy sees through IPv6 forms of refused IPv4 addresses."""

from __future__ import annotations

from typing import Any

import pytest

from services.watcher import webhook
from tests.support.stack import Stack


def member(url: str) -> dict[str, Any]:
    return {
        "apiVersion": "airdress.co/v1alpha1",
        "kind": "InferencePoolMember",
        "metadata": {"name": "gpu"},
        "spec": {"backend": "vllm-openai", "url": url, "models": [{"name": "m"}]},
    }


@pytest.mark.parametrize("url", ["http://[::1", "http://[fe80::1", "http://[fe80::1/v1", "https://[::1:8000"])
async def test_an_unclosed_ipv6_bracket_is_a_field_error_not_a_500(stack: Stack, url: str) -> None:
    status, body = await stack.apply(member(url))
    assert status == 400, body
    assert body["path"] == "spec.url" and "closing ']'" in body["error"], body


@pytest.mark.parametrize(
    "url",
    [
        "http://[::169.254.169.254]:8000",
        "http://[64:ff9b::a9fe:a9fe]/v1",
        "http://[64:ff9b:1::169.254.169.254]",
        "http://[2002:a9fe:a9fe::1]:80",
        "http://[2001:0:4136:e378:8000:63bf:5601:5601]",
    ],
)
async def test_ipv6_forms_of_the_metadata_address_are_refused(stack: Stack, url: str) -> None:
    status, body = await stack.apply(member(url))
    assert status == 400, body
    assert body["path"] == "spec.url" and "169.254.169.254 is a cloud metadata address" in body["error"], body


async def test_ipv6_forms_of_allowed_addresses_are_accepted(stack: Stack) -> None:
    for url in ("http://[::1]:8000", "http://[64:ff9b::10.1.2.3]:8000", "http://[2002:a01:203::1]"):
        status, body = await stack.apply(member(url))
        assert status in (200, 201), (url, body)


@pytest.mark.parametrize(("url", "expected"), [("http://[::1", "closing ']'"), ("http://[::169.254.169.254]", "cloud metadata")])
def test_the_admission_webhook_refuses_the_same_urls_with_a_field_cause(url: str, expected: str) -> None:
    review = webhook.review({"uid": "u1", "operation": "CREATE", "object": member(url)}, mutate=False)
    assert review["allowed"] is False and review["status"]["code"] == 422
    assert [c["field"] for c in review["status"]["details"]["causes"]] == ["spec.url"]
    assert expected in review["status"]["message"]
