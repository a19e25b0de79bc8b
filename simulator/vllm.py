"""A vLLM-like OpenAI server on 127.0.0.1: the other side of the wire for routing tests and benchmarks.

It models what a router can observe and exploit, with asyncio sleeps standing in for GPU time:

- Continuous batching: at most `max_running` requests run (prefill, then decode) at once; the
  rest wait in a FIFO queue, unbounded, or bounded by `max_waiting` with 503 past it.
- Prefix cache: prompt text is cut into blocks of `block_chars` characters; block i's key is a
  hash of (block i-1's key, block i's text), so a block hits only when the whole prefix before
  it matches. An LRU of `cache_blocks` blocks. A request looks up its leading cached blocks
  when it is admitted and inserts all its full blocks once its prefill is done. As in vLLM, at
  least one prompt token is always computed (the hit is capped at prompt_tokens - 1, block aligned),
  and a prompt's blocks are refreshed tail first so its head is evicted last.
- Tokens: 4 characters of text make 1 token (`CHARS_PER_TOKEN`), rounded up, at least 1.
  Chat prompt text is the message contents (strings and text parts) joined by newlines.
- Timing: TTFT = queueing + (`ttft_base` + `prefill_per_token` × uncached prompt tokens);
  the first output token comes out of prefill, each further one takes `decode_per_token`
  × (1 + `decode_growth` × (running - 1)). Output length is `max_tokens` (or
  `max_completion_tokens`), `default_max_tokens` when absent; finish_reason is "length".
  `slow_factor` multiplies every duration, and a change applies at once to work in progress
  (a member slowed down mid-run): `VllmSimulator.slow_factor = 4` or `POST /sim/config`.
- KV-cache usage: blocks held by running requests (prompt + generated tokens, per request,
  a prefix shared by two running requests counts twice) / `cache_blocks`, capped at 1.

Defaults (`SimParams`): ttft_base 0.01 s, prefill_per_token 0.0002 s, decode_per_token 0.002 s,
decode_growth 0.02, max_running 8, max_waiting None (unbounded), block_chars 64 (16 tokens, vLLM's
block size), cache_blocks 2048, prefix_caching True, max_model_len 8192, default_max_tokens 16,
slow_factor 1.0. Scaled down from a GPU so that tests run fast.

HTTP: GET /v1/models, POST /v1/chat/completions and /v1/completions (SSE when `stream`,
a usage chunk when `stream_options.include_usage`), GET /health, GET /metrics (vLLM's metric
names, labelled with the first served model name as vLLM does), and for tests and benchmarks
POST /sim/config, POST /sim/reset, GET /sim/stats, POST /sim/cached-prefix. With `api_key`,
/v1/* and /metrics need `Authorization: Bearer <key>`. Answers carry `x-sim-cached-tokens`.

    python -m simulator.vllm --port 8001 --model m1 [--model m2] [--decode-per-token 0.01 ...]

docs/simulator.md has the whole model and what it leaves out.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import hashlib
import json
import signal
import sys
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from simulator.params import CHARS_PER_TOKEN, SimParams

CACHED_HEADER = "x-sim-cached-tokens"
OUTPUT_TOKEN = "tok "  # every output token: CHARS_PER_TOKEN characters, so output text costs what it counts
# vLLM's own buckets for vllm:time_to_first_token_seconds
# fmt: off
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
# fmt: on
# what may change while the simulator runs (POST /sim/config); the cache's shape may not
TUNABLE = frozenset({"slow_factor", "ttft_base", "prefill_per_token", "decode_per_token", "decode_growth", "max_running", "max_waiting"})


def count_tokens(text: str) -> int:
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


class PrefixCache:
    """An LRU of prompt blocks, each keyed by a hash chained over every block before it."""

    _ROOT = bytes(16)

    def __init__(self, block_chars: int, capacity: int) -> None:
        self.block_chars = block_chars
        self.capacity = capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._blocks)

    def chain(self, text: str) -> list[bytes]:
        """The keys of the text's full blocks; a trailing partial block is never cached."""
        keys: list[bytes] = []
        parent = self._ROOT
        for start in range(0, len(text) - self.block_chars + 1, self.block_chars):
            parent = hashlib.blake2b(parent + text[start : start + self.block_chars].encode(), digest_size=16).digest()
            keys.append(parent)
        return keys

    def hits(self, chain: Sequence[bytes], *, touch: bool) -> int:
        """How many leading blocks of `chain` are cached; `touch` marks them used."""
        count = 0
        while count < len(chain) and chain[count] in self._blocks:
            count += 1
        if touch:
            self._refresh(chain[:count])
        return count

    def insert(self, chain: Sequence[bytes]) -> None:
        self._refresh(chain)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()

    def _refresh(self, chain: Sequence[bytes]) -> None:
        # tail first, so a prefix's head is the most recently used: eviction eats chains from the end,
        # and what is left of a chain still hits (an evicted head would orphan its whole tail)
        for key in reversed(chain):
            self._blocks[key] = None
            self._blocks.move_to_end(key)


