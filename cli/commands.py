"""Subcommands that talk to a running Jetway: its event stream, its apply API, its router."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli.config import NotRunning, nats_url
from cli.refs import BadReference


def _stream_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="where `jetway up` keeps its data (default: $JETWAY_DATA_DIR or a per-user folder)")
    p.add_argument("--nats", metavar="URL", help="read this NATS server instead of the one in jetway.json")
    p.add_argument("-n", "--namespace", help="namespace for KIND/NAME of a namespaced kind (default: default)")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")


def _events(args: argparse.Namespace) -> int:
    from cli import history

    try:
        url = nats_url(args.nats, args.data_dir)
        return history.run(history.events(url, args.ref, args.namespace, args.since, args.follow, args.output))
    except (NotRunning, BadReference, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, BadReference | ValueError) else 5


def _replay(args: argparse.Namespace) -> int:
    from cli import history

    try:
        url = nats_url(args.nats, args.data_dir)
        return history.run(history.replay(url, args.ref, args.namespace, args.until, args.output))
    except (NotRunning, BadReference, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, BadReference | ValueError) else 5


def register(sub: Any) -> None:  # argparse's _SubParsersAction is private
    p = sub.add_parser("events", help="print the event history of everything, a kind, or one resource")
    p.add_argument("ref", nargs="?", metavar="KIND[/NAME]", help="e.g. modeldeployment/qwen, ipm/echo, or a kind alone")
    p.add_argument("--since", metavar="SEQ|TIME", help="a sequence, an RFC 3339 time, or an age such as 15m")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events as they are stored")
    _stream_options(p)
    p.set_defaults(handler=_events)

    p = sub.add_parser("replay", help="rebuild state from the stream as of a point and print it")
    p.add_argument("ref", nargs="?", metavar="KIND[/NAME]")
    p.add_argument("--until", metavar="SEQ|TIME", help="stop at this sequence, RFC 3339 time, or age (default: now)")
    _stream_options(p)
    p.set_defaults(handler=_replay)
