"""A minimal service on the real runtime, for the runtime's own tests.

It acknowledges each InferencePoolMember generation once by recording a `StatusReported`
decision on its facet. Members named `fail-*` fail to reconcile (to exercise the per-key
retries); `flaky-*` fail on the first delivery only. Run as a process so a test
can kill it:

    python -m tests.support.ack_service --nats URL --name acker --dump state.json --ready ready-file
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import Iterable
from pathlib import Path

from contracts.events import Envelope, ResourceApplied, ResourceDeleted, StatusReported, StatusSlice
from contracts.subjects import Key, kind_filter
from runtime.bus import connect
from runtime.service import Effects, Runner, RunnerSettings, Service


class AckService(Service):
    consumes = (kind_filter("InferencePoolMember"),)

    def __init__(self, name: str) -> None:
        self.name = name
        self.generation: dict[Key, int] = {}
        self.acked: dict[Key, int] = {}
        self.attempts: dict[Key, int] = {}
        self.emitted = 0

    def fold(self, envelope: Envelope) -> None:
        event = envelope.event
        if isinstance(event, ResourceApplied):
            self.generation[envelope.key] = event.generation
        elif isinstance(event, ResourceDeleted):
            self.generation.pop(envelope.key, None)
        elif isinstance(event, StatusReported) and envelope.facet == self.name:
            self.acked[envelope.key] = event.generation

    def keys(self) -> Iterable[Key]:
        return list(self.generation)

    async def reconcile(self, key: Key, effects: Effects) -> None:
        wanted = self.generation.get(key)
        if wanted is None or self.acked.get(key) == wanted:
            return
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if key.name.startswith("fail-"):
            raise RuntimeError(f"cannot acknowledge {key.name}")
        if key.name.startswith("flaky-") and self.attempts[key] == 1:
            raise RuntimeError("first attempt fails")
        await effects.emit(key, StatusReported(generation=wanted, status=StatusSlice(phase="Seen")))
        self.emitted += 1

    def state(self) -> dict[str, list[int]]:
        return {str(k): [self.generation.get(k, 0), self.acked.get(k, 0)] for k in sorted(set(self.generation) | set(self.acked))}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nats", required=True)
    parser.add_argument("--name", default="acker")
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--ready", type=Path, help="a file written once the runner is ready (rebuilt, first pass done)")
    args = parser.parse_args()
    nc = await connect(args.nats, name=args.name)
    service = AckService(args.name)
    runner = Runner(service, nc, RunnerSettings(backoff=(0.05, 0.1, 0.2, 0.2, 0.2)))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, runner.stop)

    async def say_ready() -> None:
        await runner.ready.wait()
        if args.ready:
            args.ready.write_text("ready")

    ready = asyncio.create_task(say_ready())
    await runner.run()
    ready.cancel()
    if args.dump:
        args.dump.write_text(json.dumps(service.state(), sort_keys=True))
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
