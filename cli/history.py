"""`jetway events` and `jetway replay`: the event stream, read by people."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

import msgspec
import yaml

from cli.refs import parse_kind, parse_ref
from contracts.cluster import DISCOVERY
from contracts.events import Envelope, summary
from contracts.subjects import ALL_EVENTS, OBSERVED, WATCHER, Key, kind_filter, matcher
from runtime import settings
from runtime.bus import Credentials, connect, ensure_streams
from runtime.eventstore import EventStore, Item, Undecodable
from runtime.resources import Resources

if TYPE_CHECKING:
    from nats.aio.client import Client

    from runtime.service import Service

_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_point(text: str) -> tuple[int | None, datetime | None]:
    """A sequence (`1200`), a time (RFC 3339, `2026-12-02T10:00:00Z`) or an age (`15m`, `2h`, `1d`)."""
    if text.isdigit():
        return int(text), None
    match = _DURATION.match(text)
    if match:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return None, datetime.now(UTC) - timedelta(**{unit: int(match.group(1))})
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither a sequence number, an RFC 3339 time nor an age like 15m") from None
    return None, moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def target_filter(ref: str | None, namespace: str | None) -> tuple[str, Key | None]:
    if not ref:
        return ALL_EVENTS, None
    if "/" not in ref:  # a kind alone: every resource of it, every facet
        return kind_filter(parse_kind(ref).kind, "*"), None
    key = parse_ref(ref, namespace)
    return key.history_filter(), key


def _when(envelope: Envelope) -> str:
    moment = envelope.stored_at or envelope.time
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def line(item: Item) -> str:
    if isinstance(item, Undecodable):
        return f"{item.seq:>7}  {'-':<23}  {'(unreadable)':<24}  {item.subject}  {item.reason}"
    where = str(item.key)
    return f"{item.seq:>7}  {_when(item):<23}  {item.type:<24}  {where} [{item.facet} by {item.producer}]  {summary(item.event)}"


def as_json(item: Item) -> str:
    if isinstance(item, Undecodable):
        return json.dumps({"seq": item.seq, "subject": item.subject, "unreadable": item.reason})
    body: dict[str, Any] = msgspec.to_builtins(item)
    body["type"] = item.type
    body["resource"] = str(item.key)
    return json.dumps(body, default=str)


EXPECTED_HEADER = "Nats-Expected-Last-Subject-Sequence"


def trimmed_notices(items: list[Item], expected: dict[str, int], first_seq: int, per_facet: int) -> list[str]:
    """Where the history shown does not start at the beginning: the stream's first stored sequence is past 1
    (older events were removed), or a facet's first stored event was appended after an earlier one of that
    facet (its expected last sequence, a NATS header every service's append carries, is not 0)."""
    notices = []
    if first_seq > 1:
        notices.append(f"# history trimmed: the stream no longer holds events before sequence {first_seq}")
    kept = f"the stream keeps the latest {per_facet} events of each facet" if per_facet > 0 else "removed by a limit or a purge"
    seen: set[str] = set()
    for item in items:
        if item.subject in seen:
            continue
        seen.add(item.subject)
        before = expected.get(item.subject, 0)
        if before > 0:
            where = item.subject if isinstance(item, Undecodable) else f"{item.key} [{item.facet}]"
            notices.append(f"# history trimmed: {where} had events before sequence {item.seq} that are no longer stored ({kept})")
    return notices


async def _connect(url: str) -> Client:
    """The event history's NATS: `jetway up`'s open server, or a cluster's as a reading user
    (JETWAY_NATS_USER and JETWAY_NATS_PASSWORD, as the services take them; docs/cluster.md, "Replay")."""
    return await connect(url, name="jetway-cli", connect_timeout=5, credentials=Credentials.of(settings.read().nats))


async def events(
    url: str, ref: str | None, namespace: str | None, since: str | None, follow: bool, output: str, out: TextIO = sys.stdout
) -> int:
    subject, _ = target_filter(ref, namespace)
    since_seq, since_time = parse_point(since) if since else (None, None)
    nc = await _connect(url)
    try:
        store = EventStore(nc, producer="cli")
        await ensure_streams(store.js, update=False)  # a reader never changes the services' retention
        render = as_json if output == "json" else line
        if output != "json":
            print(f"{'SEQ':>7}  {'TIME':<23}  {'TYPE':<24}  RESOURCE [FACET by PRODUCER]  SUMMARY", file=out)
        if follow:
            if since_time is not None:
                first = await store.read(subject, since_time=since_time, until_seq=None)
                since_seq = first[0].seq if first else (await store.stream_last_seq()) + 1
            async for item in store.follow(subject, since_seq=since_seq):
                print(render(item), file=out, flush=True)
            return 0
        expected: dict[str, int] = {}

        def first_expected(seq: int, subject: str, headers: Mapping[str, str]) -> None:
            if subject not in expected:
                value = headers.get(EXPECTED_HEADER, "0")
                expected[subject] = int(value) if value.isdigit() else 0

        items: list[Item] = []
        await store.scan(subject, items.append, since_seq=since_seq, since_time=since_time, on_headers=first_expected)
        if since_seq is None and since_time is None:  # from the start: say where the start is not the beginning
            info = await store.js.stream_info(store.stream)
            notes = trimmed_notices(items, expected, int(info.state.first_seq or 0), int(info.config.max_msgs_per_subject or -1))
            for note in notes:
                print(note, file=sys.stderr if output == "json" else out)
        for item in items:
            print(render(item), file=out)
        if not items and ref and "/" in ref and since_seq is None and since_time is None:
            # one resource named, and nothing ever recorded for it: a typo, most likely; say so, as `get` does
            print(f"error: no events for {ref}: no such resource (or its history was purged after its deletion)", file=sys.stderr)
            return 1
        if not items and output != "json":
            print("(no events)", file=sys.stderr)
        return 0
    finally:
        await nc.close()


async def replay(url: str, ref: str | None, namespace: str | None, until: str | None, output: str, out: TextIO = sys.stdout) -> int:
    """Fold the stream up to a point and print what Jetway believed then."""
    until_seq, until_time = parse_point(until) if until else (None, None)
    nc = await _connect(url)
    try:
        store = EventStore(nc, producer="cli")
        await ensure_streams(store.js, update=False)
        resources = Resources()
        unreadable = []

        def fold(item: Item) -> None:
            if isinstance(item, Envelope):
                resources.fold(item)
            else:
                unreadable.append(item)

        subject, key = target_filter(ref, namespace)
        await store.scan(subject, fold, until_seq=until_seq, until_time=until_time)
        when = resources.last_time.astimezone(UTC).isoformat().replace("+00:00", "Z") if resources.last_time else "-"
        print(f"# state as of sequence {resources.last_seq} ({when})", file=out)
        for item in unreadable:
            print(f"# unreadable event at {item.seq} ({item.subject}): {item.reason}", file=out)
        states = [resources.items[key]] if key and key in resources.items else list(resources.items.values()) if not key else []
        if key and not states:
            print(f"# {key} did not exist at that point", file=out)
            return 1
        manifests = [s.manifest() for s in sorted(states, key=lambda s: (s.key.kind, s.key.namespace, s.key.name))]
        if output == "json":
            print(json.dumps(manifests, indent=2, default=str), file=out)
        else:
            print(yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False), end="", file=out)
        return 0
    finally:
        await nc.close()


