"""The standalone stack in-process: real NATS, the real watcher and router services, the apply
API and the router on free ports of 127.0.0.1, a file secret store. What `jetway up` runs,
minus the process around it (tests of `jetway up` itself run the command)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from nats.aio.client import Client

from runtime.bus import EVENTS_STREAM, connect
from runtime.entry import Context
from runtime.secrets import FileSecrets
from runtime.service import Runner, RunnerSettings
from runtime.settings import Settings
from services import catalog
from services.console import api
from services.console.handlers import ConsoleService
from services.console.web import Console
from services.router import main as router_main
from services.router import protocol
from services.router.metrics import RECORDER
from services.watcher import main as watcher_main
from tests.contracts.cases import MD, changed

SETTINGS = RunnerSettings(backoff=(0.05, 0.1, 0.2, 0.2, 0.2))


@dataclass
class Stack:
    api_url: str
    router_url: str
    token: str
    nats_url: str
    secrets: FileSecrets
    watcher: watcher_main.Watcher
    router: router_main.Router
    http: aiohttp.ClientSession
    front: ConsoleService  # the front door's own fold (what the API reads: views, the event index, probe times)
    console: Console | None = None  # the web console's logins and router relay (services/console)

    async def apply(
        self, doc: Any, *, dry_run: bool = False, raw: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        url = f"{self.api_url}/v1/apply" + ("?dry-run=true" if dry_run else "")
        data = raw if raw is not None else None
        kwargs: dict[str, Any] = (
            {"data": data, "headers": {"Content-Type": content_type, **self.auth}}
            if raw is not None
            else {"json": doc, "headers": self.auth}
        )
        async with self.http.post(url, **kwargs) as response:
            return response.status, await response.json()

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.http.get(f"{self.api_url}{path}", headers=self.auth) as response:
            return response.status, await response.json()

    async def delete(self, path: str) -> tuple[int, Any]:
        async with self.http.delete(f"{self.api_url}{path}", headers=self.auth) as response:
            return response.status, await response.json()

    async def status(self, name: str, kind: str = "InferencePoolMember") -> dict[str, Any]:
        code, body = await self.get(f"/v1/kinds/{kind}/{name}/status")
        assert code == 200, body
        return dict(body)

    async def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return next((c for c in (await self.status(name))["conditions"] if c["type"] == type_), None)

    async def chat(self, model: str, content: str = "hello", **extra: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
        async with self.http.post(f"{self.router_url}/chat/completions", json=body) as response:
            return response.status, await response.json(content_type=None), dict(response.headers)

    async def served(self, model: str, by: str | None = None) -> bool:
        """Whether the router serves `model` now (by member `by`, when given)."""
        async with self.http.get(f"{self.router_url}/models") as response:
            return any(m["id"] == model and (by is None or by in m.get("members", [])) for m in (await response.json())["data"])


def echo_member(name: str) -> dict[str, Any]:
    """An InferencePoolMember of the echo backend serving the model `name`."""
    return {
        "apiVersion": "airdress.co/v1alpha1",
        "kind": "InferencePoolMember",
        "metadata": {"name": name},
        "spec": {"backend": "echo", "models": [{"name": name}]},
    }


class Burst:
    """`count` ModelDeployments applied through the apply API, 16 at a time: `answers` their status codes, `third`
    set once a third of them were answered (when a test breaks something mid-burst)."""

    def __init__(self, stack: Stack, count: int) -> None:
        self.answers: dict[str, int] = {}
        self.third = asyncio.Event()
        limit = asyncio.Semaphore(16)

        async def apply(index: int) -> None:
            async with limit:
                status, _ = await stack.apply(changed(MD, {"metadata.name": f"m{index}", "spec.provider": {"name": "vllm"}}))
                self.answers[f"m{index}"] = status
                if len(self.answers) >= count // 3:
                    self.third.set()

        self.tasks = [asyncio.create_task(apply(i)) for i in range(count)]

    async def done(self, timeout: float = 300) -> dict[str, int]:
        await asyncio.wait_for(asyncio.gather(*self.tasks), timeout)
        return self.answers


async def quiet(nc: Client, runners: list[Runner]) -> bool:
    """Every runner has handled the whole stream, has nothing in flight, and nothing was stored meanwhile."""
    js = nc.jetstream()
    last = (await js.stream_info(EVENTS_STREAM)).state.last_seq
    if not all(runner.seq == last and not runner.busy for runner in runners):
        return False
    return (await js.stream_info(EVENTS_STREAM)).state.last_seq == last


@contextlib.asynccontextmanager
async def running_stack(
    nats_url: str, directory: Path, *, probe_interval: float = 0.3, settings: RunnerSettings = SETTINGS
) -> AsyncIterator[Stack]:
    nc = await connect(nats_url, name="stack")
    store = FileSecrets(directory / "secrets")
    watcher = watcher_main.build(nc, settings=settings)
    router = router_main.build(nc, store, probe_interval=probe_interval, settings=settings)
    token = secrets.token_urlsafe(16)
    console = Console(recorder=RECORDER)
    door = api.standalone(nc, watcher.service, token, console, settings)
    runners = [watcher.runner, door.runner, router.runner]
    tasks = [asyncio.create_task(r.run()) for r in runners]
    await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in runners)), 20)
    api_runner, api_port = await api.serve(door.app, "127.0.0.1", 0)
    router_server, router_port = await protocol.serve(router.routes, "127.0.0.1", 0)
    console.router_url = f"http://127.0.0.1:{router_port}/v1"
    http = aiohttp.ClientSession()
    try:
        yield Stack(
            f"http://127.0.0.1:{api_port}", console.router_url, token, nats_url, store, watcher, router, http, door.service, console
        )
    finally:
        await http.close()
        router_server.close()
        await api_runner.cleanup()
        for runner in runners:
            runner.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
        router.routes.pool.close()
        await nc.close()


async def started(nc: Client, names: tuple[str, ...], settings: Settings | None = None, runner: RunnerSettings = SETTINGS) -> list[Runner]:
    """The services `names` as `jetway up` starts them (services/catalog.py), not yet running: with the tests' short
    backoffs (`runner`) and `settings` in place of the process's."""
    context = Context(nc, None, settings or Settings(), replicated=False, runner=runner)
    return catalog.runners(await catalog.start(context, names))


