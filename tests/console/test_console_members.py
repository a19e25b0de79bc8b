"""The pool members page: the figures (plain data), the figures' route, and the page in a real browser.

Every wait is on a condition (Playwright's `expect`, or `eventually` on the API), never on the clock."""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.console.figures import Sample, figures, from_exposition, keep, quantile, sample
from services.router.metrics import Recorder
from testbed.waiting import eventually
from tests.console.conftest import screenshot
from tests.support.stack import Stack

TIMEOUT = 20_000  # ms
BOUNDS = (0.1, 0.2, 0.5)


# --- the figures, as plain data -------------------------------------------------------------


def test_figures_are_rates_error_rates_and_quantiles_between_two_samples() -> None:
    before = Sample(
        at=10.0,
        requests={("m", "a", 200): 10, ("m", "a", 500): 1, ("m", "", 503): 2},
        first_token={("m", "a"): (1, 0, 0, 0)},
        bounds=BOUNDS,
    )
    now = Sample(
        at=12.0,
        requests={("m", "a", 200): 16, ("m", "a", 500): 3, ("m", "a", 400): 2, ("m", "", 503): 4},
        first_token={("m", "a"): (6, 5, 0, 0)},
        in_flight={"a": 3, "idle": 0},
        bounds=BOUNDS,
    )
    found = figures(before, now)
    assert found["seconds"] == 2.0
    a = found["members"]["a"]
    # 6 + 2 + 2 answers in 2 s; 2 of them 500s (the 400s are the client's: not errors)
    assert a == {"requests": 21, "rps": 5.0, "in_flight": 3, "error_rate": 0.2, "ttft_p50_ms": 100.0, "ttft_p90_ms": 180.0}
    # the model also counts the 503s no member took (member ""), which no member row shows
    m = found["models"]["m"]
    assert m["requests"] == 25 and m["rps"] == 6.0 and m["error_rate"] == pytest.approx(4 / 12, abs=1e-4)
    assert m["in_flight"] is None
    assert set(found["members"]) == {"a", "idle"}
    assert found["members"]["idle"] == {
        "requests": 0,
        "rps": 0.0,
        "in_flight": 0,
        "error_rate": None,
        "ttft_p50_ms": None,
        "ttft_p90_ms": None,
    }


def test_a_cluster_sample_adds_up_the_routers_metrics_as_they_expose_them() -> None:
    """The cluster console scrapes every router pod's /metrics: parsed, two routers' counts add up to what one
    router counting both would hold."""
    from prometheus_client import CollectorRegistry, generate_latest

    from services.router.metrics import RouterCollector

    def exposed(recorder: Recorder) -> str:
        registry = CollectorRegistry()
        registry.register(RouterCollector(recorder))
        return generate_latest(registry).decode()

    one, two, both = Recorder(), Recorder(), Recorder()
    for recorder, ttft in ((one, 0.03), (two, 0.4)):
        for target in (recorder, both):
            target.answered("m", "a", "chat", 200, 0.5)
            target.answered("m", "", "chat", 503, 0.001)
            target.stream("m", "a", ttft, 4, 0.1)
    one.in_flight = lambda: [("a", 2)]
    two.in_flight = lambda: [("a", 1), ("b", 0)]
    both.in_flight = lambda: [("a", 3), ("b", 0)]
    parsed = from_exposition([exposed(one), exposed(two)], 7.0)
    direct = sample(both, 7.0)
    assert parsed.requests == direct.requests == {("m", "a", 200): 2, ("m", "", 503): 2}
    assert parsed.first_token == direct.first_token and parsed.bounds == direct.bounds
    assert parsed.in_flight == direct.in_flight == {"a": 3, "b": 0}
    assert figures(None, parsed) == figures(None, direct)


