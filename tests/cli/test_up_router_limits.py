"""`jetway up`'s router limits, set by flag and by environment, seen through raw sockets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.cli.test_up import jetway, start_up


async def answer_to(port: int, data: bytes) -> bytes:
    """What the router writes back before it closes the connection (bounded wait)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


async def test_router_timeouts_come_from_flags_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JETWAY_ROUTER_BODY_TIMEOUT", "0.5")
    up = await start_up(tmp_path / "jetway", "--router-header-timeout", "0.4")
    try:
        port = int(up.config()["router_url"].rsplit(":", 1)[1].split("/", 1)[0])
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        answer = await answer_to(port, head)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"] == "request headers not received within 0.4 s"
        answer = await answer_to(port, head + b"Content-Length: 50\r\n\r\n{")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"] == "request body not received within 0.5 s"
    finally:
        assert await up.stop() == 0, up.text


async def test_a_bad_router_limit_stops_jetway_up_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JETWAY_ROUTER_MAX_CONNECTIONS", "lots")
    code, _, err = await jetway(tmp_path / "jetway", "up", "--api-port", "0", "--router-port", "0")
    assert code == 2 and "JETWAY_ROUTER_MAX_CONNECTIONS must be a whole number, 1 or more (got 'lots')" in err and "Traceback" not in err
    monkeypatch.delenv("JETWAY_ROUTER_MAX_CONNECTIONS")
    code, _, err = await jetway(tmp_path / "jetway", "up", "--router-idle-timeout", "-1")
    assert code == 2 and "router idle timeout must be a positive number (got -1.0)" in err
