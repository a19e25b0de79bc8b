"""The compute agent: the compute role of an operator-signal member, a program of its own run beside a model server.

    python -m services.router.computeagent --name NAME --upstream URL [--token-file F] [--ca-file F] [--nats URL]
    jetway compute-agent ...   (the same, the bus's URL read from the running Jetway's jetway.json)

It needs no router and no other Jetway service on its host: only the bus (`--nats`, else $JETWAY_NATS_URL,
else $NATS_URL, else nats://127.0.0.1:4222) and its local upstream. It enrols by answering on
`jetway.signal.compute.<name>.*` (a queue group, so two agents of one name share the load), forwards probe and
inference requests to its local upstream with its own bearer token (never sent over the bus), and streams each
answer back to the requester. The token file is read in a worker thread at each probe (every tick), so a rotated
token is used from the next tick on and no request waits on a file read. SIGTERM or SIGINT: it stops taking
requests, lets those in progress finish (up to 30 s) and exits 0; a bus it cannot reach is exit code 5.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg

from runtime import logs, settings
from runtime.bus import connect, redacted
from runtime.secrets import bearer_token
from services.router.signal import ReplyStream, request_of, subject
from services.router.upstream import Endpoint, UpstreamError, UpstreamPool

log = logging.getLogger("jetway.compute-agent")


class ComputeAgent:
    def __init__(
        self, nc: Client, name: str, upstream: str, *, token_file: Path | None = None, ca_file: Path | None = None, timeout: float = 3.0
    ) -> None:
        self.nc = nc
        self.name = name
        self.endpoint = Endpoint.parse(upstream, ca_file.read_bytes() if ca_file else None)
        self.token_file = token_file
        self.pool = UpstreamPool(allow_link_local=True)  # its upstream is the operator's own, on this host
        self.timeout = timeout
        self.tasks: set[asyncio.Task[None]] = set()
        self._token: bytes | None = None  # the last token read; None until the first read

    async def _refresh_token(self) -> None:
        if self.token_file is not None:
            raw = await asyncio.to_thread(self.token_file.read_bytes)
            self._token = bearer_token(raw).encode()

    async def _auth(self) -> list[tuple[bytes, bytes]]:
        if self.token_file is None:
            return []
        if self._token is None:
            await self._refresh_token()
        assert self._token is not None
        return [(b"authorization", b"Bearer " + self._token)]

    async def _probe(self, msg: Msg) -> None:
        try:
            await self._refresh_token()  # each tick: a rotated token is picked up here
            answer = await self.pool.fetch(
                self.endpoint, "GET", "/v1/models", [(b"accept", b"application/json"), *(await self._auth())], timeout=self.timeout
            )
        except (UpstreamError, OSError) as exc:
            await self.nc.publish(msg.reply, b"", headers={"Jetway-Error": f"local upstream: {exc}"})
            return
        await self.nc.publish(msg.reply, answer.content, headers={"Jetway-Status": str(answer.status)})

    async def _inference(self, msg: Msg) -> None:
        parsed = request_of(msg)
        stream = ReplyStream(self.nc, msg.reply)
        if parsed is None:
            await stream.fail("not an inference request")
            return
        method, path, headers, body = parsed
        try:
            auth = await self._auth()
            await self.pool.send(self.endpoint, method, path, [*headers, *auth], body, stream, response_timeout=600)
        except (UpstreamError, OSError) as exc:
            await stream.fail(f"local upstream: {exc}")
            return
        await stream.close()

    def _spawn(self, handler: str, msg: Msg) -> None:
        task = asyncio.get_running_loop().create_task(getattr(self, handler)(msg))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, stop: asyncio.Event) -> None:
        group = f"jetway-compute-{self.name}"

        async def probe(msg: Msg) -> None:
            self._spawn("_probe", msg)

        async def inference(msg: Msg) -> None:
            self._spawn("_inference", msg)

        subs = [
            await self.nc.subscribe(subject(self.name, "probe"), queue=group, cb=probe),
            await self.nc.subscribe(subject(self.name, "inference"), queue=group, cb=inference),
        ]
        await self.nc.flush()
        log.info("compute agent enrolled", extra={"agent": self.name, "upstream": f"{self.endpoint.host}:{self.endpoint.port}"})
        try:
            await stop.wait()
        finally:
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            if self.tasks:
                await asyncio.wait(self.tasks, timeout=30)
            self.pool.close()


async def serve(
    url: str,
    name: str,
    upstream: str,
    *,
    token_file: Path | None = None,
    ca_file: Path | None = None,
    log_level: str = "info",
    program: str = "compute-agent",
) -> int:
    """Enrol as `name` on the bus at `url` and forward to `upstream` until SIGTERM or SIGINT; the exit code (5: the bus
    cannot be reached)."""
    logs.setup(log_level, json_lines=False)
    try:
        nc = await connect(url, name=f"compute-agent-{name}")
    except ConnectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 5
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    agent = ComputeAgent(nc, name, upstream, token_file=token_file, ca_file=ca_file)
    print(f"{program}: {name} enrolled on {redacted(url)}, forwarding to {upstream}; Ctrl-C to stop", file=sys.stderr)
    await agent.run(stop)
    await nc.drain()
    return 0


def main(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    # `jetway compute-agent` (cli/commands.py) declares the same flags, but --nats: there it defaults to jetway.json
    parser = argparse.ArgumentParser(
        prog="python -m services.router.computeagent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--name", required=True, help="the member's spec.computeOperatorRef")
    parser.add_argument("--upstream", required=True, help="the local model server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token-file", type=Path, help="bearer token for the upstream (read on each request)")
    parser.add_argument("--ca-file", type=Path, help="extra CA bundle for an https upstream")
    configured = settings.load(environ).nats.url  # JETWAY_NATS_URL (runtime/settings.py), else $NATS_URL
    default = configured if configured != settings.Nats().url else environ.get("NATS_URL") or configured
    parser.add_argument(
        "--nats", metavar="URL", default=default, help="the bus (default: $JETWAY_NATS_URL, else $NATS_URL, else nats://127.0.0.1:4222)"
    )
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    args = parser.parse_args(argv)
    serving = serve(args.nats, args.name, args.upstream, token_file=args.token_file, ca_file=args.ca_file, log_level=args.log_level)
    return asyncio.run(serving)


if __name__ == "__main__":
    sys.exit(main())
