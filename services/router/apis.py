"""The APIs the router forwards, the member formats they need, and their error shapes. Pure.

A member accepts a set of formats (docs/router.md, "API formats"):

    openai-chat         POST /v1/chat/completions, /v1/completions
    openai-responses    POST /v1/responses
    openai-embeddings   POST /v1/embeddings
    openai-audio        POST /v1/audio/transcriptions (multipart; the form field `model`)
    anthropic-messages  POST /v1/messages, /v1/messages/count_tokens (Anthropic's headers and error shape)
    vllm-tokenize       POST /tokenize, /detokenize
    vllm-rerank         POST /v1/rerank, /v1/score

An InferencePoolMember's `traits` reject unknown fields (the published schema), so a member states its
formats with labels, `formats.jetway.dev/<format>: "true"` to add one and `"false"` to take one away. A
`vllm-openai` member accepts every format but `anthropic-messages` unless its labels say otherwise; an `echo`
member accepts `openai-chat`. A member Jetway generates for a ModelDeployment carries labels from its
provider's `apiFormats` (services/gateway/decide.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from contracts.poolmember import FORMAT_LABEL

OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
OPENAI_EMBEDDINGS = "openai-embeddings"
OPENAI_AUDIO = "openai-audio"
ANTHROPIC_MESSAGES = "anthropic-messages"
VLLM_TOKENIZE = "vllm-tokenize"
VLLM_RERANK = "vllm-rerank"
FORMATS = (OPENAI_CHAT, OPENAI_RESPONSES, OPENAI_EMBEDDINGS, OPENAI_AUDIO, ANTHROPIC_MESSAGES, VLLM_TOKENIZE, VLLM_RERANK)
DEFAULT_FORMATS = {
    "vllm-openai": frozenset(FORMATS) - {ANTHROPIC_MESSAGES},
    "echo": frozenset({OPENAI_CHAT}),
}

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Api:
    """One forwarded path: the format a member needs for it, and how its answers look."""

    path: str
    format: str
    anthropic: bool = False  # Anthropic's error shape and headers
    multipart: bool = False  # the model is a form field, the body is passed through as sent
    prompt_field: str | None = None  # the body field that must be there for the router to route it ("messages", "prompt")
    generates: bool = True  # False for counting tokens: no context window to fit, no tokens spent from a key's budget


APIS: dict[str, Api] = {
    api.path: api
    for api in (
        Api("/v1/chat/completions", OPENAI_CHAT, prompt_field="messages"),
        Api("/v1/completions", OPENAI_CHAT, prompt_field="prompt"),
        Api("/v1/responses", OPENAI_RESPONSES),
        Api("/v1/embeddings", OPENAI_EMBEDDINGS),
        Api("/v1/audio/transcriptions", OPENAI_AUDIO, multipart=True),
        Api("/v1/messages", ANTHROPIC_MESSAGES, anthropic=True, prompt_field="messages"),
        Api("/v1/messages/count_tokens", ANTHROPIC_MESSAGES, anthropic=True, prompt_field="messages", generates=False),
        Api("/tokenize", VLLM_TOKENIZE),
        Api("/detokenize", VLLM_TOKENIZE),
        Api("/v1/rerank", VLLM_RERANK),
        Api("/v1/score", VLLM_RERANK),
    )
}


def formats_of(backend: str, labels: Mapping[str, str] | None) -> frozenset[str]:
    """The formats a member accepts: its backend's defaults, changed by its `formats.jetway.dev/*` labels."""
    accepted = set(DEFAULT_FORMATS.get(backend, frozenset({OPENAI_CHAT})))
    for name, value in (labels or {}).items():
        if name.startswith(FORMAT_LABEL):
            fmt = name[len(FORMAT_LABEL) :]
            if value == "true":
                accepted.add(fmt)
            elif value == "false":
                accepted.discard(fmt)
    return frozenset(accepted)


# --- errors ----------------------------------------------------------------------------------

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
}


def openai_error(status: int, message: str, kind: str, code: str, param: str | None = None) -> tuple[int, bytes]:
    return status, _encode({"error": {"message": message, "type": kind, "param": param, "code": code}})


def anthropic_error(status: int, message: str) -> tuple[int, bytes]:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return status, _encode({"type": "error", "error": {"type": kind, "message": message}})


def error(api: Api | None, status: int, message: str, kind: str, code: str, param: str | None = None) -> tuple[int, bytes]:
    """The error in the shape of the API the client called."""
    if api is not None and api.anthropic:
        return anthropic_error(status, message)
    return openai_error(status, message, kind, code, param)


# --- reading the model -------------------------------------------------------------------------


def boundary_of(content_type: bytes) -> bytes | None:
    """The boundary of a multipart/form-data content type, None when it is not one."""
    kind, _, rest = content_type.partition(b";")
    if kind.strip().lower() != b"multipart/form-data":
        return None
    for parameter in rest.split(b";"):
        name, _, value = parameter.strip().partition(b"=")
        if name.lower() == b"boundary" and value:
            value = value.strip()
            return value[1:-1] if value[:1] == b'"' and value[-1:] == b'"' else value
    return None


def form_field(body: bytes, boundary: bytes, name: str) -> str | None:
    """A text field of a multipart/form-data body (RFC 7578), None when it is not there or not text.

    Only the part headers are looked at until the field is found; the file parts are skipped, not copied."""
    delimiter = b"--" + boundary
    wanted = f'name="{name}"'.encode()
    start = body.find(delimiter)
    while start != -1:
        head_at = start + len(delimiter)
        if body[head_at : head_at + 2] == b"--":
            return None  # the closing delimiter
        head_end = body.find(b"\r\n\r\n", head_at)
        if head_end == -1:
            return None
        following = body.find(b"\r\n" + delimiter, head_end + 4)
        if following == -1:
            return None
        head = body[head_at:head_end]
        disposition = next((line for line in head.split(b"\r\n") if line.lower().startswith(b"content-disposition:")), b"")
        if any(part.strip() == wanted for part in disposition.split(b";")):
            try:
                return body[head_end + 4 : following].decode("utf-8")
            except UnicodeDecodeError:
                return None
        start = following + 2
    return None
