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
        if args.rerun:
            problem = history.rerun_problem(args.rerun)
            if problem is not None:
                print(f"error: {problem}", file=sys.stderr)
                return 2
            url = nats_url(args.nats, args.data_dir)
            return history.run(history.rerun(url, args.rerun, args.ref, args.namespace, args.until, args.output))
        url = nats_url(args.nats, args.data_dir)
        return history.run(history.replay(url, args.ref, args.namespace, args.until, args.output))
    except (NotRunning, BadReference, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, BadReference | ValueError) else 5


def _api_call(args: argparse.Namespace, action: Any) -> int:
    """Run a client command with the config of the running Jetway; errors become exit codes."""
    from cli import client
    from cli.config import load

    try:
        return int(action(client.Api(load(args.data_dir))))
    except NotRunning as exc:
        print(f"error: {exc}", file=sys.stderr)
        return client.NETWORK
    except (client.Unreachable, client.ApiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BadReference as exc:
        print(f"error: {exc}", file=sys.stderr)
        return client.USAGE


def render_recorded(args: argparse.Namespace) -> int:
    from cli import client

    kind, _, name = args.ref.partition("/")
    if not name:
        print("error: expected md/NAME", file=sys.stderr)
        return client.USAGE
    return _api_call(args, lambda api: client.objects(api, kind, name, namespace=args.namespace))


def _up(args: argparse.Namespace) -> int:
    import dataclasses

    from cli import up
    from runtime import settings
    from services.router.main import limits_of, routing_of

    # the flags win over the environment's JETWAY_ROUTER_* (runtime/settings.py), each judged by the router's rules
    flags = {
        "header_timeout": args.router_header_timeout,
        "body_timeout": args.router_body_timeout,
        "idle_timeout": args.router_idle_timeout,
        "max_connections": args.router_max_connections,
        "drain_timeout": args.router_drain_timeout,
        "policy": args.router_policy,
        "prefix_weight": args.router_prefix_weight,
        "queue_weight": args.router_queue_weight,
        "kv_weight": args.router_kv_weight,
        "load_bound": args.router_load_bound,
        "client_keys": args.client_keys,
    }
    try:
        config = settings.read()
        router = dataclasses.replace(config.router, **{name: value for name, value in flags.items() if value is not None})
        config = dataclasses.replace(config, router=router)
        limits, routing = limits_of(router), routing_of(router)
        keys_mode = router.client_keys or "off"  # standalone: off unless asked for
    except ValueError as exc:
        print(f"jetway up: error: {exc}", file=sys.stderr)
        return 2
    return up.run(
        up.Options(
            args.data_dir,
            args.api_port,
            args.router_port,
            args.nats_port,
            args.probe_interval,
            args.allow_link_local,
            args.demo,
            args.log_level,
            args.log_format,
            router_limits=limits,
            routing=routing,
            client_keys=keys_mode,
            settings=config,
        )
    )


def _apply(args: argparse.Namespace) -> int:
    from cli import client

    return _api_call(args, lambda api: client.apply(api, args.filename, dry_run=args.dry_run, output=args.output))


def _console(args: argparse.Namespace) -> int:
    from cli import client

    return _api_call(args, client.console_login)


def _diff(args: argparse.Namespace) -> int:
    from cli import client

    return _api_call(args, lambda api: client.diff(api, args.filename))


def _get(args: argparse.Namespace) -> int:
    from cli import client

    name = args.name
    kind = args.kind
    if kind and "/" in kind and name is None:
        kind, name = kind.split("/", 1)
    return _api_call(args, lambda api: client.get(api, kind, name, namespace=args.namespace, output=args.output))


def _delete(args: argparse.Namespace) -> int:
    from cli import client

    if args.filename:
        if args.kind:
            print("error: --filename and a KIND NAME reference cannot both be set", file=sys.stderr)
            return client.USAGE
        return _api_call(args, lambda api: client.delete_files(api, args.filename))
    kind, name = args.kind, args.name
    if kind and "/" in kind and name is None:
        kind, name = kind.split("/", 1)
    if not kind or not name:
        print("error: delete needs KIND NAME (or KIND/NAME, or -f FILE)", file=sys.stderr)
        return client.USAGE
    return _api_call(args, lambda api: client.delete(api, kind, name, namespace=args.namespace))


def _secret(args: argparse.Namespace) -> int:
    from cli.config import data_dir
    from runtime.secrets import BadSecretName, FileSecrets

    store = FileSecrets(data_dir(args.data_dir) / "secrets")
    try:
        if args.action == "set":
            if not args.from_file:
                print("error: secret set needs --from-file FILE (or - for stdin); values never go on the command line", file=sys.stderr)
                return 2
            value = sys.stdin.buffer.read() if args.from_file == "-" else open(args.from_file, "rb").read()  # noqa: SIM115
            store.set(args.name, value)
            print(f"✓ secret {args.name} set ({len(value)} bytes); members referencing it pick it up at their next probe")
        elif args.action == "delete":
            found = store.delete(args.name)
            print(f"✓ secret {args.name} {'deleted' if found else 'noop (not found)'}")
        else:
            for name in store.names():
                print(name)
    except BadSecretName as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


def _keys(args: argparse.Namespace) -> int:
    from cli import keys

    return keys.run(args)


def _compute_agent(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from services.router import computeagent

    try:
        url = nats_url(args.nats, args.data_dir)
    except NotRunning as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
    token_file, ca_file = (Path(f) if f else None for f in (args.token_file, args.ca_file))
    return asyncio.run(
        computeagent.serve(
            url, args.name, args.upstream, token_file=token_file, ca_file=ca_file, log_level=args.log_level, program="jetway compute-agent"
        )
    )


def _sim(args: argparse.Namespace) -> int:
    import asyncio

    from cli import sim

    return asyncio.run(sim.serve(args))


def register(sub: Any) -> None:  # argparse's _SubParsersAction is private
    p = sub.add_parser("up", help="run NATS, every service, the apply API and the router on 127.0.0.1 until Ctrl-C")
    p.add_argument(
        "--data-dir", help="where the event store, secrets and jetway.json live (default: $JETWAY_DATA_DIR or ~/.local/share/jetway)"
    )
    p.add_argument("--api-port", type=int, default=8181, help="apply API port (0 picks a free one; default 8181)")
    p.add_argument("--router-port", type=int, default=8180, help="router port (0 picks a free one; default 8180)")
    p.add_argument("--nats-port", type=int, default=0, help="NATS port (default 0: a free one, written to jetway.json)")
    p.add_argument("--probe-interval", type=float, default=5.0, help="seconds between member probes (default 5)")
    p.add_argument("--allow-link-local", action="store_true", help="let members point at link-local and cloud metadata addresses")
    p.add_argument(
        "--router-header-timeout",
        type=float,
        metavar="SECONDS",
        help="a request's headers must arrive within this (default $JETWAY_ROUTER_HEADER_TIMEOUT or 10); then 408 and close",
    )
    p.add_argument(
        "--router-body-timeout",
        type=float,
        metavar="SECONDS",
        help="a request's body must arrive within this after its headers (default $JETWAY_ROUTER_BODY_TIMEOUT or 60)",
    )
    p.add_argument(
        "--router-idle-timeout",
        type=float,
        metavar="SECONDS",
        help="a keep-alive connection with no request is closed after this (default $JETWAY_ROUTER_IDLE_TIMEOUT or 75)",
    )
    p.add_argument(
        "--router-max-connections",
        type=int,
        metavar="N",
        help="connections past this get a 503 and are closed (default $JETWAY_ROUTER_MAX_CONNECTIONS or 4096)",
    )
    p.add_argument(
        "--router-drain-timeout",
        type=float,
        metavar="SECONDS",
        help="on stop, requests and streams in progress may finish within this (default $JETWAY_ROUTER_DRAIN_TIMEOUT or 30)",
    )
    p.add_argument(
        "--router-policy",
        choices=("prefix-cache", "least-outstanding", "round-robin"),
        help="how the router picks a member (default $JETWAY_ROUTER_POLICY or prefix-cache; docs/router.md)",
    )
    p.add_argument("--router-prefix-weight", type=float, metavar="W", help="prefix-cache: weight of a cached prefix (default 3)")
    p.add_argument("--router-queue-weight", type=float, metavar="W", help="prefix-cache: weight of a member's queue (default 2)")
    p.add_argument("--router-kv-weight", type=float, metavar="W", help="prefix-cache: weight of a member's KV-cache use (default 1)")
    p.add_argument("--router-load-bound", type=float, metavar="C", help="prefix-cache: no member past C x the average load (default 1.25)")
    p.add_argument(
        "--client-keys",
        choices=("required", "off"),
        help="require client API keys made with `jetway keys create` (default $JETWAY_ROUTER_CLIENT_KEYS or off)",
    )
    p.add_argument("--demo", action="store_true", help="apply an echo member and send a chat completion through the router")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", default="text", choices=("text", "json"))
    p.set_defaults(handler=_up)

    p = sub.add_parser("apply", help="apply manifests to the running Jetway, in order, stopping at the first failure")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE", help="YAML/JSON file, directory, or -")
    p.add_argument("--dry-run", action="store_true", help="validate and show what would change, store nothing")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_apply)

    p = sub.add_parser("console", help="print a one-time login link for the web console of the running Jetway")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_console)

    p = sub.add_parser("diff", help="show what applying the manifests would change (exit 1 when something would)")
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_diff)

    p = sub.add_parser("get", help="list kinds, resources of a kind, or show one resource")
    p.add_argument("kind", nargs="?", metavar="KIND[/NAME]")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("-n", "--namespace")
    p.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_get)

    p = sub.add_parser("delete", help="delete a resource (KIND NAME, KIND/NAME, or every document of -f FILE)")
    p.add_argument("kind", nargs="?", metavar="KIND[/NAME]")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("-f", "--filename", action="append", metavar="FILE")
    p.add_argument("-n", "--namespace")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_delete)

    p = sub.add_parser("secret", help="manage the standalone secret store (values never enter the event stream)")
    p.add_argument("action", choices=("set", "delete", "list"))
    p.add_argument("name", nargs="?", default="")
    p.add_argument("--from-file", metavar="FILE", help="the value's file, or - for stdin")
    p.add_argument("--data-dir")
    p.set_defaults(handler=_secret)

    p = sub.add_parser("keys", help="manage the router's client keys (shown once when made; only their hashes are kept)")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    data_help = "where `jetway up` keeps its secret store (default: $JETWAY_DATA_DIR or a per-user folder)"
    from_help = "the keys document to change, or the Secret from `kubectl get secret jetway-client-keys -o json`; - for stdin"
    manifest_help = "print the Secret jetway-client-keys for a cluster (| kubectl apply -f -) instead of writing the secret store"
    k = actions.add_parser("create", help="make a key, print it once, keep only its hash")
    k.add_argument("name", metavar="NAME", help="the client's name: a DNS label such as team-a")
    k.add_argument("--models", metavar="M1,M2", help="the models the key may use (default: every model)")
    k.add_argument("--rpm", metavar="N", help="requests per minute (default: unlimited)")
    k.add_argument("--tpm", metavar="N", help="tokens per minute, prompt and completion (default: unlimited)")
    k.add_argument("--weight", metavar="W", help="its share against other keys when a model's members are saturated (default: 1)")
    k.add_argument(
        "--tenant",
        metavar="T",
        help="a DNS label: the keys with one tenant share its place when a model's members are saturated (default: its own)",
    )
    k.add_argument("--secret-manifest", action="store_true", help=manifest_help)
    k.add_argument("--from", dest="from_file", metavar="FILE", help=from_help + " (with --secret-manifest)")
    k.add_argument("-n", "--namespace", default="jetway-system", help="the Secret's namespace (default jetway-system)")
    k.add_argument("--data-dir", help=data_help)
    k = actions.add_parser("list", help="names, models, limits, weights, tenants, creation times and hash prefixes")
    k.add_argument("--from", dest="from_file", metavar="FILE", help=from_help)
    k.add_argument("-o", "--output", choices=("text", "json"), default="text", help="a table (default) or JSON")
    k.add_argument("--data-dir", help=data_help)
    k = actions.add_parser("delete", help="remove a key: the router refuses it from its next tick")
    k.add_argument("name", metavar="NAME")
    k.add_argument("--secret-manifest", action="store_true", help=manifest_help)
    k.add_argument("--from", dest="from_file", metavar="FILE", help=from_help + " (needed with --secret-manifest)")
    k.add_argument("-n", "--namespace", default="jetway-system", help="the Secret's namespace (default jetway-system)")
    k.add_argument("--data-dir", help=data_help)
    p.set_defaults(handler=_keys)

    # the flags of services/router/computeagent.py's own program, declared here too: importing it would slow every command
    p = sub.add_parser("compute-agent", help="serve an operator-signal member: forward its requests to a local upstream")
    p.add_argument("--name", required=True, help="the member's spec.computeOperatorRef")
    p.add_argument("--upstream", required=True, help="the local model server, e.g. http://127.0.0.1:8000")
    p.add_argument("--token-file", help="bearer token for the upstream (read on each request)")
    p.add_argument("--ca-file", help="extra CA bundle for an https upstream")
    p.add_argument("--nats", metavar="URL", help="the bus (default: from jetway.json or $NATS_URL)")
    p.add_argument("--data-dir")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(handler=_compute_agent)

    p = sub.add_parser("sim", help="serve a simulated vLLM model (no GPU) and apply it as a member of the running Jetway")
    from cli import sim

    sim.add_arguments(p)
    p.set_defaults(handler=_sim)

    p = sub.add_parser("events", help="print the event history of everything, a kind, or one resource")
    p.add_argument("ref", nargs="?", metavar="KIND[/NAME]", help="e.g. modeldeployment/qwen, ipm/echo, or a kind alone")
    p.add_argument("--since", metavar="SEQ|TIME", help="a sequence, an RFC 3339 time, or an age such as 15m")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events as they are stored")
    _stream_options(p)
    p.set_defaults(handler=_events)

    p = sub.add_parser(
        "replay",
        help="rebuild state from the stream as of a point and print it; `replay routing --policy P`: replay the routed "
        "requests through another routing policy (see `jetway replay routing --help`)",
    )
    p.add_argument("ref", nargs="?", metavar="KIND[/NAME]")
    p.add_argument("--until", metavar="SEQ|TIME", help="stop at this sequence, RFC 3339 time, or age (default: now)")
    p.add_argument(
        "--rerun",
        metavar="SERVICE",
        help="feed the recorded inputs to the installed SERVICE (selector, storage, workload, binding) and print, per "
        "resource, where its decisions differ from the recorded ones (exit 1 when any does); nothing is written",
    )
    _stream_options(p)
    p.set_defaults(handler=_replay)
