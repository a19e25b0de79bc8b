"""`jetway sim`: a simulated vLLM server on this machine, applied to the running Jetway as a member.

The simulator (simulator/vllm.py, docs/simulator.md) answers as vLLM does, with continuous batching, a
prefix cache and vLLM's metrics, and needs no GPU and no weights: routing, client keys, limits and the
console can be tried end to end. The member it applies is deleted again on Ctrl-C (`--keep` leaves it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cli import client


def member(name: str, url: str, models: list[str], context_window: int) -> dict[str, Any]:
    """The InferencePoolMember that sends the router's traffic for `models` to the simulator at `url`."""
    return {
        "apiVersion": "airdress.co/v1alpha1",
        "kind": "InferencePoolMember",
        "metadata": {"name": name, "labels": {"jetway.dev/simulated": "true"}},
        "spec": {"backend": "vllm-openai", "url": url, "models": [{"name": m, "contextWindow": context_window} for m in models]},
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    from simulator.params import SimParams

    p.add_argument("--model", action="append", dest="models", metavar="NAME", help="a model it serves (repeat for more; default sim)")
    p.add_argument("--name", help="the member's name (default sim-<first model>, made a DNS name)")
    p.add_argument("--port", type=int, default=0, help="where it listens on 127.0.0.1 (default: a free port)")
    p.add_argument("--keep", action="store_true", help="leave the member applied when stopped")
    p.add_argument("--data-dir", help="where `jetway up` keeps its data (default: $JETWAY_DATA_DIR or a per-user folder)")
    timing = p.add_argument_group("the simulated engine (docs/simulator.md)")
    for spec in dataclasses.fields(SimParams):
        if isinstance(spec.default, bool) or spec.default is None:
            continue
        flag = "--" + spec.name.replace("_", "-")
        timing.add_argument(flag, type=type(spec.default), default=spec.default, metavar="N", help=f"default {spec.default}")


def default_name(model: str) -> str:
    """`sim-` and the model as a DNS label: lower case, anything else a dash, at most 63 characters."""
    label = "".join(c if c.isalnum() else "-" for c in model.lower()).strip("-") or "model"
    return ("sim-" + label)[:63].rstrip("-")


async def serve(args: argparse.Namespace) -> int:
    from cli import client
    from cli.config import NotRunning, load
    from simulator.params import SimParams
    from simulator.vllm import VllmSimulator

    models = args.models or ["sim"]
    # the flags add_arguments made (one per numeric parameter); the rest keep their defaults
    values: dict[str, Any] = {spec.name: getattr(args, spec.name) for spec in dataclasses.fields(SimParams) if hasattr(args, spec.name)}
    try:
        params = SimParams(**values)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return client.USAGE
    try:
        api = client.Api(load(args.data_dir))
    except NotRunning as exc:
        print(f"error: {exc}", file=sys.stderr)
        return client.NETWORK
    name = args.name or default_name(models[0])
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sim = VllmSimulator(models, params, port=args.port)
    try:
        await sim.start()
    except OSError as exc:
        print(f"error: the simulator cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", file=sys.stderr)
        return client.USAGE
    try:
        return await _as_member(api, sim.url, name, models, params.max_model_len, stop, keep=args.keep)
    finally:
        await sim.stop()


async def _as_member(
    api: client.Api, url: str, name: str, models: list[str], context_window: int, stop: asyncio.Event, *, keep: bool
) -> int:
    """Apply the member, serve until stopped, then delete it (unless kept)."""
    from cli import client

    loop = asyncio.get_running_loop()
    manifest = member(name, url, models, context_window)
    try:
        result = await loop.run_in_executor(None, lambda: api.call("POST", "/v1/apply", manifest, what="apply member"))
    except (client.ApiError, client.Unreachable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"jetway sim: serving {', '.join(models)} on {url}", flush=True)
    print(f"jetway sim: InferencePoolMember/{name} {result['action']}; Ctrl-C to stop", flush=True)
    await stop.wait()
    if keep:
        print(f"jetway sim: stopped; InferencePoolMember/{name} kept (its member turns Failed)", flush=True)
        return client.OK
    try:
        await loop.run_in_executor(None, lambda: api.call("DELETE", f"/v1/kinds/InferencePoolMember/{name}", what="delete member"))
    except (client.ApiError, client.Unreachable) as exc:
        print(f"jetway sim: stopped; InferencePoolMember/{name} not deleted: {exc}", file=sys.stderr)
        return client.NETWORK
    print(f"jetway sim: stopped; InferencePoolMember/{name} deleted", flush=True)
    return client.OK
