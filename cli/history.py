"""`jetway events` and `jetway replay`: the event stream, read by people."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import msgspec
import yaml

from cli.refs import parse_kind, parse_ref
from contracts.events import Envelope, summary
from contracts.subjects import ALL_EVENTS, Key, kind_filter
from runtime.bus import connect, ensure_streams
from runtime.eventstore import EventStore, Item, Undecodable
from runtime.resources import Resources

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


async def events(
    url: str, ref: str | None, namespace: str | None, since: str | None, follow: bool, output: str, out: TextIO = sys.stdout
) -> int:
    subject, _ = target_filter(ref, namespace)
    since_seq, since_time = parse_point(since) if since else (None, None)
    nc = await connect(url, name="jetway-cli", connect_timeout=5)
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
        if not items and output != "json":
            print("(no events)", file=sys.stderr)
        return 0
    finally:
        await nc.close()


async def replay(url: str, ref: str | None, namespace: str | None, until: str | None, output: str, out: TextIO = sys.stdout) -> int:
    """Fold the stream up to a point and print what Jetway believed then."""
    until_seq, until_time = parse_point(until) if until else (None, None)
    nc = await connect(url, name="jetway-cli", connect_timeout=5)
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


def run(coro: Any) -> int:
    try:
        return int(asyncio.run(coro))
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
