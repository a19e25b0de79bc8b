"""`jetway`: the entry point. Parses arguments and hands each subcommand to its module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from runtime import settings

Handler = Callable[[argparse.Namespace], int]


def _validate(args: argparse.Namespace) -> int:
    from cli import validate

    return validate.run(args.filename)


def _generate(args: argparse.Namespace) -> int:
    from cli import generate

    if args.check:
        stale = generate.stale()
        for path in stale:
            print(f"out of date: {path.relative_to(generate.ROOT)}", file=sys.stderr)
        return 1 if stale else 0
    return generate.run()


def _render(args: argparse.Namespace) -> int:
    from cli import render

    if args.filename and args.ref:
        print("error: give -f FILE (offline) or md/NAME (from the running Jetway), not both", file=sys.stderr)
        return 2
    if args.filename:
        return render.run(args.filename, args.providers)
    if not args.ref:
        print("error: render needs -f FILE or md/NAME", file=sys.stderr)
        return 2
    from cli import commands

    return commands.render_recorded(args)


def _nats_users(args: argparse.Namespace) -> int:
    from cli import natsusers

    return natsusers.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jetway",
        description="Jetway: an event-sourced control plane for LLM inference and agents (AI Runway CRDs) "
        "with an OpenAI-compatible router.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("validate", help="check manifests offline (exit 0 valid, 1 problems, 2 unreadable)")
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="a YAML or JSON file, or - for stdin; repeat for more files",
    )
    p.set_defaults(handler=_validate)

    p = sub.add_parser("generate", help="regenerate contracts/schemas, deploy/crds and deploy/base/nats-auth.conf from the contracts")
    p.add_argument("--check", action="store_true", help="only report files that are out of date (exit 1)")
    p.set_defaults(handler=_generate)

    p = sub.add_parser("nats-users", help="print the Secret of each service's NATS password, for a cluster: | kubectl create -f -")
    p.add_argument("action", choices=["secret"])
    p.add_argument("--keep", metavar="FILE", help="keep the passwords in FILE (made on first use), for a dev stack")
    p.add_argument("-n", "--namespace", default="jetway-system")
    p.set_defaults(handler=_nats_users)

    p = sub.add_parser("render", help="the Kubernetes objects Jetway would create: offline from -f, or recorded for md/NAME")
    p.add_argument("ref", nargs="?", metavar="md/NAME", help="a deployment of the running Jetway (its recorded objects)")
    p.add_argument("-f", "--filename", action="append", metavar="FILE", help="manifests to render offline (no NATS needed)")
    p.add_argument(
        "--providers",
        action="append",
        default=[],
        metavar="FILE",
        help="InferenceProviderConfigs to select among (default: the built-in five)",
    )
    p.add_argument("-n", "--namespace")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_render)

    from cli import commands

    commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:2] == ["replay", "routing"]:  # its own options (and --help): routing records, not the event log
        from cli import routing

        return routing.main(given[2:])
    parser = build_parser()
    args = parser.parse_args(given)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # never a traceback for a user, unless they ask for one
        if debugging():
            raise
        print(
            f"jetway {args.command}: unexpected error: {type(exc).__name__}: {exc} (set JETWAY_DEBUG=1 for the traceback)", file=sys.stderr
        )
        return 1


def debugging() -> bool:
    """JETWAY_DEBUG: the traceback of an unexpected error. A bad value says nothing more: this is already an error's path."""
    try:
        return settings.read().cli.debug
    except ValueError:
        return False


if __name__ == "__main__":
    sys.exit(main())
