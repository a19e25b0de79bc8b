"""A model's recent routing decisions in the console: the shaping (plain data), the stream's tail read on a real
NATS (as the console's own NATS user too), the route over HTTP with records a real router wrote, and the view in
a real browser.

Every wait is on a condition (Playwright's `expect`, or `eventually` on the API), never on the clock."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from contracts.natsauth import SERVICES, render_authorization, service_user
from contracts.routing import RoutingRecord
from runtime.bus import Credentials, connect
from runtime.natsserver import NatsServer
from services.console import routing
from testbed.waiting import eventually
from tests.console.conftest import screenshot, store_records
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, echo_member

TIMEOUT = 20_000  # ms
SECRET_KEY = "sk-live-do-not-show-0123456789"  # a client key's value: never in a record, so never in an answer


def record(model: str, at: float, member: str = "a", **extra: Any) -> RoutingRecord:
    fields: dict[str, Any] = {
        "candidates": ("a", "b"),
        "policy": "prefix-cache",
        "reason": "prefix",
        "score": 2.5,
        "prefix": 0.75,
        "blocks": (11, 22, 33),
        "block_chars": 64,
        "session": 1234567,
        "key": "team-a",
        "tokens_in": 12,
        "tokens_out": 4,
        "ttft": 0.021,
        "elapsed": 0.05,
        "router": "replica-a",
        **extra,
    }
    return RoutingRecord(at=at, model=model, status=200, member=member, **fields)


# --- the shaping, as plain data ---------------------------------------------------------------


def test_the_parameters_are_checked_and_a_wrong_one_is_named() -> None:
    assert routing.query("echo", None) == ("echo", routing.DEFAULT_LIMIT)
    assert routing.query(" echo ", "") == ("echo", routing.DEFAULT_LIMIT)
    assert routing.query("echo", "500") == ("echo", 500)
    for model, limit, named in [
        (None, "5", "model"),
        ("  ", "5", "model"),
        ("x" * 300, "5", "model"),
        ("echo", "0", "limit"),
        ("echo", "501", "limit"),
        ("echo", "-1", "limit"),
        ("echo", "ten", "limit"),
        ("echo", "1.5", "limit"),
    ]:
        with pytest.raises(ValueError) as wrong:
            routing.query(model, limit)
        assert str(wrong.value).split(":", 1)[0] == named, str(wrong.value)


def test_windows_go_back_from_the_end_doubling_and_stop_at_the_start_or_the_bound() -> None:
    assert list(routing.windows(1, 100, first=16, most=1000)) == [(85, 100), (53, 84), (1, 52)]
    assert list(routing.windows(1, 100, first=16, most=40)) == [(85, 100), (61, 84)]  # 16 + 24: the bound
    assert list(routing.windows(90, 100, first=16, most=1000)) == [(90, 100)]  # older batches aged out
    assert list(routing.windows(0, 0)) == [] and list(routing.windows(5, 4)) == []  # an empty stream


def test_the_newest_written_are_kept_and_shown_newest_arrival_first() -> None:
    found = [(1, 0, record("m", 10.0)), (2, 0, record("m", 30.0)), (2, 1, record("m", 20.0)), (3, 0, record("m", 25.0))]
    shown = routing.newest(found, 3)
    assert [(seq, r.at) for seq, _, r in shown] == [(2, 30.0), (3, 25.0), (2, 20.0)]  # batch 1 was written first: out


def test_a_decision_shows_the_reasons_and_never_the_prompt_or_the_session() -> None:
    shaped = routing.decision(7, record("m", 1_700_000_000.25, member="b", reason="session", ttft=None))
    assert shaped == {
        "seq": 7,
        "at": 1_700_000_000.25,
        "time": "2023-11-14T22:13:20.250Z",
        "member": "b",
        "candidates": ["a", "b"],
        "policy": "prefix-cache",
        "reason": "session",
        "score": 2.5,
        "prefix": 0.75,
        "status": 200,
        "ttft": None,
        "elapsed": 0.05,
        "tokens_in": 12,
        "tokens_out": 4,
        "key": "team-a",
        "router": "replica-a",
        "placer": "",
    }


def test_a_batch_of_other_models_or_no_batch_at_all_yields_nothing() -> None:
    from contracts.routing import BATCH

    payload = BATCH.encode([record("other", 1.0), record("echo", 2.0), record("echo-2", 3.0)])
    assert [r.at for _, _, r in routing.of_model(5, payload, "echo")] == [2.0]
    assert routing.of_model(5, payload, "missing") == []
    assert routing.of_model(5, b"not json", "echo") == [] and routing.of_model(5, b'{"model":"echo"}', "echo") == []


# --- the stream's tail, on a real NATS ----------------------------------------------------------


async def test_the_tail_is_read_back_in_windows_until_enough_are_found(nats: NatsEndpoint) -> None:
    # 40 batches: the model's records in the first five only, the rest another model's
    batches = [[record("early", 100.0 + i), record("busy", 100.0 + i)] for i in range(5)]
    batches += [[record("busy", 200.0 + i)] for i in range(35)]
    seqs = await store_records(nats.url, batches)
    nc = await connect(nats.url, name="console")
    try:
        body = await routing.recent(nc, "busy", 3, first=4)
        assert [d["at"] for d in body["decisions"]] == [234.0, 233.0, 232.0]
        assert body["scanned"]["batches"] == 4 and body["scanned"]["from_seq"] == seqs[-4]  # one window was enough
        assert not body["bounded"] and not body["scanned"]["whole_stream"]

        early = await routing.recent(nc, "early", 50, first=4)  # back to the stream's start: 4 + 8 + 16 + 12
        assert [d["at"] for d in early["decisions"]] == [104.0, 103.0, 102.0, 101.0, 100.0]
        assert early["scanned"]["batches"] == 40 and early["scanned"]["whole_stream"] and not early["bounded"]

        bounded = await routing.recent(nc, "early", 50, first=4, most=12)  # the bound stops it before the records
        assert bounded["decisions"] == [] and bounded["bounded"] and bounded["scanned"]["batches"] == 12
    finally:
        await nc.close()


async def test_no_stream_yet_is_no_decision_not_an_error(nats: NatsEndpoint) -> None:
    nc = await connect(nats.url, name="console")
    try:
        body = await routing.recent(nc, "echo", 10)
    finally:
        await nc.close()
    assert body["decisions"] == [] and body["recorded"] is False and not body["bounded"]


async def test_the_consoles_own_nats_user_may_read_the_tail(tmp_path: Path) -> None:
    """In a cluster the console runs as its NATS user (contracts/natsauth.py): its rights are enough to read."""
    from contracts.natsauth import new_password

    passwords = {s.user: new_password() for s in SERVICES}
    environ = {service_user(user).password_env: password for user, password in passwords.items()}
    server = NatsServer(store_dir=tmp_path / "nats", authorization=render_authorization(), environ=environ).start()
    try:
        router = await connect(server.url, name="router", credentials=Credentials("router", passwords["router"]))
        try:  # the router makes the stream and publishes its batches (core NATS, as services/router/records.py)
            from services.router.records import ensure_stream

            js = router.jetstream(timeout=10)
            await ensure_stream(js, 3600.0, 1024 * 1024)
            from contracts.routing import BATCH

            await router.publish("jetway.routing.replica-a", BATCH.encode([record("echo", 5.0)]))
            await router.flush()
            await eventually(lambda: _stored(js, 1), timeout=10, message="the batch stored")
        finally:
            await router.close()
        console = await connect(server.url, name="console", credentials=Credentials("console", passwords["console"]))
        try:
            body = await routing.recent(console, "echo", 5, timeout=5)
        finally:
            await console.close()
        assert [d["member"] for d in body["decisions"]] == ["a"]
    finally:
        server.stop()


async def _stored(js: Any, count: int) -> bool:
    return int((await js.stream_info("JETWAY_ROUTING")).state.messages) >= count


# --- the route, with records a real router wrote -----------------------------------------------


async def test_the_route_answers_a_models_decisions_and_400_for_bad_parameters(stack: Stack, recording: Any) -> None:
    async with stack.http.get(f"{stack.api_url}/v1/console/routing?model=echo") as response:
        assert response.status == 401  # the same credential as every /v1 route

    code, empty = await stack.get("/v1/console/routing?model=echo")
    assert code == 200 and empty["decisions"] == [] and empty["recorded"] is True

    for query, named in [("", "model"), ("?limit=5", "model"), ("?model=echo&limit=0", "limit"), ("?model=echo&limit=abc", "limit")]:
        code, body = await stack.get(f"/v1/console/routing{query}")
        assert code == 400, (query, body)
        assert body["code"] == "invalid_request" and body["path"] == named and body["error"].startswith(f"{named}: ")
    code, body = await stack.get("/v1/console/routing?model=echo&limit=501")
    assert code == 400 and "from 1 to 500" in body["error"]

    await stack.apply(echo_member("echo"))
    await eventually(lambda: stack.served("echo"), timeout=20, message="the echo member served")
    for n in range(3):
        assert (await stack.chat("echo", f"turn {n}"))[0] == 200
    assert (await stack.chat("nobody-serves-this"))[0] != 200  # another model's (none serves it): not in echo's answer

    async def three() -> Any:
        code, body = await stack.get("/v1/console/routing?model=echo&limit=2")
        return body if code == 200 and len(body["decisions"]) == 2 else None

    body = await eventually(three, timeout=20, message="the router's records read back")
    first, second = body["decisions"]
    assert first["at"] >= second["at"]
    assert first["member"] == "echo" and first["candidates"] == ["echo"] and first["reason"] == "only"
    assert first["status"] == 200 and first["router"] == "replica-a" and first["elapsed"] > 0
    assert "blocks" not in first and "session" not in first
    assert body["model"] == "echo" and body["limit"] == 2


async def test_a_client_keys_name_is_shown_never_the_key(stack: Stack, recording: Any) -> None:
    """The router with client keys required, a chat made with a key: the answer names the key, never holds it."""
    from services.router.keys import ClientKey, Gate, KeyRing, hash_key

    secret = SECRET_KEY
    await stack.apply(echo_member("keyed"))
    await eventually(lambda: stack.served("keyed"), timeout=20, message="the echo member served")
    stack.router.routes.keys = Gate(lambda: KeyRing((ClientKey("team-a", hash_key(secret)),)))
    try:
        body = {"model": "keyed", "messages": [{"role": "user", "content": "hi"}]}
        async with stack.http.post(
            f"{stack.router_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
        ) as answer:
            assert answer.status == 200, await answer.text()
    finally:
        stack.router.routes.keys = None
    await eventually(lambda: _count(stack, "keyed", 1), timeout=20, message="the keyed request's record read back")
    async with stack.http.get(f"{stack.api_url}/v1/console/routing?model=keyed", headers=stack.auth) as response:
        text = await response.text()
    assert response.status == 200 and '"key": "team-a"' in text
    assert secret not in text and hash_key(secret) not in text


# --- the view, in a real browser --------------------------------------------------------------


async def test_the_view_shows_the_decisions_with_their_reasons_and_refreshes(page: Any, stack: Stack, recording: Any) -> None:
    pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
    from playwright.async_api import expect

    await stack.apply(echo_member("echo"))
    await eventually(lambda: stack.served("echo"), timeout=20, message="the echo member served")
    assert (await stack.chat("echo"))[0] == 200

    # reached from the pool members page: the model's name in the Models table
    await page.goto(f"{stack.api_url}/ui/#/members")
    models = page.get_by_role("table", name="Models")
    await models.get_by_role("link", name="echo", exact=True).click(timeout=TIMEOUT)
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/routing/echo")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Routing decisions")
    await expect(page).to_have_title("Routing: echo · Jetway console")
    await expect(page.get_by_role("navigation").get_by_role("link", name="Pool members")).to_have_attribute("aria-current", "page")
    table = page.get_by_role("table", name="Routing decisions for echo")
    rows = table.locator("tbody tr")
    await expect(rows).to_have_count(1, timeout=TIMEOUT)
    row = rows.first
    await expect(row.locator('[data-col="member"]')).to_have_text("echo")
    await expect(row.locator('[data-col="reason"]')).to_contain_text("only")
    await expect(row.locator('[data-col="status"]')).to_have_text("200")
    await expect(row.locator('[data-col="router"]')).to_have_text("replica-a")
    await expect(row.locator('[data-col="elapsed"]')).to_have_text(re.compile(r"^[0-9.]+ ms$"))
    await expect(page.get_by_role("status")).to_contain_text("1 decision")

    # a new request: shown on the next refresh, newest first (the button; the poll would too)
    assert (await stack.chat("echo", "again"))[0] == 200
    await eventually(lambda: _count(stack, "echo", 2), timeout=20, message="the second record stored")
    await page.get_by_role("button", name="Refresh now").click()
    await expect(rows).to_have_count(2, timeout=TIMEOUT)
    await expect(page.get_by_role("status")).to_contain_text("2 decisions")
    await screenshot(page, "routing")

    # another model, from the form: none recorded, said so
    await page.get_by_label("Model", exact=True).fill("unknown-model")
    await page.get_by_role("button", name="Show").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/routing/unknown-model")
    await expect(page.get_by_text("No routing decision recorded for unknown-model")).to_be_visible(timeout=TIMEOUT)

    # a phone's width: the table scrolls in its box, not the page
    await page.goto(f"{stack.api_url}/ui/#/routing/echo")
    await expect(rows).to_have_count(2, timeout=TIMEOUT)
    await page.set_viewport_size({"width": 390, "height": 800})
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


async def _count(stack: Stack, model: str, count: int) -> bool:
    code, body = await stack.get(f"/v1/console/routing?model={model}")
    return code == 200 and len(body["decisions"]) >= count


async def test_a_decision_the_placer_made_for_another_replica_says_so(page: Any, stack: Stack) -> None:
    """Among router replicas a new conversation's member is chosen by the placer (docs/router.md): the row says which
    replica routed it and which placed it."""
    from playwright.async_api import expect

    placed = record("placed-model", 1_700_000_000.0, router="replica-b", placer="replica-a")
    await store_records(stack.nats_url, [[placed, record("placed-model", 1_700_000_001.0, router="replica-a")]])
    code, body = await stack.get("/v1/console/routing?model=placed-model")
    assert code == 200 and [(d["router"], d["placer"]) for d in body["decisions"]] == [("replica-a", ""), ("replica-b", "replica-a")]
    await page.goto(f"{stack.api_url}/ui/#/routing/placed-model")
    rows = page.get_by_role("table", name="Routing decisions for placed-model").locator("tbody tr")
    await expect(rows).to_have_count(2, timeout=TIMEOUT)
    await expect(rows.nth(0).locator('[data-col="router"]')).to_have_text("replica-a")
    await expect(rows.nth(1).locator('[data-col="router"]')).to_have_text("replica-b (placed by replica-a)")
