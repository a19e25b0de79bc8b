"""`jetway up`: the embedded default. NATS from the wheel, every service, the apply API and
the router on 127.0.0.1, in one process, until Ctrl-C or SIGTERM.

On the next start everything applied before is rebuilt from the stream in the data dir.
`--demo` applies an echo member and sends a chat completion through the router.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import sys
import time
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.config import ClientConfig, data_dir
from runtime import logs, settings, telemetry
from runtime.bus import connect
from runtime.entry import Context
from runtime.natsserver import NatsServer, NatsServerError
from runtime.process import settle_heap
from runtime.secrets import FileSecrets
from runtime.service import Runnable
from runtime.settings import Settings
from services import catalog
from services.console import api
from services.console.web import Console
from services.router import main as router_main
from services.router import policy, protocol
from services.router import records as router_records
from services.router.keyfile import KeyFile
from services.router.keys import Gate
from services.router.learn import Learner
from services.router.metrics import RECORDER
from services.watcher import main as watcher_main

log = logging.getLogger("jetway.up")
DEFAULT_API_PORT = 8181
DEFAULT_ROUTER_PORT = 8180
HOST = "127.0.0.1"
DEMO_MEMBER = {
    "apiVersion": "airdress.co/v1alpha1",
    "kind": "InferencePoolMember",
    "metadata": {"name": "echo", "labels": {"tier": "demo"}},
    "spec": {"backend": "echo", "models": [{"name": "echo", "contextWindow": 8192}]},
}


@dataclass
class Options:
    data_dir: str | None
    api_port: int
    router_port: int
    nats_port: int
    probe_interval: float
    allow_link_local: bool
    demo: bool
    log_level: str
    log_format: str
    router_limits: protocol.Limits | None = None  # None: the defaults
    routing: policy.Settings | None = None  # None: the defaults
    client_keys: str = "off"  # required: only requests with a key from `jetway keys create`
    settings: Settings | None = None  # as `jetway up` read them (runtime/settings.py); None: read them now


def say(message: str) -> None:
    print(f"jetway up: {message}", file=sys.stderr, flush=True)


def load_token(directory: Path, name: str = "token") -> str:
    """A secret kept in the data dir (mode 0600) so clients keep working across restarts: the API token,
    or the embedded NATS server's password (`nats-password`)."""
    path = directory / name
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def demo_manifest() -> dict[str, Any]:
    example = Path(__file__).resolve().parent.parent / "examples" / "echo-member.yaml"
    if example.exists():
        import yaml

        loaded = yaml.safe_load(example.read_text())
        if isinstance(loaded, dict):
            return loaded
    return DEMO_MEMBER


def _http(method: str, url: str, body: Any = None, token: str | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), dict(exc.headers)


async def run_demo(config: ClientConfig) -> None:
    manifest = demo_manifest()
    name = manifest["metadata"]["name"]
    model = manifest["spec"]["models"][0]["name"]
    loop = asyncio.get_running_loop()
    status, body, _ = await loop.run_in_executor(None, _http, "POST", f"{config.api_url}/v1/apply", manifest, config.token)
    if status >= 300:
        raise RuntimeError(f"demo: apply failed ({status}): {body}")
    say(f"demo: applied InferencePoolMember/{name} ({body['action']}, generation {body['generation']})")
    deadline = loop.time() + 30  # a busy machine may take a while to probe it; the chat below says if it never was
    while loop.time() < deadline:
        status, listing, _ = await loop.run_in_executor(None, _http, "GET", f"{config.router_url}/models")
        if status == 200 and any(m["id"] == model for m in listing.get("data", [])):
            break
        await asyncio.sleep(0.05)
    question = "Hello from the Jetway demo: this text went through the router and came back."
    request = {"model": model, "messages": [{"role": "user", "content": question}]}
    say(f"demo: POST {config.router_url}/chat/completions model={model}")
    status, answer, headers = await loop.run_in_executor(None, _http, "POST", f"{config.router_url}/chat/completions", request)
    if status != 200:
        raise RuntimeError(f"demo: chat completion failed ({status}): {answer}")
    content = answer["choices"][0]["message"]["content"]
    say(f"demo: answer from member {headers.get('x-jetway-member', '?')}: {content!r}")
    say(
        f"demo: try it yourself: curl -s {config.router_url}/chat/completions -H 'content-type: application/json' "
        f"-d '{json.dumps(request)}'"
    )


NATS_USER = "jetway"
RESTARTS = 3  # nats-server exits this often within RESTART_WINDOW: give up (it will not stay up)
RESTART_WINDOW = 60.0


