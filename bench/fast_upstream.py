"""A fast fake OpenAI upstream for router benchmarks: fixed answers, as little work as possible.

    python -m bench.fast_upstream --port 18001 [--chunks 16]

GET /v1/models lists model "m"; POST /v1/chat/completions answers a fixed completion, or,
when the body asks for `"stream": true`, a fixed SSE stream of `--chunks` chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httptools

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "bench"}]}).encode()
ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! This is a fixed answer."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
    }
).encode()


def sse(chunks: int) -> bytes:
    events = []
    for i in range(chunks):
        delta = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}],
        }
        events.append(b"data: " + json.dumps(delta).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


class Upstream(asyncio.Protocol):
    stream_body = b""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.url = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.body, self.url = [], b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        if self.url.startswith(b"/v1/models"):
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(MODELS), MODELS)
            )
        elif b'"stream": true' in b"".join(self.body) or b'"stream":true' in b"".join(self.body):
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + self.stream_body
            )
        else:
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
            )


async def main(port: int, chunks: int) -> None:
    Upstream.stream_body = sse(chunks)
    server = await asyncio.get_running_loop().create_server(Upstream, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=18001)
    parser.add_argument("--chunks", type=int, default=16)
    options = parser.parse_args()
    try:
        import uvloop

        uvloop.run(main(options.port, options.chunks))
    except ImportError:
        asyncio.run(main(options.port, options.chunks))
