"""GET /v1/console/routing?model=M[&limit=N]: a model's recent routing decisions, with their reasons.

The router writes one record per routed request (contracts/routing.py) into the stream JETWAY_ROUTING, as JSON
batches, one message per replica per quarter second. The console reads the stream's tail, never the whole stream:
a window of the last `FIRST_WINDOW` batches, then the window before it, twice as wide each time, until `limit`
records of the model are found, the stream's start is reached, or `MAX_BATCHES` batches (or `MAX_BYTES` bytes) are
read. Each window is an ordered consumer (runtime/reader.py) started at the window's first sequence and closed at
its last: the console's NATS user reads the stream with no right beyond the ordered consumer's
(contracts/natsauth.py `routing_subjects`).

The answer is the `limit` records last written for the model (a record is written when its request ends), newest
arrival first: when, which member, the members that could take it, the policy, the reason and score, the chosen
member's share of the prompt, the status, the time to the first token and to the end, the tokens, the client
key's *name* (records never hold a key) and the replica. The prompt's block hashes and the session's hash stay out.

The shaping is plain data (`query`, `windows`, `newest`, `answer`), tested without NATS (tests/console).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from contracts.routing import ROUTING_PREFIX, ROUTING_STREAM, RoutingRecord, decode_batch, mentions
from runtime.reader import OrderedReader

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_MODEL = 256  # characters of a model's name: longer is no model the router serves
FIRST_WINDOW = 16  # batches in the first window read back from the end (4 s of one replica's records)
MAX_BATCHES = 1024  # batches read for one answer at most (about 4 minutes of one replica's records)
MAX_BYTES = 16 * 1024 * 1024  # bytes of batches read for one answer at most
READ_TIMEOUT = 10.0  # seconds one answer may spend reading
CONCURRENT_READS = 2  # answers reading the stream at once (several tabs polling share the rest by waiting)

Found = tuple[int, int, RoutingRecord]  # (the batch's stream sequence, the record's place in its batch, the record)


class Unreadable(Exception):
    """The stream could not be read in time (NATS slow or away)."""


def query(model: str | None, limit: str | None) -> tuple[str, int]:
    """`?model=` and `?limit=`; ValueError naming the parameter (its text before the colon) when either is wrong."""
    name = (model or "").strip()
    if not name:
        raise ValueError("model: required, the model's name as clients ask the router for it (?model=NAME)")
    if len(name) > MAX_MODEL:
        raise ValueError(f"model: at most {MAX_MODEL} characters, got {len(name)}")
    if limit is None or limit == "":
        return name, DEFAULT_LIMIT
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
        raise ValueError(f"limit: expected a whole number from 1 to {MAX_LIMIT}, got {limit[:40]!r}")
    return name, int(limit)


def windows(first_seq: int, last_seq: int, *, first: int = FIRST_WINDOW, most: int = MAX_BATCHES) -> Iterator[tuple[int, int]]:
    """The sequences to read, newest window first: (start, end) inclusive, each twice as wide as the one after it,
    down to the stream's first sequence and `most` sequences in all."""
    end, width, left = last_seq, max(1, first), most
    while end >= max(first_seq, 1) and left > 0:
        start = max(first_seq, 1, end - min(width, left) + 1)
        yield start, end
        left -= end - start + 1
        end, width = start - 1, width * 2


def of_model(seq: int, payload: bytes, model: str) -> list[Found]:
    """The records of `model` in one stored batch; none for a payload that is no batch."""
    if not mentions(payload, model):  # most batches are skipped without decoding them
        return []
    try:
        records = decode_batch(payload)
    except msgspec.DecodeError:
        return []
    return [(seq, i, r) for i, r in enumerate(records) if r.model == model]


def newest(found: Iterable[Found], limit: int) -> list[Found]:
    """The `limit` records written last, newest arrival first (then the later written first)."""
    written = sorted(found, key=lambda f: (f[0], f[1]), reverse=True)[:limit]
    return sorted(written, key=lambda f: (f[2].at, f[0], f[1]), reverse=True)


