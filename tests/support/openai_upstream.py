"""A real OpenAI-compatible HTTP server on 127.0.0.1, standing in for vLLM in tests.

It serves what vLLM's OpenAI server does, in the shapes of the public APIs: chat and legacy completions,
responses, embeddings, audio transcriptions (multipart), Anthropic messages, tokenize/detokenize, rerank
and score; streamed where the API streams (SSE, with `event:` lines for responses and messages).
It records every request (path, Authorization header, the headers, body), can require a bearer token,
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
    headers: dict[str, str] = field(default_factory=dict)


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

    async def _other(self, request: web.Request) -> web.StreamResponse:
        """Every API but chat and completions: the shapes vLLM answers (and Anthropic's for /v1/messages)."""
        path = request.path
        if path == "/v1/audio/transcriptions":
            form = await request.post()
            upload = form.get("file")
            size = len(upload.file.read()) if isinstance(upload, web.FileField) else 0
            body: dict[str, Any] = {"model": form.get("model"), "file_bytes": size}
        else:
            body = await request.json()
        self.requests.append(Seen(path, request.headers.get("Authorization"), body, dict(request.headers)))
        if not self._authorized(request):
            if path == "/v1/messages":
                return web.json_response({"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}, status=401)
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        model = body.get("model")
        if path == "/v1/audio/transcriptions":
            return web.json_response({"text": f"{self.name}: heard {body['file_bytes']} bytes"})
        if path == "/v1/embeddings":
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [{"object": "embedding", "index": i, "embedding": [float(len(str(t))), 0.5, -0.25]} for i, t in enumerate(inputs)]
            return web.json_response(
                {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}}
            )
        if path == "/tokenize":
            text = body.get("prompt") or " ".join(str(m.get("content")) for m in body.get("messages", []))
            tokens = [ord(c) for c in text]
            return web.json_response({"count": len(tokens), "max_model_len": 4096, "tokens": tokens})
        if path == "/detokenize":
            return web.json_response({"prompt": "".join(chr(t) for t in body["tokens"])})
        if path == "/v1/rerank":
            documents = body["documents"]
            results = [{"index": i, "document": {"text": d}, "relevance_score": 1.0 / (i + 1)} for i, d in enumerate(documents)]
            return web.json_response({"id": "rerank-1", "model": model, "results": results, "usage": {"total_tokens": len(documents)}})
        if path == "/v1/score":
            return web.json_response(
                {"id": "score-1", "object": "list", "model": model, "data": [{"index": 0, "object": "score", "score": 0.75}]}
            )
        if path == "/v1/responses":
            return await self._response(request, body)
        if path == "/v1/messages/count_tokens":  # Anthropic's: one token a word here
            words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
            return web.json_response({"input_tokens": words})
        return await self._message(request, body)

    async def _events(self, request: web.Request, events: list[tuple[str, dict[str, Any]]]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for name, data in events:
            await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        await response.write_eof()
        self.streams_done += 1
        return response

    async def _response(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        text = body["input"] if isinstance(body["input"], str) else json.dumps(body["input"])
        reply = f"{self.name}: {text}"
        message = {"id": "msg-1", "type": "message", "role": "assistant", "status": "completed"}
        done = {
            "id": "resp-1",
            "object": "response",
            "created_at": int(time.time()),
            "model": body["model"],
            "status": "completed",
            "output": [{**message, "content": [{"type": "output_text", "text": reply, "annotations": []}]}],
            "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
        if not body.get("stream"):
            return web.json_response(done)
        started = {**done, "status": "in_progress", "output": []}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "sequence_number": 0, "response": started})
        ]
        for i, word in enumerate(reply.split(" ")):
            delta = {
                "type": "response.output_text.delta",
                "sequence_number": i + 1,
                "item_id": "msg-1",
                "output_index": 0,
                "content_index": 0,
            }
            events.append(("response.output_text.delta", {**delta, "delta": word + " ", "logprobs": []}))
        events.append(("response.completed", {"type": "response.completed", "sequence_number": len(events), "response": done}))
        return await self._events(request, events)

    async def _message(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        last = body["messages"][-1]["content"]
        reply = f"{self.name}: {last if isinstance(last, str) else json.dumps(last)}"
        usage = {"input_tokens": 4, "output_tokens": len(reply.split(" "))}
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "stop_sequence": None}
        if not body.get("stream"):
            return web.json_response({**message, "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn", "usage": usage})
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}},
                },
            ),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ]
        for word in reply.split(" "):
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word + " "}})
            )
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": usage}),
            ("message_stop", {"type": "message_stop"}),
        ]
        return await self._events(request, events)

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
        for path in ("/v1/responses", "/v1/embeddings", "/v1/audio/transcriptions", "/v1/messages", "/v1/messages/count_tokens"):
            app.router.add_post(path, self._other)
        for path in ("/tokenize", "/detokenize"):
            app.router.add_post(path, self._other)
        for path in ("/v1/rerank", "/v1/score"):
            app.router.add_post(path, self._other)
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