async def test_the_cluster_console_scrapes_the_routers_metrics_over_http() -> None:
    """`router_scraper` (the console Deployment's figures): a real HTTP /metrics, as a router pod serves it."""
    import aiohttp
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest

    from services.console.main import pod_addresses, router_scraper
    from services.router.metrics import RouterCollector

    recorder = Recorder()
    recorder.answered("m", "a", "chat", 200, 0.5)
    recorder.stream("m", "a", 0.03, 4, 0.1)
    recorder.in_flight = lambda: [("a", 1)]
    registry = CollectorRegistry()
    registry.register(RouterCollector(recorder))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        assert await pod_addresses("localhost", port) == ["127.0.0.1"]  # one family: a pod is counted once
        async with aiohttp.ClientSession() as session:
            scraped = await router_scraper(f"127.0.0.1:{port}", session, clock=lambda: 3.0)()
            assert scraped == sample(recorder, 3.0)
            nobody = await router_scraper("127.0.0.1:1", session, clock=lambda: 3.0)()  # no router answering: no figures
            assert nobody.requests == {} and figures(None, nobody)["members"] == {}
    finally:
        await runner.cleanup()


def test_without_a_baseline_only_the_cumulative_counts_are_known() -> None:
    now = Sample(at=5.0, requests={("m", "a", 200): 4}, first_token={("m", "a"): (0, 4, 0, 0)}, bounds=BOUNDS)
    a = figures(None, now)["members"]["a"]
    assert a["requests"] == 4
    assert a["rps"] is None and a["error_rate"] is None and a["ttft_p50_ms"] is None


def test_a_counter_that_went_back_counts_no_answers() -> None:
    before = Sample(at=0.0, requests={("m", "a", 200): 50})
    now = Sample(at=1.0, requests={("m", "a", 200): 3})  # a restarted router
    assert figures(before, now)["members"]["a"]["rps"] == 0.0


def test_quantiles_interpolate_within_a_bucket_and_stop_at_the_last_bound() -> None:
    assert quantile(0.5, (0, 0, 0, 0), BOUNDS) is None
    assert quantile(0.5, (0, 4, 0, 0), BOUNDS) == pytest.approx(0.15)
    assert quantile(0.9, (0, 0, 0, 3), BOUNDS) == 0.5  # in +Inf: the highest finite bound
    assert quantile(0.5, (2, 0, 0, 0), ()) is None


def test_samples_are_kept_within_the_window_and_spaced() -> None:
    kept = keep([], Sample(at=0.0))
    kept = keep(kept, Sample(at=0.5), window=10, spacing=1)  # too soon: not kept
    assert [s.at for s in kept] == [0.0]
    for at in (2.0, 4.0, 6.0, 8.0, 10.0, 12.0):
        kept = keep(kept, Sample(at=at), window=10, spacing=1)
    assert [s.at for s in kept] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]  # 0.0 is over 10 s old: the baseline is 2.0


def test_a_sample_sums_the_endpoints_and_reads_in_flight() -> None:
    recorder = Recorder()
    recorder.answered("m", "a", "/v1/chat/completions", 200, 0.01)
    recorder.answered("m", "a", "/v1/completions", 200, 0.01)
    recorder.stream("m", "a", 0.03, 1, 0.0)
    recorder.in_flight = lambda: [("a", 2), ("a", 1)]
    taken = sample(recorder, 7.0)
    assert taken.requests == {("m", "a", 200): 2}
    assert sum(taken.first_token[("m", "a")]) == 1 and taken.bounds[0] == 0.005
    assert taken.in_flight == {"a": 3}


# --- the route and the page --------------------------------------------------------------------


def member(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "airdress.co/v1alpha1",
        "kind": "InferencePoolMember",
        "metadata": {"name": name, "labels": {"team": "console"}},
        "spec": {"backend": "echo", "models": [{"name": name, "contextWindow": 4096}]},
    }


async def draining(stack: Stack, name: str, value: bool) -> bool:
    code, view = await stack.get(f"/v1/kinds/ipm/{name}")
    return code == 200 and view["spec"].get("draining", False) is value