async def supervise(nats: NatsServer, stop: asyncio.Event) -> str:
    """Keep the embedded nats-server running: when it exits (killed, crashed), start it again on the same
    port and store, so the services' connections reconnect and what JetStream stored is still there.
    Returns why it gave up, or "" once `stop` is set (the exit is ours)."""
    started: deque[float] = deque(maxlen=RESTARTS)
    while True:
        code = await asyncio.to_thread(nats.wait)
        if stop.is_set():
            return ""
        now = time.monotonic()
        if len(started) == RESTARTS and now - started[0] < RESTART_WINDOW:
            return f"nats-server exited {RESTARTS + 1} times within {RESTART_WINDOW:.0f}s (last code {code}); see {nats.log_path}"
        started.append(now)
        say(f"warning: nats-server exited (code {code}); starting it again on {nats.url}")
        try:
            await asyncio.to_thread(nats.start)
        except NatsServerError as exc:
            return str(exc)


async def up(options: Options) -> int:
    directory = data_dir(options.data_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
    except OSError as exc:  # a file there, no permission, a read-only disk: the user's to fix, said as such
        say(f"error: cannot use {directory} as the data folder (--data-dir, JETWAY_DATA_DIR): {exc.strerror or exc}")
        return 2
    logs.setup(options.log_level, json_lines=options.log_format == "json")
    telemetry.setup("up")
    try:
        configured = options.settings or settings.read()
    except ValueError as exc:
        say(f"error: {exc}")
        return 2
    try:
        # the embedded NATS takes no client without the password: a local process cannot publish events
        # past the apply API's token and validation (D11)
        password = load_token(directory, "nats-password")
        nats = NatsServer(store_dir=directory / "nats", port=options.nats_port, user=NATS_USER, password=password).start()
    except NatsServerError as exc:
        say(f"error: {exc}")
        return 1
    stop = asyncio.Event()
    hurry = asyncio.Event()  # a second Ctrl-C: no drain, no waiting on the services' last work

    def on_signal() -> None:
        if stop.is_set():
            say("stopping now")
            hurry.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    # nats-py gives up on a connection for good on some server errors: then nothing here works,
    # so stop and say so (exit 1) rather than keep answering as if healthy.
    lost = asyncio.Event()
    nc = await connect(nats.client_url, name="jetway-up", on_closed=lost.set)
    token = load_token(directory)
    secret_store = FileSecrets(directory / "secrets")
    watcher = watcher_main.build(nc, allow_link_local=options.allow_link_local)
    router = router_main.build(
        nc,
        secret_store,
        probe_interval=options.probe_interval,
        allow_link_local=options.allow_link_local,
        routing=options.routing,
        holding=router_main.holding_of(configured.router),  # JETWAY_ROUTER_HOLD_*: requests held for a model at zero
        record_sample=configured.router.records,  # JETWAY_ROUTER_RECORDS: routing records, for `jetway replay routing`
    )
    if router.routes.records is not None:
        kept = configured.router
        await router_records.ensure_stream(nc.jetstream(timeout=10), kept.records_max_age, kept.records_max_bytes)
    keyfile = None
    if options.client_keys == "required":
        keyfile = KeyFile.in_store(secret_store)
        keyfile.load()
        router.routes.keys = Gate(lambda: keyfile.ring)
    router_main.fair_queue(router, configured.router)  # JETWAY_ROUTER_FAIR_*: a fair queue when members are saturated
    console = Console(recorder=RECORDER)  # the pages' router figures: the router's counters in this process
    door = api.standalone(nc, watcher.service, token, console)
    # the rest as their own processes start them (services/catalog.py), from the settings read above: the workload
    # reads its image resolution (JETWAY_IMAGE_RESOLUTION) and its renderers' settings (AIRUNWAY_KAITO_*) itself
    context = Context(nc, None, configured, replicated=False)
    runners: list[Runnable] = [watcher.runner, door.runner, router.runner, *await catalog.start(context, catalog.STANDALONE)]
    tasks = [asyncio.create_task(r.run(), name=r.name) for r in runners]
    # tasks that run until cancelled (they have no stop of their own): cancelled on the way out
    background: list[asyncio.Task[Any]] = []
    if keyfile is not None:
        background.append(asyncio.create_task(keyfile.watch(options.probe_interval, router.routes.keys), name="client-keys"))
    recording = router.routes.records
    publishing = asyncio.create_task(recording.run(), name="routing-records") if recording is not None else None
    api_runner = serving = None
    supervisor: asyncio.Future[str] | None = None
    learner: Learner | None = None
    warming: asyncio.Task[None] | None = None
    sharing: asyncio.Task[None] | None = None
    try:
        ready: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(r.ready.wait() for r in runners)))
        stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        closed: asyncio.Future[Any] = asyncio.ensure_future(lost.wait())
        supervisor = asyncio.ensure_future(supervise(nats, stop))
        waiting: list[asyncio.Future[Any]] = [ready, stopped, closed, supervisor, *tasks, *background]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in (*tasks, *background) if t.done()]
        if supervisor.done() and supervisor.result():
            say(f"error: {supervisor.result()}; stopping")
            return 1
        if lost.is_set():
            say(f"error: the NATS connection closed ({nc.last_error or 'no reason given'}); stopping")
            return 1
        if failed or stop.is_set():
            for task in failed:
                with contextlib.suppress(Exception):
                    task.result()
            return 1 if failed else 0
        if recording is not None:  # the recent routing records warm the router's memory; other replicas' records teach it
            learner = router.routes.learner = Learner(
                nc, recording.subject, router.service.members, router.routes.memory, router.routes.settings
            )
            warming = asyncio.create_task(learner.start(configured.router.warm_seconds), name="routing-memory")
            sharing = asyncio.create_task(learner.share_load(), name="routing-load")
        # the built-in providers registered, so a first apply may choose any of them (a Ctrl-C meanwhile stops at once)
        known = asyncio.ensure_future(catalog.providers_known(runners))
        await asyncio.wait([known, stopped, closed], return_when=asyncio.FIRST_COMPLETED)
        known.cancel()
        if stop.is_set():
            return 0
        if lost.is_set():
            say(f"error: the NATS connection closed ({nc.last_error or 'no reason given'}); stopping")
            return 1
        try:
            api_runner, api_port = await api.serve(door.app, HOST, options.api_port)
            serving = await protocol.listen(router.routes, HOST, options.router_port, limits=options.router_limits)
            router_port = serving.port
        except OSError as exc:
            say(f"error: cannot listen: {exc.strerror} (choose other ports with --api-port/--router-port, or 0 for free ones)")
            return 1
        settle_heap()
        config = ClientConfig(
            api_url=f"http://{HOST}:{api_port}", router_url=f"http://{HOST}:{router_port}/v1", token=token, nats_url=nats.client_url
        )
        path = config.write(directory)
        console.router_url = config.router_url
        resources = watcher.service.rebuilt_count
        say(f"NATS JetStream {nats.url} (store {directory / 'nats'}, sync_interval {nats.sync_interval})")
        say(f"apply API {config.api_url} (bearer token in {path})")
        # a one-time code, not the token: this line may end up in a terminal's scrollback or a log
        say(f"console {console.login_url(config.api_url)} (one-time login link, valid 10 minutes; `jetway console` prints another)")
        say(f"router {config.router_url} (OpenAI- and Anthropic-compatible APIs, docs/router.md; policy {router.routes.settings.policy})")
        if keyfile is None:
            say("client keys: off, any client on this machine may call the router (--client-keys required to ask for keys)")
        else:
            say(f"client keys: required, {len(keyfile.ring.keys)} in the secret store (make one with `jetway keys create NAME`)")
        builtin = watcher.service.rebuilt_builtin
        mine = f" ({resources - builtin} applied, {builtin} built-in provider configs: jetway get ipc)" if builtin else ""
        say(f"{resources} resource{'s' if resources != 1 else ''} rebuilt from the stream{mine}; Ctrl-C to stop")
        if options.demo and keyfile is not None:
            say("demo: not run, client keys are required (run it without --client-keys required)")
        elif options.demo:
            try:
                await run_demo(config)
            except Exception as exc:
                say(f"{exc}")
                return 1
        await asyncio.wait([stopped, closed, supervisor, *tasks, *background], return_when=asyncio.FIRST_COMPLETED)
        if supervisor.done() and supervisor.result():
            say(f"error: {supervisor.result()}; stopping")
            return 1
        if lost.is_set() and not stop.is_set():
            say(f"error: the NATS connection closed ({nc.last_error or 'no reason given'}); stopping")
            return 1
        return 1 if any(t.done() and not t.cancelled() and t.exception() for t in (*tasks, *background)) else 0
    finally:
        say("stopping")
        for task in background:
            task.cancel()
        if serving is not None:
            # first: requests in progress finish while every service still runs (a second Ctrl-C cuts them)
            cut = await serving.drain(hurry)
            if cut:
                say(f"{cut} request{'s' if cut != 1 else ''} still in progress cut off")
        if warming is not None and learner is not None:
            warming.cancel()
            await learner.stop()
            if sharing is not None:
                await asyncio.wait([sharing], timeout=5)
        if recording is not None and publishing is not None:  # the drained requests' records too
            recording.stop()
            await asyncio.wait([publishing], timeout=5)
        for runner in runners:
            runner.stop()
        ending = asyncio.ensure_future(asyncio.gather(*tasks, *background, return_exceptions=True))
        await asyncio.wait([ending, asyncio.ensure_future(hurry.wait())], return_when=asyncio.FIRST_COMPLETED)
        if not ending.done():
            for task in tasks:
                task.cancel()
            await ending
        if api_runner is not None:
            await api_runner.cleanup()
        router.routes.pool.close()
        with contextlib.suppress(Exception):
            await nc.drain()
        if supervisor is not None:
            supervisor.cancel()  # before the server stops: its exit is ours, not one to restart
        nats.stop()
        say("stopped")


def run(options: Options) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(up(options))
    return uvloop.run(up(options))
