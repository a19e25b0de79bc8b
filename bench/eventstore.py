"""Event store throughput against raw nats-py, measured in one run on one server.

    .venv/bin/python -m bench.eventstore [--events 100000] [--json bench/results/eventstore.json]
    .venv/bin/python -m bench.eventstore --events 20000 --baseline-ref HEAD~3 [--rounds 3]

With `--baseline-ref`, the tree at that git ref (a `git worktree` in a temporary folder, removed
afterwards) and this tree each run the whole benchmark in a process of their own, alternating round
by round (new, old, then old, new, ...), so both see the machine's load alike. Each round starts
its own NATS; a ratio compares ours with raw nats-py measured in the same process, and the table
gives each build's median ratio over the rounds.

Rows (each with its raw nats-py baseline and the ratio ours/raw):
- append, one at a time: EventStore.append awaiting each ack vs `js.publish` awaiting each.
- append, 64 in flight: concurrent appends vs raw publishes gathered 64 at a time.
- read (decode to typed envelopes) vs a raw ordered consumer that only counts.
- rebuild: a service's projection (the resources projection) folded from N events.
- consume: the service loop (fetch, decode, fold, reconcile, ack) vs raw pull + ack.

NATS runs with Jetway's shipped `sync_interval: always` (each ack after an fsync).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.js import api

from contracts.events import Envelope, ResourceApplied, StatusReported, StatusSlice, encode, new_envelope
from contracts.subjects import Key, kind_filter
from runtime.bus import EVENTS_STREAM, connect, ensure_streams
from runtime.eventstore import EventStore
from runtime.feed import Delivery, Feed, follow
from runtime.natsserver import NatsServer
from runtime.resources import Resources
from runtime.service import Effects, Runner, RunnerSettings, Service

SPEC = {
    "model": {"id": "Qwen/Qwen3-0.6B", "source": "huggingface"},
    "engine": {"type": "vllm", "enablePrefixCaching": True},
    "resources": {"gpu": {"count": 1, "type": "nvidia.com/gpu"}},
    "scaling": {"replicas": 1},
}


def event(i: int) -> tuple[str, ResourceApplied]:
    key = Key("ModelDeployment", "bench", f"m{i % 5000}")
    return key.subject(), ResourceApplied(kind=key.kind, namespace=key.namespace, name=key.name, generation=i // 5000 + 1, spec=SPEC)


async def rate(count: int, work: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await work()
    return count / (time.perf_counter() - started)


class Folding(Service):
    """A service whose projection is the resources projection and whose reconcile decides nothing."""

    name = "bench"
    consumes = (kind_filter("ModelDeployment"),)

    def __init__(self) -> None:
        self.resources = Resources()
        self.handled = 0

    def fold(self, envelope: Envelope) -> None:
        self.resources.fold(envelope)
        self.handled += 1

    async def reconcile(self, key: Key, effects: Effects) -> None:
        return None


async def main(events: int) -> dict[str, Any]:
    server = NatsServer(store_dir=Path(tempfile.mkdtemp(prefix="jetway-bench-"))).start()
    nc = await connect(server.url, name="bench")
    js = nc.jetstream(timeout=30)
    await ensure_streams(js)
    store = EventStore(nc, producer="bench")
    rows: dict[str, Any] = {}
    sample = 3000

    # --- append, one at a time
    subject, body = event(0)
    data = encode(new_envelope(subject, body, producer="bench"))

    async def raw_one_by_one() -> None:
        for i in range(sample):
            await js.publish(f"jetway.evt.raw.bench.r{i}.spec", data, stream=EVENTS_STREAM, headers={"Nats-Msg-Id": f"raw-{i}"})

    async def ours_one_by_one() -> None:
        for i in range(sample):
            await store.append(*event(i))

    rows["append, one at a time"] = (await rate(sample, ours_one_by_one), await rate(sample, raw_one_by_one))

    # --- append, 64 in flight
    async def raw_concurrent() -> None:
        for start in range(0, sample, 64):
            await asyncio.gather(
                *(
                    js.publish(f"jetway.evt.raw.bench.c{i}.spec", data, stream=EVENTS_STREAM, headers={"Nats-Msg-Id": f"rawc-{i}"})
                    for i in range(start, min(start + 64, sample))
                )
            )

    async def ours_concurrent() -> None:
        for start in range(0, sample, 64):
            await asyncio.gather(*(store.append(*event(i)) for i in range(start, min(start + 64, sample))))

    rows["append, 64 in flight"] = (await rate(sample, ours_concurrent), await rate(sample, raw_concurrent))

    # --- fill the stream to `events` ModelDeployment events (quickly, pipelined)
    pending = []
    for i in range(events - 2 * sample):
        subject, body = event(i + 2 * sample)
        pending.append(await js.publish_async(subject, encode(new_envelope(subject, body, producer="bench"))))
        if len(pending) >= 4000:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    md_events = events  # the appends above plus the fill: every ModelDeployment event in the stream

    # --- read: raw ordered consumer (count only) vs typed decode
    async def raw_read() -> None:
        done = asyncio.Event()
        seen = 0

        async def count(msg: Any) -> None:
            nonlocal seen
            seen += 1
            if seen >= md_events:
                done.set()

        sub = await js.subscribe(
            kind_filter("ModelDeployment"), stream=EVENTS_STREAM, cb=count, ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL
        )
        await done.wait()
        await sub.unsubscribe()

    read_count = 0

    async def ours_read() -> None:
        nonlocal read_count
        read_count = len(await store.read(kind_filter("ModelDeployment")))

    raw_read_rate = await rate(md_events, raw_read)
    ours_read_rate = await rate(md_events, ours_read)
    assert read_count == md_events, (read_count, md_events)
    rows[f"read {md_events:,} events"] = (ours_read_rate, raw_read_rate)

    # --- rebuild a service's projection
    service = Folding()
    runner = Runner(service, nc)
    started = time.perf_counter()
    await runner.rebuild()
    rebuild_seconds = time.perf_counter() - started
    rows[f"rebuild from {md_events:,} events"] = (md_events / rebuild_seconds, raw_read_rate)
    resources = len(service.resources.items)

    # --- consume: the service loop (fold, reconcile) vs a raw ordered consumer, both in batches
    consume = 10_000

    async def ordered() -> Any:
        return await js.subscribe(
            kind_filter("ModelDeployment"), stream=EVENTS_STREAM, ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL
        )

    async def batches(sub: Any, handle: Any) -> None:
        got = 0
        while got < consume:
            batch = [await sub.next_msg(timeout=5)]
            while len(batch) < 64 and sub.pending_msgs > 0 and got + len(batch) < consume:
                batch.append(await sub.next_msg(timeout=5))
            got += len(batch)
            await handle(batch)

    async def raw_consume() -> None:
        sub = await ordered()

        async def count(batch: list[Any]) -> None:
            return None

        await batches(sub, count)
        await sub.unsubscribe()

    rows["consume (ordered consumer)"] = [0.0, await rate(consume, raw_consume)]
    consumer = Folding()
    loop_runner = Runner(consumer, nc, RunnerSettings())
    feed = loop_runner.feeds[0]

    async def ours_consume() -> None:
        # the runner's own feed (runtime/feed.py) from the stream's start: read, decode, fold, reconcile, in batches
        stopping = asyncio.Event()

        async def handle(feed: Feed, batch: list[Delivery]) -> None:
            await loop_runner.handle_batch(feed, batch)
            if consumer.handled >= consume:
                stopping.set()

        await follow(nc, feed, since=lambda: 0, handle=handle, stopping=stopping, batch=64, heartbeat=2.0, name="bench")

    rows["consume (ordered consumer)"][0] = await rate(consume, ours_consume)

    # --- decisions recorded per second through the service loop's Effects (OCC + dedup id)
    decide = 2000
    recorder = Folding()
    recorder.name = "bench-decide"
    decide_runner = Runner(recorder, nc)
    keys = [Key("ModelDeployment", "bench", f"m{i}") for i in range(decide)]

    async def record() -> None:
        await asyncio.gather(
            *(Effects(decide_runner, None).emit(k, StatusReported(generation=1, status=StatusSlice(phase="Running"))) for k in keys)
        )

    async def raw_record() -> None:
        await asyncio.gather(*(js.publish(k.subject("raw-decide"), data, stream=EVENTS_STREAM) for k in keys))

    rows["decisions, all in flight"] = (await rate(decide, record), await rate(decide, raw_record))

    await nc.close()
    server.stop()
    table = {
        name: {"ours_per_s": round(ours), "raw_per_s": round(raw), "ratio": round(ours / raw, 2)} for name, (ours, raw) in rows.items()
    }
    result: dict[str, Any] = {
        "events": md_events,
        "rebuild_seconds": round(rebuild_seconds, 2),
        "resources_rebuilt": resources,
        "rows": table,
    }
    print(f"{'measure':<32} {'ours/s':>10} {'raw nats-py/s':>14} {'ratio':>7}")
    for name, row in table.items():
        print(f"{name:<32} {row['ours_per_s']:>10,} {row['raw_per_s']:>14,} {row['ratio']:>7.2f}")
    print(f"rebuild: {result['rebuild_seconds']} s for {md_events:,} events ({resources:,} resources)")
    return result


def _round(tree: Path, events: int) -> dict[str, Any]:
    """One whole run of the benchmark as `tree` has it, in a process of its own: its JSON."""
    with tempfile.TemporaryDirectory(prefix="jetway-bench-round-") as folder:
        out = Path(folder) / "round.json"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        command = [sys.executable, "-m", "bench.eventstore", "--events", str(events), "--json", str(out)]
        subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
        return dict(json.loads(out.read_text()))


def compare(ref: str, events: int, rounds: int) -> dict[str, Any]:
    """This tree against `ref`'s, alternating round by round (the module's docstring)."""
    here = Path(__file__).resolve().parent.parent
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=here, check=True, capture_output=True, text=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="jetway-baseline-"))
    old = folder / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), commit], cwd=here, check=True, capture_output=True)
    results: dict[str, list[dict[str, Any]]] = {"new": [], "old": []}
    try:
        for n in range(rounds):
            order = [("new", here), ("old", old)] if n % 2 == 0 else [("old", old), ("new", here)]
            for build, tree in order:
                print(f"round {n + 1}/{rounds}: {build}", file=sys.stderr, flush=True)
                results[build].append(_round(tree, events))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=here, check=False, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=here, check=False, capture_output=True)
    names = list(results["new"][0]["rows"])
    table: dict[str, Any] = {}
    for name in names:
        row: dict[str, Any] = {}
        for build in ("old", "new"):
            ratios = [r["rows"][name]["ratio"] for r in results[build] if name in r["rows"]]
            row[build] = {"median_ratio": round(statistics.median(ratios), 2) if ratios else None, "ratios": ratios}
            row[build]["raw_per_s"] = [r["rows"][name]["raw_per_s"] for r in results[build] if name in r["rows"]]
            row[build]["ours_per_s"] = [r["rows"][name]["ours_per_s"] for r in results[build] if name in r["rows"]]
        table[name] = row
    print(f"baseline {ref} ({commit}), {rounds} rounds each, {events:,} events, alternating")
    print(f"{'measure':<32} {'old ratio':>10} {'new ratio':>10}   new ratios by round")
    for name, row in table.items():
        old_ratio, new_ratio = row["old"]["median_ratio"], row["new"]["median_ratio"]
        shown = ", ".join(f"{r:.2f}" for r in row["new"]["ratios"])
        print(f"{name:<32} {old_ratio if old_ratio is not None else '-':>10} {new_ratio:>10}   {shown}")
    return {"events": events, "baseline": {"ref": ref, "commit": commit}, "rounds": rounds, "rows": table}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--baseline-ref", default=None, help="a git ref whose tree runs alternately with this one")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each build, with --baseline-ref")
    options = parser.parse_args()
    if options.baseline_ref:
        outcome = compare(options.baseline_ref, options.events, options.rounds)
    else:
        outcome = asyncio.run(main(options.events))
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