# --- jetway replay --rerun SERVICE ------------------------------------------------------------

CANNOT_RERUN = {
    "watcher": "its inputs are requests to the apply API and what the cluster shows, not events in the stream",
    "router": "it decides a member's health from live probes of the member, which the stream does not hold",
    "gateway": "it reads the cluster (the InferencePool it finds there) while deciding",
}


def _rerunnable(cluster: bool) -> dict[str, Callable[[], Service]]:
    """Each service as its one-service process builds it, writing nothing (runtime/rerun.py DryWriter)."""
    from runtime.rerun import DryWriter
    from services.binding.handlers import BindingService
    from services.selector.handlers import SelectorService
    from services.storage.handlers import StorageService
    from services.workload import render
    from services.workload.handlers import WorkloadService

    return {
        "selector": SelectorService,
        "storage": lambda: StorageService(DryWriter(cluster)),
        # image resolution off: a registry is not asked (a decision that needed a new lookup shows as a difference)
        "workload": lambda: WorkloadService(DryWriter(cluster), settings=render.settings(os.environ)),
        "binding": lambda: BindingService(DryWriter(cluster)),
    }


RERUNNABLE = ("selector", "storage", "workload", "binding")


def rerun_problem(name: str) -> str | None:
    """Why SERVICE cannot be rerun, or None."""
    if name in RERUNNABLE:
        return None
    if name in CANNOT_RERUN:
        return f"{name} cannot be rerun offline: {CANNOT_RERUN[name]} (these can: {', '.join(RERUNNABLE)})"
    return f"unknown service {name!r} (these can be rerun: {', '.join(RERUNNABLE)}; not offline: {', '.join(CANNOT_RERUN)})"


