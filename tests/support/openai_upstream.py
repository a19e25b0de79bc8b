"""A real OpenAI-compatible HTTP server on 127.0.0.1, standing in for vLLM in tests.

It records every request (path, Authorization header, body), can require a bearer token,
can hold a stream open until the test releases it, and can be stopped abruptly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Seen:
    path: str
    authorization: str | None
    body: dict[str, Any] | None


@dataclass
class FakeOpenAI:
    name: str = "upstream"
    models: list[str] = field(default_factory=lambda: ["m"])
    token: str | None = None  # when set, requests without `Bearer <token>` get 401
    tls: ssl.SSLContext | None = None
    requests: list[Seen] = field(default_factory=list)
    hold: asyncio.Event | None = None  # streams pause after their first chunk until this is set
    models_status: int = 200
    redirect: tuple[int, str] | None = None  # completions answer this status with this Location
    endless_models: bool = False  # GET /v1/models sends a 200 and a body that never ends
    models_sent: int = 0  # the most bytes one endless model list got written before its client went away
    stream_bytes: int = 0  # when set, a stream is this many bytes of SSE chunks (then [DONE])
    streams_done: int = 0  # streams written to their end
    closed_early: int = 0  # held streams whose client (the router) hung up while they were held
    _runner: web.AppRunner | None = None
    port: int = 0
    host: str = "127.0.0.1"  # any loopback address (127.0.0.0/8), to serve a fixed port without a clash

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def completions(self) -> list[Seen]:
        return [r for r in self.requests if r.path != "/v1/models"]

    def _authorized(self, request: web.Request) -> bool:
        return self.token is None or request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _models(self, request: web.Request) -> web.Response:
        self.requests.append(Seen(request.path, request.headers.get("Authorization"), None))
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        if self.endless_models:
            return await self._endless(request)
        if self.models_status != 200:
            return web.json_response({"error": {"message": "broken"}}, status=self.models_status)
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"} for m in self.models]})

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        chunk = b'{"object": "list", "data": [' + b'{"id": "m", "object": "model"}, ' * 2048
        sent = 0
        try:
            while True:
                await response.write(chunk)
                sent += len(chunk)
                self.models_sent = max(self.models_sent, sent)
        except (ConnectionError, RuntimeError):  # the prober hung up: what it had to do
            pass
        return response

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Seen(request.path, request.headers.get("Authorization"), body))
        if not self._authorized(request):
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        if self.redirect is not None:
            status, location = self.redirect
            return web.json_response({"moved": location}, status=status, headers={"Location": location})
        chat = request.path.endswith("chat/completions")
        text = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        reply = f"{self.name}: {text}"
        if not body.get("stream"):
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                if chat
                else {"index": 0, "text": reply, "finish_reason": "stop"}
            )
            return web.json_response(
                {
                    "id": "x",
                    "object": "chat.completion" if chat else "text_completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if self.stream_bytes:
            event = f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': 'x' * 65000}}]})}\n\n".encode()
            for _ in range(0, self.stream_bytes, len(event)):
                await response.write(event)
        for i, word in enumerate(reply.split(" ")):
            delta = {"choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(delta)}\n\n".encode())
            if i == 0 and self.hold is not None and not await self._held(request, self.hold):
                self.closed_early += 1
                return response
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.streams_done += 1
        return response

    @staticmethod
    async def _held(request: web.Request, hold: asyncio.Event) -> bool:
        """Wait for `hold`; False as soon as the client hangs up instead (aiohttp drops the transport)."""
        while not hold.is_set():
            if request.transport is None or request.transport.is_closing():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hold.wait(), 0.02)
        return True

    async def start(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
