"""The console's tests: a standalone stack with the pipeline (so deployments change phase), and a real browser.

The browser is Debian's chromium driven by the playwright package (no browser download). Without either the
browser tests skip saying how to get them (the skip summary names the reason); `.ci/run` installs chromium first
when it can (apt), so CI runs them wherever the package can be installed."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from contracts.routing import BATCH, ROUTING_PREFIX, RoutingRecord
from runtime.bus import connect
from services.router import records as router_records
from services.router.records import Records
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, running_pipeline, running_stack

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "console"
NO_BROWSER = (
    "the console's browser tests drive a system chromium with the playwright package: "
    "apt-get install chromium (or set JETWAY_CHROMIUM to a Chromium binary) and pip install -e '.[test]'; "
    "`playwright install` is not needed"
)


def chromium_path() -> str | None:
    named = os.environ.get("JETWAY_CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def required_or_skip(reason: str) -> None:
    pytest.skip(reason)


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    """The standalone stack with the selector, storage and workload services, so a deployment gets a phase."""
    async with running_stack(nats.url, tmp_path) as running, running_pipeline(nats.url):
        yield running


@pytest.fixture
async def recording(stack: Stack) -> AsyncIterator[Records]:
    """The stack's router writing routing records (as `jetway up` does with JETWAY_ROUTER_RECORDS=1) into the stream,
    made here as the router makes it."""
    nc = await connect(stack.nats_url, name="records")
    await router_records.ensure_stream(nc.jetstream(timeout=10), 3600.0, 64 * 1024 * 1024)
    records = Records(nc, "replica-a")
    stack.router.routes.records = records
    publishing = asyncio.create_task(records.run())
    try:
        yield records
    finally:
        stack.router.routes.records = None
        records.stop()
        await asyncio.wait_for(publishing, 10)
        await nc.close()


async def store_records(nats_url: str, batches: Sequence[Sequence[RoutingRecord]], replica: str = "replica-a") -> list[int]:
    """Batches of records stored in the routing records' stream as a router replica publishes them (one message a
    batch), each acknowledged: stored when this returns. Their stream sequences."""
    nc = await connect(nats_url, name="records")
    try:
        js = nc.jetstream(timeout=10)
        await router_records.ensure_stream(js, 3600.0, 64 * 1024 * 1024)
        return [(await js.publish(f"{ROUTING_PREFIX}.{replica}", BATCH.encode(list(batch)))).seq for batch in batches]
    finally:
        await nc.close()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium for one test, launched on the test's loop."""
    try:
        from playwright.async_api import async_playwright, expect
    except ImportError:
        required_or_skip(f"playwright is not installed: {NO_BROWSER}")
    # every expectation waits as long as the tests' explicit ones (5 s by default): the pages follow event streams
    # and fetches on a machine whose two cores also run the services and chromium
    expect.set_options(timeout=20_000)
    path = chromium_path()
    if path is None:
        required_or_skip(f"no chromium found: {NO_BROWSER}")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report kept on the test, for `page` to know at its teardown whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
async def page(browser: Any, stack: Stack, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A page logged in to the stack's console through a one-time login link, 1280 px wide. When its test fails, the
    failure's output says what the page was waiting for: its requests never answered or failed, what its console said,
    and what it shows (two suite runs each saw a page that never drew its content, and said nothing more)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    tab = await context.new_page()
    errors: list[str] = []
    loop = asyncio.get_running_loop()
    pending: dict[Any, float] = {}
    failed: list[str] = []
    said: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("request", lambda sent: pending.__setitem__(sent, loop.time()))
    tab.on("requestfinished", lambda sent: pending.pop(sent, None))

    def lost(sent: Any) -> None:
        pending.pop(sent, None)
        failed.append(f"{sent.method} {sent.url}: {sent.failure}")

    tab.on("requestfailed", lost)
    refused: list[str] = []

    def answered(answer: Any) -> None:
        if answer.status >= 400:
            refused.append(f"{answer.status} {answer.request.method} {answer.url}")

    tab.on("response", answered)
    tab.on("console", lambda message: said.append(f"{message.type}: {message.text}") if message.type in ("error", "warning") else None)
    assert stack.console is not None
    await tab.goto(stack.console.login_url(stack.api_url))
    try:
        yield tab
        assert not errors, f"the page's scripts failed: {errors}"
        missing = [line for line in said if "status of 404" in line]  # a 400 is a form's answer, a 404 a missing file
        assert not missing, f"the page asked for something that is not there: {missing}"
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            now = loop.time()
            waiting = [f"{sent.method} {sent.url} ({now - since:.1f} s)" for sent, since in pending.items()]
            try:
                shown = await tab.locator("#main").inner_text(timeout=2_000)
            except Exception as exc:  # the page itself may be what is broken: say so, and the rest
                shown = f"(not readable: {type(exc).__name__})"
            print(f"the page at {tab.url}\n  requests unanswered: {waiting}\n  requests failed: {failed}\n  answered 4xx/5xx: {refused}")
            print(f"  console errors and warnings: {said}\n  #main shows: {shown!r}")
        await context.close()


async def screenshot(tab: Any, name: str) -> None:
    """Pictures for docs/console.md, taken when JETWAY_SCREENSHOTS=1 (not on every run: they would differ each time)."""
    if os.environ.get("JETWAY_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