def decision(seq: int, record: RoutingRecord) -> dict[str, Any]:
    """One decision as the route answers it: what the view shows, nothing more (no block hashes, no session hash)."""
    return {
        "seq": seq,
        "at": record.at,
        "time": datetime.fromtimestamp(record.at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "member": record.member,
        "candidates": list(record.candidates),
        "policy": record.policy,
        "reason": record.reason,
        "score": record.score,
        "prefix": record.prefix,
        "status": record.status,
        "ttft": record.ttft,
        "elapsed": record.elapsed,
        "tokens_in": record.tokens_in,
        "tokens_out": record.tokens_out,
        "key": record.key,
        "router": record.router,
        "placer": record.placer,
    }


@dataclass
class Scan:
    """What one answer read of the stream."""

    exists: bool = True  # False: nothing was ever recorded (no stream)
    first_seq: int = 0  # the stream's first and last sequences when asked
    last_seq: int = 0
    oldest_seq: int = 0  # the oldest batch read (0: none)
    batches: int = 0
    records: int = 0  # records of the model found
    bytes: int = 0
    whole: bool = False  # every batch the stream holds was read: there is no older decision


def answer(model: str, limit: int, found: Iterable[Found], scan: Scan) -> dict[str, Any]:
    """The route's body."""
    shown = newest(found, limit)
    return {
        "model": model,
        "limit": limit,
        "stream": ROUTING_STREAM,
        "recorded": scan.exists,
        "decisions": [decision(seq, record) for seq, _, record in shown],
        "scanned": {
            "batches": scan.batches,
            "bytes": scan.bytes,
            "from_seq": scan.oldest_seq or None,
            "to_seq": scan.last_seq or None,
            "whole_stream": scan.whole,
        },
        # fewer than asked and older batches left unread: the bound stopped the search, not the stream's start
        "bounded": len(shown) < limit and not scan.whole,
    }


async def read_window(nc: Client, start: int, end: int) -> list[tuple[int, bytes]]:
    """The batches stored from `start` to `end` (inclusive), in order: an ordered consumer from `start`, closed at `end`."""
    reader = OrderedReader(nc, ROUTING_STREAM, [f"{ROUTING_PREFIX}.>"], start_seq=start)
    got: list[tuple[int, bytes]] = []
    try:
        if await reader.start() == 0:  # from `start` to the stream's end, when it was made
            return got
        async for batch in reader.to_end():  # what it counted can age out of the stream meanwhile
            for message in batch:
                if message.seq > end:
                    return got
                got.append((message.seq, message.data))
                if message.seq == end or message.pending == 0:
                    return got
        return got
    finally:
        await reader.close()


async def recent(
    nc: Client,
    model: str,
    limit: int,
    *,
    reads: asyncio.Semaphore | None = None,
    timeout: float = READ_TIMEOUT,
    first: int = FIRST_WINDOW,
    most: int = MAX_BATCHES,
    most_bytes: int = MAX_BYTES,
) -> dict[str, Any]:
    """The route's body for `model`: its `limit` latest decisions from the stream's tail (the module's docstring).
    `reads`: the app's bound on answers reading at once (`CONCURRENT_READS`); the wait for it counts in `timeout`."""
    found: list[Found] = []
    scan = Scan()
    try:
        async with asyncio.timeout(timeout), reads or asyncio.Semaphore():
            try:
                info = await nc.jetstream(timeout=timeout).stream_info(ROUTING_STREAM)
            except NotFoundError:
                scan.exists = False
                scan.whole = True
                return answer(model, limit, found, scan)
            scan.first_seq, scan.last_seq = int(info.state.first_seq), int(info.state.last_seq)
            scan.whole = scan.last_seq == 0 or scan.last_seq < scan.first_seq
            for start, end in windows(scan.first_seq, scan.last_seq, first=first, most=most):
                for seq, payload in await read_window(nc, start, end):
                    scan.batches += 1
                    scan.bytes += len(payload)
                    found += of_model(seq, payload, model)
                scan.oldest_seq = start
                scan.whole = start <= scan.first_seq
                if len(found) >= limit or scan.bytes >= most_bytes:
                    break
    except TimeoutError as exc:
        raise Unreadable(f"the routing records were not read within {timeout:g} s") from exc
    except (nats.errors.Error, ConnectionError, OSError) as exc:  # NATS away, or it refused the consumer
        raise Unreadable(f"the routing records could not be read: {type(exc).__name__}") from exc
    scan.records = len(found)
    return answer(model, limit, found, scan)