@dataclass
class Counters:
    """Cumulative since start or the last reset; in tokens unless said otherwise."""

    prefix_cache_queries: int = 0  # prompt tokens looked up on admission (with prefix caching on)
    prefix_cache_hits: int = 0  # of those, tokens found cached
    prompt_tokens: int = 0  # prompt tokens of requests whose prefill is done
    generation_tokens: int = 0
    requests_finished: int = 0  # requests that produced all their output tokens
    ttft_counts: list[int] = field(default_factory=lambda: [0] * (len(TTFT_BUCKETS) + 1))  # per bucket, the last is +Inf
    ttft_sum: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, seconds)] += 1
        self.ttft_sum += seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "requests_finished": self.requests_finished,
            "ttft_count": sum(self.ttft_counts),
            "ttft_sum": self.ttft_sum,
        }


@dataclass(eq=False)
class Request:
    """One request inside the engine, from arrival to its last token."""

    prompt: str
    max_tokens: int
    prompt_tokens: int = 0
    arrived: float = field(default_factory=time.monotonic)
    admitted: asyncio.Event = field(default_factory=asyncio.Event)
    chain: list[bytes] = field(default_factory=list)
    cached_tokens: int = 0
    generated: int = 0

    def __post_init__(self) -> None:
        self.prompt_tokens = count_tokens(self.prompt)


class QueueFull(Exception):
    pass


