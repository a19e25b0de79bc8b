"""`jetway replay routing`: the recorded routing records through another policy (services/router/replay.py),
beside what really happened. Reads the JETWAY_ROUTING stream; changes nothing."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from datetime import datetime
from typing import TextIO

import msgspec
from nats.js.errors import NotFoundError

from cli.config import NotRunning, nats_url
from cli.history import parse_point
from contracts.routing import ROUTING_PREFIX, ROUTING_STREAM, RoutingRecord, decode_batch
from runtime import settings as tree
from runtime.bus import connect
from runtime.reader import OrderedReader
from services.router import policy, replay
from services.router.main import routing_of

DESCRIPTION = """\
Replay the routed requests recorded in the stream JETWAY_ROUTING through a routing policy, against a model of
each member's prefix cache and load, and print what it would have done beside what really happened: the
prefix-cache hit rate, each member's share of the requests, and how many requests would have gone elsewhere.
The router's other settings (weights, load bound, block size) are the JETWAY_ROUTER_* variables in force here;
a flag below wins. Nothing is written."""


def parser(prog: str = "jetway replay routing") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    p.add_argument("--policy", required=True, choices=policy.POLICIES, help="the policy to replay the traffic through")
    p.add_argument("--since", metavar="SEQ|TIME", help="from this stream sequence, RFC 3339 time, or age such as 15m (default: all)")
    p.add_argument("--until", metavar="SEQ|TIME", help="to this sequence, time or age (default: now)")
    p.add_argument("--model", help="only the requests for this model (default: every model, each replayed on its own)")
    p.add_argument("--members", type=_positive, metavar="N", help="N members always ready, instead of those each request had")
    p.add_argument(
        "--cache-blocks",
        type=_positive,
        default=replay.DEFAULT_CACHE_BLOCKS,
        metavar="N",
        help=f"each member's prefix cache, in blocks (default {replay.DEFAULT_CACHE_BLOCKS})",
    )
    p.add_argument("--load-bound", type=float, help="the prefix-cache policy's load bound (JETWAY_ROUTER_LOAD_BOUND)")
    p.add_argument("--prefix-weight", type=float, help="JETWAY_ROUTER_PREFIX_WEIGHT")
    p.add_argument("--queue-weight", type=float, help="JETWAY_ROUTER_QUEUE_WEIGHT")
    p.add_argument("--data-dir", help="where `jetway up` keeps its data (default: $JETWAY_DATA_DIR or a per-user folder)")
    p.add_argument("--nats", metavar="URL", help="read this NATS server instead of the one in jetway.json")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {value})")
    return value


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        settings = _settings(args)
        since, until = (parse_point(args.since) if args.since else (None, None)), (parse_point(args.until) if args.until else (None, None))
        url = nats_url(args.nats, args.data_dir)
    except (ValueError, NotRunning) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 5
    try:
        records = asyncio.run(read(url, since, until))
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
    return report(records, settings, args.model, args.members, args.cache_blocks, args.output, sys.stdout)


def _settings(args: argparse.Namespace) -> policy.Settings:
    base = routing_of(tree.read().router)
    given = {"policy": args.policy, "load_bound": args.load_bound, "prefix_weight": args.prefix_weight, "queue_weight": args.queue_weight}
    return dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})


Point = tuple[int | None, datetime | None]


async def read(url: str, since: Point, until: Point) -> list[RoutingRecord]:
    """Every record stored between the two points (a batch's records all count at its stored time)."""
    nc = await connect(url, name="jetway-replay-routing")
    records: list[RoutingRecord] = []
    try:
        try:
            info = await nc.jetstream(timeout=10).stream_info(ROUTING_STREAM)
        except NotFoundError:
            return records  # nothing was ever recorded
        end = int(info.state.last_seq)
        until_seq, until_time = until
        if until_seq is not None:
            end = min(end, until_seq)
        if end == 0:
            return records
        until_ns = None if until_time is None else int(until_time.timestamp() * 1_000_000_000)
        reader = OrderedReader(nc, ROUTING_STREAM, [f"{ROUTING_PREFIX}.>"], start_seq=since[0], start_time=since[1])
        try:
            async with asyncio.timeout(300):
                if await reader.start() == 0:
                    return records
                async for batch in reader.to_end():  # what it counted can age out of the stream meanwhile
                    for message in batch:
                        if message.seq > end or (until_ns is not None and message.stored_ns > until_ns):
                            return records
                        try:
                            records += decode_batch(message.data)
                        except msgspec.DecodeError:
                            print(f"# an unreadable batch at sequence {message.seq}: skipped", file=sys.stderr)
                        if message.seq >= end or message.pending == 0:
                            return records
                return records
        finally:
            await reader.close()
    finally:
        await nc.close()


def report(
    records: list[RoutingRecord],
    settings: policy.Settings,
    model: str | None,
    members: int | None,
    cache_blocks: int,
    output: str,
    out: TextIO,
) -> int:
    models = sorted({r.model for r in records if model is None or r.model == model})
    results = []
    for name in models:
        kept = replay.routed(records, name)
        if not kept:
            continue
        recorded = replay.replay(kept, None, members=None, cache_blocks=cache_blocks)
        replayed = replay.replay(kept, settings, members=members, cache_blocks=cache_blocks)
        results.append((name, kept, recorded, replayed))
    if output == "json":
        print(json.dumps([_json(name, kept, recorded, replayed) for name, kept, recorded, replayed in results], indent=2), file=out)
        return 0
    if not results:
        print(f"no routed requests recorded{f' for {model!r}' if model else ''} (stream {ROUTING_STREAM}; JETWAY_ROUTER_RECORDS)", file=out)
        return 0
    for name, kept, recorded, replayed in results:
        policies = sorted({r.policy for r in kept})
        span = kept[-1].at - kept[0].at
        print(f"model {name}: {len(kept)} requests over {span:.0f} s, routed by {', '.join(policies)}", file=out)
        print(f"  {'':28} {'recorded':>12} {settings.policy:>20}", file=out)
        print(f"  {'prefix-cache hit rate':28} {recorded.hit_rate:>12.1%} {replayed.hit_rate:>20.1%}", file=out)
        print(f"  {'busiest member / mean':28} {recorded.spread:>12.2f} {replayed.spread:>20.2f}", file=out)
        for member in sorted(set(recorded.per_member) | set(replayed.per_member)):
            mine, theirs = recorded.per_member.get(member, 0), replayed.per_member.get(member, 0)
            print(f"  {'requests to ' + member:28} {mine:>12} {theirs:>20}", file=out)
        changed = replayed.changed(recorded)
        print(f"  {changed} of {len(kept)} requests ({changed / len(kept):.0%}) would have gone to another member", file=out)
        print(f"  why, replayed: {', '.join(f'{reason} {count}' for reason, count in sorted(replayed.reasons.items()))}", file=out)
    return 0


def _json(name: str, kept: list[RoutingRecord], recorded: replay.Outcome, replayed: replay.Outcome) -> dict[str, object]:
    def shown(outcome: replay.Outcome) -> dict[str, object]:
        return {
            "policy": outcome.policy,
            "hit_rate": round(outcome.hit_rate, 4),
            "spread": round(outcome.spread, 3),
            "per_member": outcome.per_member,
            "reasons": outcome.reasons,
        }

    return {
        "model": name,
        "requests": len(kept),
        "recorded": shown(recorded),
        "replayed": shown(replayed),
        "changed": replayed.changed(recorded),
    }