@contextlib.asynccontextmanager
async def running_pipeline(nats_url: str, *, ready_timeout: float = 30.0) -> AsyncIterator[list[Runner]]:
    """The selector, storage and workload services beside a stack, on their own connection."""
    nc = await connect(nats_url, name="pipeline")
    runners = await started(nc, catalog.PIPELINE)
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in runners)), ready_timeout)
        assert await catalog.providers_known(runners, timeout=ready_timeout), "the built-in providers were not registered"
        yield runners
    finally:
        for runner in runners:
            runner.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await nc.close()


@contextlib.asynccontextmanager
async def running_binding(nats_url: str, *, ready_timeout: float = 30.0) -> AsyncIterator[Runner]:
    """The binding service beside a stack (as `jetway up` runs it), so agents get a resolved model binding."""
    nc = await connect(nats_url, name="binding")
    [runner] = await started(nc, ("binding",))
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(runner.ready.wait(), ready_timeout)
        yield runner
    finally:
        runner.stop()
        await asyncio.gather(task, return_exceptions=True)
        await nc.close()


async def next_sse_event(response: aiohttp.ClientResponse, timeout: float = 20.0) -> tuple[str, Any]:
    """The next Server-Sent Event of a response: its name and its JSON data (comments and heartbeats skipped)."""
    name, data = "", ""
    while True:
        line = (await asyncio.wait_for(response.content.readline(), timeout)).decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and name:
            return name, json.loads(data)