async def test_the_figures_route_needs_a_credential_and_counts_the_routers_answers(stack: Stack) -> None:
    async with stack.http.get(f"{stack.api_url}/v1/console/router-figures") as response:
        assert response.status == 401
    await stack.apply(member("counted"))
    await eventually(lambda: stack.served("counted"), timeout=20, message="the echo member served")
    for _ in range(3):
        assert (await stack.chat("counted"))[0] == 200
    code, body = await stack.get("/v1/console/router-figures")
    assert code == 200, body
    assert body["members"]["counted"]["requests"] == 3 and body["models"]["counted"]["requests"] == 3
    assert body["router_url"] == stack.router_url


async def test_the_members_page_shows_health_models_figures_and_drains(page: Any, stack: Stack) -> None:
    pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
    from playwright.async_api import expect

    await stack.apply(member("echo-pool"))
    await eventually(lambda: stack.served("echo-pool"), timeout=20, message="the echo member served")
    for _ in range(3):
        assert (await stack.chat("echo-pool"))[0] == 200
    await page.goto(f"{stack.api_url}/ui/#/members")
    await expect(page.get_by_role("link", name="Pool members")).to_have_attribute("aria-current", "page")
    row = page.locator('tr[data-name="echo-pool"]')
    await expect(row.locator("[data-phase]")).to_have_attribute("data-phase", "Healthy", timeout=TIMEOUT)
    await expect(row.locator('[data-col="advertised"] [data-status]')).to_have_attribute("data-status", "True", timeout=TIMEOUT)
    await expect(row.locator('[data-model="echo-pool"]')).to_contain_text("4,096 tokens")
    await expect(row.locator('[data-col="draining"]')).to_have_text("no")
    await expect(row.locator('[data-col="requests"]')).to_have_text(re.compile(r"^[1-9][0-9]*$"), timeout=TIMEOUT)
    await expect(row.locator('[data-col="in_flight"]')).to_have_text("0")
    models = page.get_by_role("table", name="Models").locator('tr[data-model="echo-pool"]')
    await expect(models.locator('[data-col="requests"]')).to_have_text(re.compile(r"^[1-9][0-9]*$"), timeout=TIMEOUT)
    # the second reading has a baseline: a rate, shown with two decimals
    await expect(row.locator('[data-col="rps"]')).to_have_text(re.compile(r"^[0-9]+\.[0-9]{2}$"), timeout=TIMEOUT)
    await screenshot(page, "members")

    # drain, with the confirmation (cancelled first)
    await row.get_by_role("button", name="Drain echo-pool").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("Drain echo-pool?")
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_be_hidden()
    assert await draining(stack, "echo-pool", False)
    await row.get_by_role("button", name="Drain echo-pool").click()
    await dialog.get_by_role("button", name="Confirm").click()
    await expect(row).to_have_attribute("data-draining", "true", timeout=TIMEOUT)
    await expect(row.locator('[data-col="draining"]')).to_have_text("draining")
    await eventually(lambda: draining(stack, "echo-pool", True), timeout=20, message="drained through the apply API")
    _, view = await stack.get("/v1/kinds/ipm/echo-pool")
    assert view["metadata"]["labels"] == {"team": "console"}  # re-applied whole: the labels kept

    # undrain by keyboard alone: the toggle, then Tab from Cancel to Confirm
    await row.get_by_role("button", name="Undrain echo-pool").focus()
    await page.keyboard.press("Enter")
    await expect(dialog).to_contain_text("Undrain echo-pool?")
    await expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await expect(row).to_have_attribute("data-draining", "false", timeout=TIMEOUT)
    await eventually(lambda: draining(stack, "echo-pool", False), timeout=20, message="undrained through the apply API")

    # a phone's width: the page itself does not scroll sideways (the tables scroll in their boxes)
    await page.set_viewport_size({"width": 390, "height": 800})
    await expect(row).to_be_attached()
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