def _cluster_marker(subject: str) -> bool:
    """Events only a watcher in Kubernetes mode records: the APIs the cluster serves, what it shows of objects."""
    return subject == DISCOVERY.subject(WATCHER) or subject.endswith(f".{OBSERVED}")


def _resources(ref: str | None, namespace: str | None) -> Callable[[Key], bool] | None:
    """Which resources' decisions to compare: every one, those of a kind, or one."""
    if not ref:
        return None
    if "/" not in ref:
        kind = parse_kind(ref).kind
        return lambda key: key.kind == kind
    target = parse_ref(ref, namespace)
    return lambda key: key == target


async def rerun(
    url: str, name: str, ref: str | None, namespace: str | None, until: str | None, output: str, out: TextIO = sys.stdout
) -> int:
    """Feed the recorded inputs to the installed SERVICE; print where its decisions differ. Exit 1 when any does."""
    from runtime import rerun as engine

    problem = rerun_problem(name)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    until_seq, until_time = parse_point(until) if until else (None, None)
    only = _resources(ref, namespace)
    nc = await _connect(url)
    try:
        store = EventStore(nc, producer="cli")
        await ensure_streams(store.js, update=False)
        wanted = matcher(engine.filters_of(_rerunnable(False)[name]()))  # what its runner reads
        items: list[Envelope] = []
        unreadable: list[Undecodable] = []
        cluster = False

        def keep(item: Item) -> None:
            nonlocal cluster
            if _cluster_marker(item.subject):
                cluster = True
            if isinstance(item, Undecodable):
                unreadable.append(item)
            elif wanted.match(item.subject):
                items.append(item)

        def select(subject: str) -> bool:
            return wanted.match(subject) is not None or _cluster_marker(subject)

        last = await store.scan(ALL_EVENTS, keep, until_seq=until_seq, until_time=until_time, select=select)
        service = _rerunnable(cluster)[name]()
        outcome = await engine.rerun(service, items, only=only)
    finally:
        await nc.close()
    mode = "cluster" if cluster else "standalone"
    differing = outcome.differing
    summary_line = f"# {len(outcome.comparisons)} decisions compared, {len(differing)} differ"
    if output == "json":
        body = {
            "service": name,
            "until_seq": last,
            "mode": mode,
            "compared": len(outcome.comparisons),
            "differ": [engine.as_json(c) for c in differing],
        }
        print(json.dumps(body, indent=2, default=str), file=out)
        return 1 if differing else 0
    where = "a cluster's stream" if cluster else "jetway up's stream"
    print(
        f"# the {name} service as installed now, given the {len(items)} events it had seen in {where} (up to sequence {last}),"
        " decides again; each decision is compared with the one it recorded then",
        file=out,
    )
    for item in unreadable:
        print(f"# unreadable event at {item.seq} ({item.subject}): {item.reason}", file=out)
    if outcome.fold_failures:
        print(f"# {outcome.fold_failures} events could not be folded (the service dead-letters those): skipped", file=out)
    for comparison in differing:
        print("\n".join(engine.render(comparison, name)), file=out)
    print(summary_line, file=out)
    return 1 if differing else 0


def run(coro: Any) -> int:
    try:
        return int(asyncio.run(coro))
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
