"""The console in a real browser at size: the deployments page with 1,000 deployments, a timeline of 10,000 events.

    .venv/bin/python -m bench.console [--deployments 1000] [--events 10000] [--runs 3] [--json FILE]

On a fresh NATS store the watcher and the apply API run (as in `jetway up`, without the pipeline: the rows
stay Pending, which costs the page the same). N - 1 ModelDeployments are applied through the API (64 in
flight), and the N-th gets E spec events appended straight to the event store (each a re-apply with other
labels; the stream keeps every event, `JETWAY_HISTORY_PER_FACET=unlimited`: by default a facet keeps its
last 64, so a timeline holds at most 64 events a facet). Then Debian's chromium, driven by Playwright, logs
in through a one-time link and, per run, loads:

- the deployments page: first paint and first contentful paint (`performance.getEntriesByType('paint')`),
  and the time from navigation until the N-th row is in the table (checked every animation frame);
- live data: a deployment scaled through the API, until its row shows the new replicas (from the apply's start);
- the timeline of the resource with E events: until its first page of rows is shown, and until the state
  pane shows the state as of the last event (the API folds all E events for it); then every page loaded
  ("Load more" until the end), and the frame times while its table scrolls from top to bottom.

Times are medians over the runs, in milliseconds. Needs chromium and the playwright package (the `test` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from contracts.events import ResourceApplied
from contracts.subjects import Key
from runtime.bus import StreamSettings, connect, ensure_streams
from runtime.eventstore import EventStore
from runtime.natsserver import NatsServer
from services.console import api
from services.console.web import Console
from services.watcher import main as watcher_main

NAMESPACE = "bench"
TIMELINE = "history"  # the deployment with the long history
SPEC: dict[str, Any] = {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}}


def manifest(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}, "scaling": {"replicas": replicas}},
    }


def chromium() -> str:
    found = os.environ.get("JETWAY_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("bench.console needs chromium: apt-get install chromium (or set JETWAY_CHROMIUM)")
    return found


async def apply_all(session: aiohttp.ClientSession, url: str, n: int) -> float:
    started = time.perf_counter()

    async def post(i: int) -> None:
        async with session.post(f"{url}/v1/apply", json=manifest(f"m{i:04d}")) as response:
            assert response.status in (200, 201), await response.text()

    for start in range(0, n, 64):
        await asyncio.gather(*(post(i) for i in range(start, min(start + 64, n))))
    return time.perf_counter() - started


async def long_history(store: EventStore, events: int) -> float:
    """`events` re-applies of one deployment, each with other labels, appended straight to the store."""
    subject = Key("ModelDeployment", NAMESPACE, TIMELINE).subject()
    started = time.perf_counter()
    for i in range(events):  # one at a time: the stream keeps their order
        labels = {"revision": str(i), "team": f"t{i % 7}"}
        event = ResourceApplied(
            kind="ModelDeployment", namespace=NAMESPACE, name=TIMELINE, generation=1, spec=SPEC, labels=labels, uid="uid-history"
        )
        await store.append(subject, event)
    return time.perf_counter() - started


ROWS_AT = """(n) => document.querySelectorAll('#main tbody tr').length >= n ? performance.now() : false"""
LOADED = "Number(document.querySelector('#as-of').max) + 1"  # events loaded (rows in the DOM may be fewer)
PAINTS = """() => Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]))"""
SCROLL = """async () => {
  const box = document.querySelector('.scroll.tall');
  const frames = [];
  let last = await new Promise((r) => requestAnimationFrame(r));
  box.scrollTop = 0;
  while (box.scrollTop + box.clientHeight < box.scrollHeight - 1) {
    box.scrollTop += 400;
    const now = await new Promise((r) => requestAnimationFrame(r));
    frames.push(now - last);
    last = now;
  }
  return frames;
}"""


async def deployments_page(page: Any, api_url: str, n: int) -> dict[str, float]:
    await page.goto("about:blank")
    await page.goto(f"{api_url}/ui/#/deployments")
    rows = await (await page.wait_for_function(ROWS_AT, arg=n, polling="raf", timeout=120_000)).json_value()
    paints = await page.evaluate(PAINTS)
    return {
        "first_paint": paints.get("first-paint", 0.0),
        "first_contentful_paint": paints.get("first-contentful-paint", 0.0),
        "rows": rows,
    }


async def live_change(page: Any, session: aiohttp.ClientSession, api_url: str, index: int) -> float:
    name = f"m{index:04d}"
    started = time.perf_counter()
    async with session.post(f"{api_url}/v1/apply", json=manifest(name, replicas=2)) as response:
        assert response.status == 200, await response.text()
    cell = f'document.querySelector(\'tr[data-name="{name}"] td:nth-child(6)\')?.textContent === "0/2"'
    await page.wait_for_function(f"() => {cell}", polling="raf", timeout=60_000)
    return 1000 * (time.perf_counter() - started)


async def timeline_page(page: Any, api_url: str) -> dict[str, float]:
    await page.goto("about:blank")
    await page.goto(f"{api_url}/ui/#/timeline/ModelDeployment/{NAMESPACE}/{TIMELINE}")
    first = await (await page.wait_for_function(ROWS_AT, arg=1, polling="raf", timeout=120_000)).json_value()
    state = await (
        await page.wait_for_function(
            "() => document.querySelector('#state')?.dataset.seq ? performance.now() : false", polling="raf", timeout=120_000
        )
    ).json_value()
    shown = await page.evaluate(LOADED)
    more = page.get_by_role("button", name="Load more")
    started = time.perf_counter()
    pages = 1
    while await more.is_visible():
        count = await page.evaluate(LOADED)
        await more.click()
        await page.wait_for_function(f"() => ({LOADED}) > {count}", polling="raf", timeout=120_000)
        pages += 1
    all_loaded = 1000 * (time.perf_counter() - started)
    total = await page.evaluate(LOADED)
    frames = sorted(await page.evaluate(SCROLL))
    return {
        "first_rows": first,
        "first_rows_shown": shown,
        "state_shown": state,
        "pages": pages,
        "rows": total,
        "load_all": all_loaded,
        "scroll_frames": len(frames),
        "scroll_frame_p50": frames[len(frames) // 2] if frames else 0.0,
        "scroll_frame_max": frames[-1] if frames else 0.0,
    }


def median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in rows), 1) for key in rows[0]}


async def main(deployments: int, events: int, runs: int) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    server = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-console-bench-"))).start()
    nc = await connect(server.url, name="bench")
    # every event kept: by default a facet keeps its last 64 (runtime/bus.py), so no timeline reaches 10,000;
    # the services' runners set the stream up from the environment too
    os.environ["JETWAY_HISTORY_PER_FACET"] = "unlimited"  # before anything reads the settings (runtime/settings.py)
    await ensure_streams(nc.jetstream(), StreamSettings(history_per_facet=-1))
    watcher = watcher_main.build(nc)
    token = secrets.token_urlsafe(16)
    console = Console()
    door = api.standalone(nc, watcher.service, token, console)
    watcher_task = asyncio.gather(watcher.runner.run(), door.runner.run())
    await watcher.runner.ready.wait()
    await door.runner.ready.wait()
    runner, port = await api.serve(door.app, "127.0.0.1", 0)
    api_url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            applied = await apply_all(session, api_url, deployments - 1)
            appended = await long_history(EventStore(nc, producer="watcher"), events)
            while len(watcher.service.state.resources.of_kind("ModelDeployment")) < deployments:
                await asyncio.sleep(0.05)
            print(
                f"applied {deployments - 1:,} deployments through the API in {applied:.1f} s; "
                f"{events:,} events appended in {appended:.1f} s"
            )
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium(), headless=True)
                context = await browser.new_context(viewport={"width": 1280, "height": 800})
                page = await context.new_page()
                await page.goto(console.login_url(api_url))
                loads = [await deployments_page(page, api_url, deployments) for _ in range(runs)]
                changes = [await live_change(page, session, api_url, (i * 97) % (deployments - 1)) for i in range(max(runs, 5))]
                timelines = [await timeline_page(page, api_url) for _ in range(runs)]
                await browser.close()
    finally:
        await runner.cleanup()
        watcher.runner.stop()
        door.runner.stop()
        await asyncio.gather(watcher_task, return_exceptions=True)
        await nc.close()
        server.stop()
    page_figures = median(loads)
    timeline_figures = median(timelines)
    change = round(statistics.median(changes), 1)
    print(f"deployments page, {deployments:,} rows (median of {runs} loads, ms from navigation):")
    print(
        f"  first paint {page_figures['first_paint']}, first contentful paint {page_figures['first_contentful_paint']}, "
        f"all rows {page_figures['rows']}"
    )
    print(f"  a change applied through the API shown in its row after {change} ms (median of {len(changes)})")
    print(f"timeline of {events:,} events (median of {runs} loads, ms from navigation):")
    print(
        f"  first {int(timeline_figures['first_rows_shown'])} events {timeline_figures['first_rows']}, state as of the last event "
        f"{timeline_figures['state_shown']}; all {int(timeline_figures['rows']):,} in {int(timeline_figures['pages'])} pages "
        f"after {timeline_figures['load_all']} ms more"
    )
    print(
        f"  scrolling all of them, 400 px a frame: {int(timeline_figures['scroll_frames'])} frames, "
        f"p50 {timeline_figures['scroll_frame_p50']} ms, max {timeline_figures['scroll_frame_max']} ms"
    )
    return {
        "deployments": deployments,
        "events": events,
        "runs": runs,
        "deployments_page": page_figures,
        "live_change_ms": change,
        "timeline": timeline_figures,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = asyncio.run(main(options.deployments, options.events, options.runs))
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
