"""The console in a real browser (chromium through Playwright): each page clicked through as a user would.

Every wait is on a condition (Playwright's `expect`, or `eventually` on the API), never on the clock."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from testbed.waiting import eventually
from tests.console.conftest import screenshot
from tests.contracts.cases import MD, changed
from tests.support.stack import Stack, echo_member

pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
from playwright.async_api import expect

TIMEOUT = 20_000  # ms: the pipeline's services answer within a second or two; generous for a loaded machine


async def conditions(stack: Stack, name: str) -> set[str]:
    _, view = await stack.get(f"/v1/kinds/md/{name}")
    return {c["type"] for c in view.get("status", {}).get("conditions", [])}


async def test_the_login_link_opens_the_console_and_a_deployment_appears_and_changes_phase_live(page: Any, stack: Stack) -> None:
    await expect(page).to_have_url(f"{stack.api_url}/ui/", timeout=TIMEOUT)
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "jetway_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    await expect(page.get_by_role("status")).to_contain_text("Live: 0 deployments", timeout=TIMEOUT)

    # applied through the API while the page is open: it appears without a reload, fails validation, then, fixed, recovers
    cpu_only = {"metadata.name": "live", "spec.engine": {"type": "trtllm"}, "spec.resources": {"gpu": {"count": 0}}}
    await stack.apply(changed(MD, cpu_only))
    row = page.locator('tr[data-name="live"]')
    await expect(row).to_be_visible(timeout=TIMEOUT)
    await expect(row.locator("td").nth(4)).to_have_text("trtllm")
    await expect(row.locator("[data-phase]")).to_have_attribute("data-phase", "Failed", timeout=TIMEOUT)
    await stack.apply(changed(MD, {**cpu_only, "spec.resources": {"gpu": {"count": 1}}}))
    await expect(row.locator("[data-phase]")).to_have_attribute("data-phase", "Pending", timeout=TIMEOUT)
    await expect(row.locator("td").nth(3)).not_to_have_text("auto", timeout=TIMEOUT)  # the provider chosen
    await stack.apply(changed(MD, {"metadata.name": "second"}))
    await expect(page.get_by_role("status")).to_contain_text("Live: 2 deployments", timeout=TIMEOUT)
    await screenshot(page, "deployments")

    # its detail: the conditions with reasons and messages
    await row.get_by_role("link", name="live").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/deployments/default/live")
    validated = page.get_by_role("table", name="Conditions").locator("tr", has_text="Validated")
    await expect(validated).to_contain_text("ValidationPassed", timeout=TIMEOUT)
    await expect(page.get_by_role("heading", name="Rendered objects")).to_be_visible()
    await screenshot(page, "detail")


async def test_the_create_form_shows_a_field_error_in_place_then_creates_and_its_timeline_replays(page: Any, stack: Stack) -> None:
    await page.goto(f"{stack.api_url}/ui/#/create")
    name = page.get_by_label("Name", exact=True)
    await name.fill("Not_A_Valid_Name")
    error = page.locator('.field-error[data-field="name"]')
    await expect(error).to_contain_text("must be a DNS-1035 label", timeout=TIMEOUT)
    await expect(name).to_have_attribute("aria-invalid", "true")
    await page.get_by_label("GPUs per replica").fill("2")
    await page.get_by_label("Engine").select_option("vllm")
    await expect(page.locator("#preview")).to_contain_text("count: 2")
    await screenshot(page, "create")

    await name.fill("from-form")
    await expect(error).to_be_empty(timeout=TIMEOUT)
    await expect(page.locator(".verdict")).to_contain_text("Valid: would create", timeout=TIMEOUT)
    await page.get_by_label("Preview format").select_option("json")
    await expect(page.locator("#preview")).to_contain_text('"name": "from-form"')
    await page.get_by_role("button", name="Create").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/deployments/default/from-form", timeout=TIMEOUT)
    _, view = await stack.get("/v1/kinds/md/from-form")
    assert view["spec"]["resources"]["gpu"]["count"] == 2 and view["spec"]["engine"]["type"] == "vllm"

    # once the services decided, the timeline has their events; the slider replays the state as of each
    await eventually(lambda: conditions(stack, "from-form"), timeout=20, message="decisions recorded")
    await eventually(lambda: _workload_rendered(stack), timeout=20, message="workload rendered")
    await page.get_by_role("link", name="Timeline").click()
    rows = page.get_by_role("table", name="Events").locator("tbody tr")
    await expect(rows.first).to_contain_text("ResourceApplied.v1", timeout=TIMEOUT)
    await expect(rows.first).to_be_visible()
    state = page.locator("#state")
    await expect(state).to_contain_text("ProviderSelected", timeout=TIMEOUT)
    slider = page.get_by_role("slider")
    await slider.focus()
    await page.keyboard.press("Home")  # the first event: the spec alone, no decision yet
    await expect(page.locator("#as-of-label")).to_contain_text("As of event 1 of")
    await expect(state).to_contain_text("generation: 1")
    await expect(state).not_to_contain_text("ProviderSelected")
    await expect(rows.first).to_have_class("current")
    await page.keyboard.press("End")
    await expect(state).to_contain_text("ProviderSelected")
    await screenshot(page, "timeline")
    # the storage decision was caused by the spec it answered: following the link moves the slider there
    selected = rows.filter(has_text="StoragePlanned.v1").first
    await selected.get_by_role("button").first.click()
    await expect(page.locator("#as-of-label")).to_contain_text("As of event 1 of")


async def _workload_rendered(stack: Stack) -> bool:
    _, body = await stack.get("/v1/kinds/md/from-form/history?limit=1000")
    return any(e["type"] == "WorkloadRendered.v1" for e in body["events"])


async def test_the_timeline_shows_what_changed_between_two_points(page: Any, stack: Stack) -> None:
    """Re-applied with another replica count: A on the first apply, B on the last event, the diff names the field."""
    await stack.apply(changed(MD, {"metadata.name": "scaled", "spec.scaling": {"replicas": 1}}))
    await stack.apply(changed(MD, {"metadata.name": "scaled", "spec.scaling": {"replicas": 2}}))
    await eventually(lambda: _applied(stack, "scaled", 2), timeout=20, message="the second apply recorded")
    await page.goto(f"{stack.api_url}/ui/#/timeline/ModelDeployment/default/scaled")
    state = page.locator("#state")
    slider = page.get_by_role("slider")
    await expect(page.get_by_role("table", name="Events").locator("tbody tr").first).to_contain_text("ResourceApplied.v1", timeout=TIMEOUT)
    changes = page.get_by_role("table", name="Changes")
    await expect(changes).to_be_hidden()

    # by keyboard alone: the first event, then Tab to "Compare from this event" and Enter pins it as A
    await slider.focus()
    await page.keyboard.press("Home")
    await expect(state).to_contain_text("replicas: 1", timeout=TIMEOUT)
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Compare from this event")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#comparing")).to_contain_text("Comparing from A: seq")
    await expect(page.locator("#changes-note")).to_contain_text("No change from", timeout=TIMEOUT)

    # B on the last event: the replica count and the generation changed, and the decisions taken meanwhile were added
    await slider.focus()
    await page.keyboard.press("End")
    replicas = changes.locator('tr[data-path="spec.scaling.replicas"]')
    await expect(replicas.locator("td")).to_have_text(["spec.scaling.replicas", "changed", "1", "2"], timeout=TIMEOUT)
    await expect(changes.locator('tr[data-path="metadata.generation"] td')).to_have_text(["metadata.generation", "changed", "1", "2"])
    await expect(page.locator("#changes-note")).to_contain_text("(A) to seq")
    await expect(state).to_contain_text("replicas: 2")
    await screenshot(page, "timeline-diff")

    # the other way round: A after B reverses the change; then comparing stops
    await page.get_by_role("button", name="Compare from this event").click()
    await slider.focus()
    await page.keyboard.press("Home")
    await expect(replicas.locator("td")).to_have_text(["spec.scaling.replicas", "changed", "2", "1"], timeout=TIMEOUT)
    await page.get_by_role("button", name="Stop comparing").click()
    await expect(changes).to_be_hidden()
    await expect(page.get_by_role("button", name="Compare from this event")).to_be_focused()


async def _applied(stack: Stack, name: str, generation: int) -> bool:
    _, body = await stack.get(f"/v1/kinds/md/{name}/history?limit=1000")
    return f"generation {generation}" in [e["summary"] for e in body.get("events", [])]


async def test_delete_asks_for_confirmation(page: Any, stack: Stack) -> None:
    status, body = await stack.apply(changed(MD, {"metadata.name": "doomed"}))
    assert status == 201, body
    await page.goto(f"{stack.api_url}/ui/#/deployments/default/doomed")
    await visible(page, page.get_by_role("button", name="Delete…"))
    await page.get_by_role("button", name="Delete…").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("Delete doomed?")
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_be_hidden()
    assert (await stack.get("/v1/kinds/md/doomed"))[0] == 200
    await page.get_by_role("button", name="Delete…").click()
    await dialog.get_by_role("button", name="Delete").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/deployments", timeout=TIMEOUT)
    await eventually(lambda: _gone(stack, "doomed"), timeout=20, message="deleted")
    await expect(page.locator('tr[data-name="doomed"]')).to_have_count(0, timeout=TIMEOUT)


async def visible(page: Any, locator: Any) -> None:
    """`locator` shown within TIMEOUT; else what the page shows instead, in the failure (one CI run's suite never saw
    the detail page's Delete button, and said nothing more)."""
    try:
        await expect(locator).to_be_visible(timeout=TIMEOUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nat {page.url} the page shows: {await page.locator('#main').inner_text()!r}") from None


async def _gone(stack: Stack, name: str) -> bool:
    return (await stack.get(f"/v1/kinds/md/{name}"))[0] == 404


async def test_the_playground_streams_a_chat_through_the_router(page: Any, stack: Stack) -> None:
    await stack.apply(echo_member("echo"))
    await eventually(lambda: stack.served("echo"), timeout=20, message="the echo member served")
    await page.goto(f"{stack.api_url}/ui/#/playground")
    await page.get_by_label("Model").select_option("echo")
    await page.get_by_label("Message").fill("streamed through the console")
    await page.get_by_role("button", name="Send").click()
    answer = page.locator("#answer")
    await expect(answer).to_have_attribute("data-done", "true", timeout=TIMEOUT)
    await expect(answer).to_contain_text("streamed through the console")
    await expect(page.locator('[data-stat="Member"]')).to_have_text("echo")
    await expect(page.locator('[data-stat="TTFT"]')).to_contain_text(" ms")
    await expect(page.locator('[data-stat="Tokens/s"]')).not_to_be_empty()
    await screenshot(page, "playground")


async def test_without_a_session_the_pages_answer_401(browser: Any, stack: Stack) -> None:
    context = await browser.new_context()
    try:
        tab = await context.new_page()
        response = await tab.goto(f"{stack.api_url}/ui/")
        assert response is not None and response.status == 401
        await expect(tab.locator("body")).to_contain_text("jetway console")
        for path in ("/ui/app.js", "/v1/kinds/md", "/v1/watch?kind=md"):
            answer = await tab.request.get(f"{stack.api_url}{path}")
            assert answer.status == 401, path
        # a used link does not log in again
        assert stack.console is not None
        url = stack.console.login_url(stack.api_url)
        async with aiohttp.ClientSession() as first, first.get(url, allow_redirects=False) as redeemed:
            assert redeemed.status == 302
        response = await tab.goto(url)
        assert response is not None and response.status == 401
        await expect(tab.locator("body")).to_contain_text("not valid")
    finally:
        await context.close()