class Engine:
    """The scheduler, the prefix cache, the counters and the clock; no HTTP."""

    def __init__(self, params: SimParams) -> None:
        self.params = params
        self.cache = PrefixCache(params.block_chars, params.cache_blocks)
        self.counters = Counters()
        self.waiting: deque[Request] = deque()
        self.running: set[Request] = set()
        self._retuned = asyncio.Event()  # set (and replaced) when the params change: work in progress re-times itself

    def tune(self, **changes: Any) -> None:
        if unknown := changes.keys() - TUNABLE:
            raise ValueError(f"not tunable at run time: {', '.join(sorted(unknown))}")
        self.params = dataclasses.replace(self.params, **changes)
        retuned, self._retuned = self._retuned, asyncio.Event()
        retuned.set()
        self._admit()  # max_running may have grown

    def cached_tokens(self, request: Request, *, touch: bool = False) -> int:
        if not self.params.prefix_caching:
            return 0
        if not request.chain:
            request.chain = self.cache.chain(request.prompt)
        usable = (request.prompt_tokens - 1) // self.params.block_tokens  # the last prompt token is always computed
        return self.cache.hits(request.chain[:usable], touch=touch) * self.params.block_tokens

    @contextlib.asynccontextmanager
    async def admitted(self, request: Request) -> AsyncIterator[None]:
        """Wait in the FIFO queue for a running slot, hold it for the body, free it however the body ends."""
        full = self.params.max_waiting is not None and len(self.waiting) >= self.params.max_waiting
        if full and len(self.running) >= self.params.max_running:
            raise QueueFull
        self.waiting.append(request)
        self._admit()
        try:
            await request.admitted.wait()
            yield
        finally:
            if request in self.waiting:
                self.waiting.remove(request)
            self.running.discard(request)
            self._admit()

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.params.max_running:
            request = self.waiting.popleft()
            request.cached_tokens = self.cached_tokens(request, touch=True)
            if self.params.prefix_caching:
                self.counters.prefix_cache_queries += request.prompt_tokens
                self.counters.prefix_cache_hits += request.cached_tokens
            self.running.add(request)
            request.admitted.set()

    async def prefill(self, request: Request) -> None:
        """Compute the uncached part of the prompt; ends with the first output token."""
        await self._spend(self.params.ttft_base + self.params.prefill_per_token * (request.prompt_tokens - request.cached_tokens))
        if self.params.prefix_caching:
            self.cache.insert(request.chain)
        self.counters.prompt_tokens += request.prompt_tokens
        self.counters.observe_ttft(time.monotonic() - request.arrived)
        self._emit(request)

    async def decode(self, request: Request) -> None:
        params = self.params
        await self._spend(params.decode_per_token * (1 + params.decode_growth * (len(self.running) - 1)))
        self._emit(request)

    def _emit(self, request: Request) -> None:
        request.generated += 1
        self.counters.generation_tokens += 1
        if request.generated == request.max_tokens:
            self.counters.requests_finished += 1

    async def _spend(self, seconds: float) -> None:
        """Spend `seconds` of compute (at slow_factor 1); a new slow_factor applies to what is left."""
        left = seconds
        while left > 0:
            factor, retuned, started = self.params.slow_factor, self._retuned, time.monotonic()
            try:
                async with asyncio.timeout(left * factor):
                    await retuned.wait()
            except TimeoutError:
                return
            left -= (time.monotonic() - started) / factor

    @property
    def kv_cache_usage(self) -> float:
        block = self.params.block_tokens
        held = sum(-(-(r.prompt_tokens + r.generated) // block) for r in self.running)
        return min(1.0, held / self.params.cache_blocks)

    def reset(self, *, cache: bool = False) -> None:
        self.counters = Counters()
        if cache:
            self.cache.clear()


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class Ask:
    """What a completion request asks for, read from its body."""

    model: str | None
    prompt: str
    max_tokens: int | None
    stream: bool
    include_usage: bool


def chat_text(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list.", "messages")
    pieces: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces.extend(p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
        elif content is not None or not isinstance(message, dict):
            raise BadRequest("Each message must be an object whose `content` is a string or a list of parts.", "messages")
    return "\n".join(pieces)


def text_prompt(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("`prompt` must be a string (token ids and batches are not simulated).", "prompt")
    return prompt


def read_ask(body: Any, *, chat: bool) -> Ask:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("`model` must be a string.", "model")
    prompt = chat_text(body.get("messages")) if chat else text_prompt(body.get("prompt"))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest("`max_tokens` must be a positive integer.", "max_tokens")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("`stream_options` must be an object.", "stream_options")
    return Ask(model, prompt, max_tokens, bool(body.get("stream")), bool(options.get("include_usage")))


def error(
    status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> web.Response:
    """An error in OpenAI's shape."""
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}}, status=status)


class _Metrics(Collector):
    """vLLM's metric names, read from the engine at scrape time (so a reset is just new Counters)."""

    def __init__(self, engine: Engine, model: str, *, legacy_names: bool) -> None:
        self.engine = engine
        self.model = model
        self.usage_name = "vllm:gpu_cache_usage_perc" if legacy_names else "vllm:kv_cache_usage_perc"

    def collect(self) -> Iterable[Metric]:
        engine, counters, labels = self.engine, self.engine.counters, [self.model]
        gauges = {
            "vllm:num_requests_running": ("Number of requests in model execution batches.", len(engine.running)),
            "vllm:num_requests_waiting": ("Number of requests waiting to be processed.", len(engine.waiting)),
            self.usage_name: ("KV-cache usage. 1 means 100 percent usage.", engine.kv_cache_usage),
        }
        for name, (documentation, value) in gauges.items():
            gauge = GaugeMetricFamily(name, documentation, labels=["model_name"])
            gauge.add_metric(labels, value)
            yield gauge
        totals = {
            "vllm:prefix_cache_queries": ("Prefix cache queries, in terms of number of queried tokens.", counters.prefix_cache_queries),
            "vllm:prefix_cache_hits": ("Prefix cache hits, in terms of number of cached tokens.", counters.prefix_cache_hits),
            "vllm:prompt_tokens": ("Number of prefill tokens processed.", counters.prompt_tokens),
            "vllm:generation_tokens": ("Number of generation tokens processed.", counters.generation_tokens),
        }
        for name, (documentation, value) in totals.items():
            counter = CounterMetricFamily(name, documentation, labels=["model_name"])
            counter.add_metric(labels, value)
            yield counter
        histogram = HistogramMetricFamily(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels=["model_name"]
        )
        cumulative, buckets = 0, []
        for bound, count in zip([*map(str, TTFT_BUCKETS), "+Inf"], counters.ttft_counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        histogram.add_metric(labels, buckets, counters.ttft_sum)
        yield histogram


class VllmSimulator:
    """The engine behind a real aiohttp server; `async with VllmSimulator(["m"]) as sim: sim.url`."""

    def __init__(
        self,
        models: Sequence[str] = ("m",),
        params: SimParams | None = None,
        *,
        api_key: str | None = None,
        legacy_names: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not models:
            raise ValueError("serve at least one model name")
        self.models = list(models)
        self.engine = Engine(params or SimParams())
        self.api_key = api_key
        self.host = host
        self.port = port
        self.registry = CollectorRegistry()
        # several served names are aliases of one engine, and vLLM labels its metrics with the first
        self.registry.register(_Metrics(self.engine, self.models[0], legacy_names=legacy_names))
        self._runner: web.AppRunner | None = None
        self._in_flight: set[asyncio.Task[Any]] = set()

    # -- in-process reading and tuning --

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def params(self) -> SimParams:
        return self.engine.params

    @property
    def counters(self) -> Counters:
        return self.engine.counters

    @property
    def slow_factor(self) -> float:
        return self.engine.params.slow_factor

    @slow_factor.setter
    def slow_factor(self, value: float) -> None:
        self.engine.tune(slow_factor=value)

    def configure(self, **changes: Any) -> None:
        """Change timing or queue params at run time (see TUNABLE); ValueError or TypeError when invalid."""
        self.engine.tune(**changes)

    def reset(self, *, cache: bool = False) -> None:
        """Counters back to zero; with `cache`, an empty prefix cache too."""
        self.engine.reset(cache=cache)

    def cached_tokens(self, prompt: str) -> int:
        """How many of the prompt's tokens would hit the cache now; changes nothing."""
        return self.engine.cached_tokens(Request(prompt, 1))

    def stats(self) -> dict[str, Any]:
        engine = self.engine
        return {
            "models": self.models,
            "running": len(engine.running),
            "waiting": len(engine.waiting),
            "kv_cache_usage": engine.kv_cache_usage,
            "cached_blocks": len(engine.cache),
            **engine.counters.as_json(),
            "params": dataclasses.asdict(engine.params),
        }

    # -- lifecycle --

    async def start(self) -> int:
        app = web.Application(middlewares=[self._authenticate])
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/sim/config", self._configure)
        app.router.add_post("/sim/reset", self._reset)
        app.router.add_get("/sim/stats", self._stats)
        app.router.add_post("/sim/cached-prefix", self._cached_prefix)
        # handler_cancellation: a client that hangs up frees its running slot, as vLLM aborts the request
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        in_flight = list(self._in_flight)
        for task in in_flight:
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> VllmSimulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- HTTP --

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        guarded = request.path.startswith("/v1/") or request.path == "/metrics"  # real vLLM guards /v1 only
        if guarded and self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return error(401, "Incorrect API key provided.", code="invalid_api_key")
        response: web.StreamResponse = await handler(request)
        return response

    async def _list_models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.models[0],
                "parent": None,
                "max_model_len": self.params.max_model_len,
            }
            for name in self.models
        ]
        return web.json_response({"object": "list", "data": data})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)  # stop() cancels these, so it never waits on a simulated GPU
        try:
            return await self._answer(request, chat=request.path == "/v1/chat/completions")
        finally:
            self._in_flight.discard(task)

    async def _answer(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            ask = read_ask(await request.json(), chat=chat)
        except ValueError:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            return error(400, "The request body is not valid JSON.")
        except BadRequest as bad:
            return error(400, bad.message, param=bad.param)
        model = ask.model or self.models[0]  # vLLM serves its first name when the request names none
        if model not in self.models:
            return error(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
        work = Request(ask.prompt, ask.max_tokens or self.params.default_max_tokens)
        if work.prompt_tokens + work.max_tokens > self.params.max_model_len:
            return error(
                400,
                f"This model's maximum context length is {self.params.max_model_len} tokens. However, you requested "
                f"{work.prompt_tokens + work.max_tokens} tokens ({work.prompt_tokens} in the prompt, {work.max_tokens} in the completion).",
                param="messages" if chat else "prompt",
            )
        wire = Wire(chat=chat, model=model)
        try:
            async with self.engine.admitted(work):
                await self.engine.prefill(work)
                if ask.stream:
                    return await self._stream(request, work, wire, include_usage=ask.include_usage)
                while work.generated < work.max_tokens:
                    await self.engine.decode(work)
        except QueueFull:
            return error(503, "The server is overloaded: the waiting queue is full.", kind="server_error")
        body = wire.completion(OUTPUT_TOKEN * work.generated, usage(work))
        return web.json_response(body, headers={CACHED_HEADER: str(work.cached_tokens)})

    async def _stream(self, request: web.Request, work: Request, wire: Wire, *, include_usage: bool) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", CACHED_HEADER: str(work.cached_tokens)}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        try:
            while True:
                last = work.generated == work.max_tokens
                await response.write(event(wire.chunk(OUTPUT_TOKEN, first=work.generated == 1, finish="length" if last else None)))
                if last:
                    break
                await self.engine.decode(work)
            if include_usage:
                await response.write(event(wire.usage_chunk(usage(work))))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:  # the client went away; leaving frees the slot
            pass
        return response

    async def _configure(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ValueError("the body must be a JSON object")
            self.configure(**changes)
        except (ValueError, TypeError) as bad:
            return error(400, str(bad))
        return web.json_response(dataclasses.asdict(self.params))

    async def _reset(self, request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return error(400, "The request body is not valid JSON.")
        self.reset(cache=bool(isinstance(body, dict) and body.get("cache")))
        return web.json_response(self.stats())

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _cached_prefix(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise BadRequest("The request body must be a JSON object.")
            prompt = chat_text(body["messages"]) if "messages" in body else body.get("prompt")
            if not isinstance(prompt, str):
                raise BadRequest("Send `prompt` (a string) or `messages`.", "prompt")
        except ValueError:
            return error(400, "The request body is not valid JSON.")
        except BadRequest as bad:
            return error(400, bad.message, param=bad.param)
        return web.json_response({"cached_tokens": self.cached_tokens(prompt), "prompt_tokens": count_tokens(prompt)})


@dataclass(frozen=True)
class Wire:
    """The OpenAI bodies of one answer: chat or text completion."""

    chat: bool
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def _head(self, obj: str) -> dict[str, Any]:
        prefix = "chatcmpl-" if self.chat else "cmpl-"
        return {"id": prefix + self.id, "object": obj, "created": self.created, "model": self.model}

    def completion(self, text: str, usage: dict[str, Any]) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {**self._head("chat.completion" if self.chat else "text_completion"), "choices": [choice], "usage": usage}

    def chunk(self, text: str, *, first: bool, finish: str | None) -> dict[str, Any]:
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk" if self.chat else "text_completion"), "choices": [], "usage": usage}


def usage(work: Request) -> dict[str, Any]:
    return {
        "prompt_tokens": work.prompt_tokens,
        "completion_tokens": work.generated,
        "total_tokens": work.prompt_tokens + work.generated,
        "prompt_tokens_details": {"cached_tokens": work.cached_tokens},
    }


def event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


# -- command line --


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulator.vllm", description="A vLLM-like OpenAI server (see docs/simulator.md).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", action="append", dest="models", help="a served model name (repeat for aliases); default m")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--legacy-names", action="store_true", help="vllm:gpu_cache_usage_perc instead of vllm:kv_cache_usage_perc")
    for spec in dataclasses.fields(SimParams):
        flag = "--" + spec.name.replace("_", "-")
        if isinstance(spec.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=spec.default)
        else:
            parser.add_argument(
                flag, type=int if spec.default is None else type(spec.default), default=spec.default, help=f"default {spec.default}"
            )
    return parser


async def _serve(arguments: argparse.Namespace) -> None:
    params = SimParams(**{spec.name: getattr(arguments, spec.name) for spec in dataclasses.fields(SimParams)})
    sim = VllmSimulator(
        arguments.models or ["m"],
        params,
        api_key=arguments.api_key,
        legacy_names=arguments.legacy_names,
        host=arguments.host,
        port=arguments.port,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    async with sim:
        print(f"vllm_sim serving {', '.join(sim.models)} on {sim.url}", flush=True)
        await stopping.wait()


def _vllm_arguments() -> argparse.ArgumentParser:
    """`serve`: vLLM's own command line (`vllm serve`), as Jetway renders it for an engine image. The flags the
    simulator models map onto its parameters; every other vLLM flag (`--gpu-memory-utilization 0.9`, say) is
    accepted and has no effect."""
    parser = argparse.ArgumentParser(prog="vllm_sim.py serve", description="vLLM's flags, served by the simulator.")
    parser.add_argument("--model", default="m", help="the model; its name unless --served-model-name is given")
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default="0.0.0.0")  # vLLM listens on every interface unless told
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--max-model-len", type=int, default=SimParams.max_model_len)
    parser.add_argument("--max-num-seqs", type=int, default=SimParams.max_running)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    return parser


def vllm_command_line(argv: Sequence[str]) -> argparse.Namespace:
    """vLLM's flags as the simulator's own arguments (what `main(["serve", ...])` serves)."""
    given, _ignored = _vllm_arguments().parse_known_args(argv)
    arguments = _arguments().parse_args([])
    arguments.models = given.served_model_name or [given.model]
    arguments.host, arguments.port, arguments.api_key = given.host, given.port, given.api_key
    arguments.max_model_len, arguments.max_running = given.max_model_len, given.max_num_seqs
    arguments.prefix_caching = given.enable_prefix_caching
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        asyncio.run(_serve(vllm_command_line(argv[1:])))
    else:
        asyncio.run(_serve(_arguments().parse_args(argv)))


if __name__ == "__main__":
    main()
