"""Following a causation link in a real browser (chromium through Playwright) to another resource's timeline.

A deployment's ProviderSelected was caused by a provider's event; from the deployment's timeline, by keyboard
alone, the link leads to the provider's timeline, loaded page by page until the cause is there, with the cause's
row chosen and focused. Every wait is on a condition (Playwright's `expect`, `eventually`), never on the clock."""

from __future__ import annotations

import re
from typing import Any

import pytest

from testbed.waiting import eventually
from tests.console.test_console_events import caused_by_a_provider, events_of
from tests.contracts.cases import MD
from tests.support.stack import Stack

pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
from playwright.async_api import expect

TIMEOUT = 20_000  # ms
PAGE = 2  # events per history page here (the console asks for 200): the events sought lie pages away


async def test_a_causation_link_leads_to_the_cause_in_another_resources_timeline(page: Any, stack: Stack) -> None:
    selected = await caused_by_a_provider(stack, acme_applies=4)
    cause = selected["causation_id"]
    _, where = await stack.get(f"/v1/console/events/{cause}?before={selected['seq']}")
    assert where["kind"] == "InferenceProviderConfig", where
    provider = [e["id"] for e in await events_of(stack, "InferenceProviderConfig", where["name"])]
    assert provider.index(cause) >= PAGE, "the cause is not on the provider timeline's first page"

    # the console's pages of events, made small: finding an event means loading pages until it is there
    pages: list[str] = []

    async def small_pages(route: Any) -> None:
        pages.append(route.request.url)
        await route.continue_(url=route.request.url.replace("limit=200", f"limit={PAGE}"))

    await page.route(lambda url: "/history?" in url and "limit=200" in url, small_pages)

    # the deployment's timeline opened at its ProviderSelected (itself a few pages in), its row focused
    await page.goto(f"{stack.api_url}/ui/#/timeline/ModelDeployment/default/cpu-trt?event={selected['id']}&seq={selected['seq']}")
    row = page.locator(f'tr[data-seq="{selected["seq"]}"]')
    await expect(row).to_be_focused(timeout=TIMEOUT)
    await expect(row).to_have_class("current")
    await expect(page.locator("#as-of-label")).to_contain_text(f"seq {selected['seq']}, ProviderSelected.v1")

    # Tab to its "Caused by" link (another resource's event: shown by its id), Enter follows it
    await page.keyboard.press("Tab")
    link = row.locator("td").nth(4).get_by_role("button")
    await expect(link).to_be_focused()
    await expect(link).to_have_text(f"{cause[:8]}…")
    await page.keyboard.press("Enter")

    await expect(page).to_have_url(re.compile(rf"#/timeline/InferenceProviderConfig//{where['name']}\?event={cause}"), timeout=TIMEOUT)
    target = page.locator(f'tr[data-seq="{where["seq"]}"]')
    await expect(target).to_be_focused(timeout=TIMEOUT)
    await expect(target).to_have_class("current")
    await expect(target).to_have_attribute("aria-current", "true")
    await expect(target.locator("td").nth(2)).to_have_text(where["type"])
    await expect(page.locator("#as-of-label")).to_contain_text(f"seq {where['seq']}, {where['type']}")
    await expect(page.locator("#followed")).to_contain_text(f"is seq {where['seq']} here")
    await expect(page.locator("#state")).to_contain_text(f"name: {where['name']}", timeout=TIMEOUT)
    assert any(f"/InferenceProviderConfig/{where['name']}/history?after=" in url for url in pages), "later pages were loaded"


async def test_an_event_not_in_the_timeline_is_said_to_be_missing(page: Any, stack: Stack) -> None:
    await stack.apply(MD)
    await eventually(lambda: events_of(stack, "md", "qwen"), timeout=20, message="the deployment's history")
    await page.goto(f"{stack.api_url}/ui/#/timeline/ModelDeployment/default/qwen?event=0b3e7a52-0000-4000-8000-000000000000")
    await expect(page.get_by_role("alert")).to_contain_text("is not in this timeline", timeout=TIMEOUT)
    # the slider then rests on the last event, as when no event is asked for
    await expect(page.locator("#as-of-label")).to_contain_text("As of event", timeout=TIMEOUT)
