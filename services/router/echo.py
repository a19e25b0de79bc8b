"""The echo backend: answers with the text it was sent, in the OpenAI shapes, streamed word by word."""

from __future__ import annotations

import math
import re
import time
import uuid
from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode
_WORDS = re.compile(r"\S+\s*")


def _content_problem(content: Any, where: str) -> tuple[str, str] | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{where} must be a string, null or a list of content parts", where
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            return f"{at} must be an object with a 'type' (a content part)", at
        if not isinstance(part.get("type"), str):
            return f"{at}.type must be a string", f"{at}.type"
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            return f"{at}.text must be a string for a part of type 'text'", f"{at}.text"
    return None


def problem(body: dict[str, Any], chat: bool) -> tuple[str, str] | None:
    """(message, param) when the body is not what the OpenAI API accepts, checked before any byte
    is sent: answering must not fail half-way (a stream cannot turn into a 400 after its 200)."""
    if chat:
        for i, message in enumerate(body.get("messages") or []):
            where = f"messages[{i}]"
            if not isinstance(message, dict):
                return f"{where} must be an object with a 'role' and a 'content'", where
            if not isinstance(message.get("role"), str):
                return f"{where}.role must be a string", f"{where}.role"
            found = _content_problem(message.get("content"), f"{where}.content")
            if found:
                return found
    else:
        prompt = body.get("prompt")
        for i, item in enumerate(prompt if isinstance(prompt, list) else []):
            tokens = isinstance(item, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in item)
            if not (isinstance(item, str) or tokens or (isinstance(item, int) and not isinstance(item, bool))):
                return f"prompt[{i}] must be a string, a token id or a list of token ids", f"prompt[{i}]"
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return "stream_options must be an object", "stream_options"
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return ""


def text_of(body: dict[str, Any], chat: bool) -> str:
    """The last user message (chat) or the prompt (completions)."""
    if chat:
        for message in reversed(body.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                return _content_text(message.get("content"))
        return ""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""


def _usage(body: dict[str, Any], chat: bool, text: str) -> dict[str, int]:
    source = body.get("messages") if chat else body.get("prompt")
    prompt_chars = (
        sum(len(_content_text(m.get("content"))) for m in source if isinstance(m, dict)) if chat and isinstance(source, list) else len(text)
    )
    prompt = math.ceil(prompt_chars / 4)
    completion = len(_WORDS.findall(text))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def answer(body: dict[str, Any], model: str, chat: bool) -> bytes:
    text = text_of(body, chat)
    head = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-echo-{uuid.uuid4().hex[:24]}",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "jetway-echo",
    }
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": "stop"}
        return _encode({**head, "object": "chat.completion", "choices": [choice], "usage": _usage(body, chat, text)})
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
    return _encode({**head, "object": "text_completion", "choices": [choice], "usage": _usage(body, chat, text)})


def stream(body: dict[str, Any], model: str, chat: bool) -> list[bytes]:
    """Server-sent events, one per word, then a finish chunk, optional usage, and [DONE]."""
    text = text_of(body, chat)
    head = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-echo-{uuid.uuid4().hex[:24]}",
        "created": int(time.time()),
        "model": model,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "system_fingerprint": "jetway-echo",
    }

    def event(payload: dict[str, Any]) -> bytes:
        return b"data: " + _encode({**head, **payload}) + b"\n\n"

    events = []
    if chat:
        events.append(event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}))
    for word in _WORDS.findall(text):
        delta = (
            {"index": 0, "delta": {"content": word}, "finish_reason": None} if chat else {"index": 0, "text": word, "finish_reason": None}
        )
        events.append(event({"choices": [delta]}))
    final = {"index": 0, "delta": {}, "finish_reason": "stop"} if chat else {"index": 0, "text": "", "finish_reason": "stop"}
    events.append(event({"choices": [final]}))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        events.append(event({"choices": [], "usage": _usage(body, chat, text)}))
    events.append(b"data: [DONE]\n\n")
    return events
