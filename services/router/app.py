"""The router's application: its routes, the client's admission, and the dispatch of a request to a member.

    POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/audio/transcriptions,
         /v1/messages (Anthropic), /tokenize, /detokenize, /v1/rerank, /v1/score
                                         routed by the body's `model` (the form field for audio), streamed as sent
    GET  /v1/models, /v1/models/{id}     models that some ready member serves (a client key's allowed ones)
    GET  /metrics                        Prometheus (services/router/metrics.py); not here when client keys are required
    GET  /v1/chat/agents/operator        supports_multi_conversation: AND over every member, read live
    GET  /healthz, /livez, /readyz       alive; ready until the drain begins

`Routes` is the handler the HTTP/1.1 server (services/router/protocol.py) hands each request to. A request is
admitted by its client key (services/router/keys.py), read for its model, and sent to the member that
services/router/policy.py picks (the `x-jetway-route` response header says which and why); the answer is
relayed as it comes (services/router/relay.py). Errors are in the called API's shape: 400 malformed, 401
client keys, 404 unknown model or format, 400 over the context window (context_length_exceeded; estimated,
the estimate stated), 429 over a key's limit, 503 when no member can take it. A request for a model starting
from zero (a member marked scale-from-zero, none ready) is held until one is (services/router/hold.py). A member
that fails before answering is marked failed, re-probed, and the request retried once on another member.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from contracts.documents import DocumentError, load_json
from contracts.subjects import Key
from services.router import echo, hold, policy
from services.router.apis import APIS, Api, anthropic_error, boundary_of, form_field, openai_error
from services.router.apis import error as api_error
from services.router.fair import Fair
from services.router.keys import Admission, Gate, wants_anthropic_errors
from services.router.learn import Learner
from services.router.metrics import RECORDER, Recorder
from services.router.projection import Member, Members, Traffic
from services.router.protocol import HttpConnection, Request
from services.router.records import (
    BLOCKS,
    CANDIDATES,
    ELAPSED,
    KEY,
    MEMBER,
    PLACER,
    PREFIX,
    REASON,
    SCORE,
    SESSION,
    STATUS,
    TOKENS_IN,
    TOKENS_OUT,
    TTFT,
    Record,
    Records,
)
from services.router.relay import Relay
from services.router.signal import ClientTooSlow
from services.router.upstream import BeforeResponse, Endpoint, UpstreamError, UpstreamPool

log = logging.getLogger("jetway.router")
RESPONSE_TIMEOUT = 600.0  # a long generation may think for minutes before its first token
FORWARDED_REQUEST_HEADERS = {b"accept", b"user-agent", b"x-request-id", b"openai-organization", b"anthropic-version", b"anthropic-beta"}
_encode = msgspec.json.Encoder().encode


@dataclass
class Routes:
    """What the router needs from the router service, and nothing more; called with each request read whole."""

    members: Members
    credentials: Callable[[Key], tuple[Endpoint, str] | None]  # the endpoint and bearer token the last probe resolved
    on_failure: Callable[[Key, str], None]  # mark a member failed and ask for a probe
    signal: Any = None  # services.router.signal.SignalClient for operator-signal members
    pool: UpstreamPool = field(default_factory=UpstreamPool)
    settings: policy.Settings = field(default_factory=policy.Settings)
    keys: Gate | None = None  # None: any client may call (client keys off)
    recorder: Recorder = RECORDER
    holds: hold.Holds | None = None  # None: a request for a model with no ready member is a 503 at once
    fair: Fair | None = None  # None: no cap per member, no queue (services/router/fair.py)
    records: Records | None = None  # None: no routing records (services/router/records.py)
    learner: Learner | None = None  # None: no other replica learns from this one (services/router/learn.py)
    memory: policy.Memory = field(init=False)  # the prefix index, the sessions, the turn

    def __post_init__(self) -> None:
        self.memory = policy.Memory.of(self.settings)

    async def __call__(self, client: HttpConnection, request: Request) -> None:
        routes = self
        path, method = request.path.rstrip("/") or "/", request.method
        api = APIS.get(path)
        if api is not None:
            if method != "POST":
                client.respond(*api_error(api, 405, f"{path} accepts POST", "invalid_request_error", "method_not_allowed"))
                return
            await infer(routes, client, request, api)
        elif path == "/v1/models" and method == "GET":
            admission = await _admit(routes, client, request, None, None)
            if admission is not None:
                client.respond(200, models(routes, admission, anthropic=wants_anthropic_errors(request.headers)))
        elif path.startswith("/v1/models/") and method == "GET":
            model = unquote(path[len("/v1/models/") :])
            admission = await _admit(routes, client, request, None, model)
            if admission is not None:
                client.respond(*one_model(routes, admission, model, anthropic=wants_anthropic_errors(request.headers)))
        elif path == "/metrics" and method == "GET" and routes.keys is None:
            exposition = await asyncio.to_thread(generate_latest, REGISTRY)  # a few ms for a large registry: not on the loop
            client.respond(200, exposition, CONTENT_TYPE_LATEST.encode())
        elif path == "/v1/chat/agents/operator" and method == "GET":
            supports = all((m.spec.traits.supportsMultiConversation if m.spec.traits else True) for m in routes.members.items.values())
            client.respond(200, _encode({"id": "operator", "supports_multi_conversation": supports}))
        elif path in ("/healthz", "/livez") and method == "GET":
            client.respond(200, b'{"ok":true}')
        elif path == "/readyz" and method == "GET":
            draining = client.listener.draining
            client.respond(503 if draining else 200, b'{"ok":false,"draining":true}' if draining else b'{"ok":true}')
        elif path.startswith("/v1/messages/") or wants_anthropic_errors(request.headers):  # Anthropic's client, Anthropic's shape
            client.respond(*anthropic_error(404, f"no route {method} {request.path}"))
        else:
            client.respond(*openai_error(404, f"no route {method} {request.path}", "invalid_request_error", "not_found"))


OPEN = Admission()  # client keys off: every request is admitted, as no one


async def _admit(routes: Routes, client: HttpConnection, request: Request, api: Api | None, model: str | None) -> Admission | None:
    """The client key's admission, or None once its refusal is answered (401, 404, 429)."""
    keys = routes.keys
    if keys is None:
        return OPEN
    admission = keys.admit(request.headers, model, client.listener.loop.time())
    if admission.pending:  # the key's slice of its shared limits is spent: the ledger says (services/router/budget.py)
        admission = await keys.settle(admission, client.listener.loop.time())
    refusal = admission.refusal
    if refusal is None:
        return admission
    extra = refusal.headers()
    if refusal.status == 401:
        extra.append((b"www-authenticate", b"Bearer"))
    anthropic = (api is not None and api.anthropic) or wants_anthropic_errors(request.headers)
    client.respond(refusal.status, refusal.body(anthropic=anthropic), extra=extra)
    if admission.name:
        routes.recorder.key(admission.name, refusal.status, 0)
    return None


def _served(routes: Routes, admission: Admission) -> dict[str, list[str]]:
    """The models a member serves now, each with its members, as far as the client's key may see them."""
    served: dict[str, list[str]] = {}
    for member in routes.members.items.values():
        traffic = routes.members.traffic_of(member.key)
        for model in member.declared:
            if policy.serves(member, model, traffic):
                served.setdefault(model, []).append(member.name)
    allowed = set(routes.keys.models(admission, list(served))) if routes.keys is not None else served
    return {model: sorted(names) for model, names in sorted(served.items()) if model in allowed}


EPOCH = "1970-01-01T00:00:00Z"  # no model has a creation time here: Anthropic's list wants one, OpenAI's a 0


def _model_object(model: str, members: list[str], *, anthropic: bool) -> dict[str, Any]:
    if anthropic:
        return {"type": "model", "id": model, "display_name": model, "created_at": EPOCH}
    return {"id": model, "object": "model", "created": 0, "owned_by": "jetway", "members": members}


def models(routes: Routes, admission: Admission, *, anthropic: bool = False) -> bytes:
    """GET /v1/models: OpenAI's list, or Anthropic's (`has_more`, `first_id`, `last_id`) to a client sending its headers."""
    data = [_model_object(model, names, anthropic=anthropic) for model, names in _served(routes, admission).items()]
    if anthropic:
        ids = [d["id"] for d in data]
        return _encode({"data": data, "has_more": False, "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None})
    return _encode({"object": "list", "data": data})


def one_model(routes: Routes, admission: Admission, model: str, *, anthropic: bool = False) -> tuple[int, bytes]:
    """GET /v1/models/{id} (both SDKs' `models.retrieve`): a model served now that the key may use, else a 404."""
    served = _served(routes, admission)
    if model not in served:
        message = f"the model {model!r} does not exist or is not served now (GET /v1/models lists them)"
        if anthropic:
            return anthropic_error(404, message)
        return openai_error(404, message, "invalid_request_error", "model_not_found", "model")
    return 200, _encode(_model_object(model, served[model], anthropic=anthropic))


def _bad(api: Api, message: str, param: str | None = None) -> tuple[int, bytes]:
    return api_error(api, 400, message, "invalid_request_error", "invalid_request", param)


def _read(api: Api, request: Request) -> tuple[str, dict[str, Any] | None] | tuple[int, bytes]:
    """The model a request names and its JSON body (None for a form), or the 400 to answer."""
    if api.multipart:
        boundary = boundary_of(request.headers.get(b"content-type", b""))
        if boundary is None:
            return _bad(api, f"{api.path} takes a multipart/form-data body")
        model = form_field(request.body, boundary, "model")
        if not model:
            return _bad(api, "the form field 'model' is required", "model")
        return model, None
    try:
        body = load_json(request.body) if request.body else None  # depth-bounded (contracts/documents.py)
    except DocumentError as exc:
        return _bad(api, f"cannot read the request body: {exc}")
    if not isinstance(body, dict):
        return _bad(api, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _bad(api, "'model' is required and must be a string", "model")
    if api.prompt_field == "messages" and not isinstance(body.get("messages"), list):
        return _bad(api, "'messages' is required and must be a list", "messages")
    if api.prompt_field == "prompt" and not isinstance(body.get("prompt"), str | list):
        return _bad(api, "'prompt' is required and must be a string or a list", "prompt")
    return model, body


class InFlight:
    """One request counted in flight to its member until the member has answered it: ended before the client gets
    the last bytes (Relay.done), so a client's next request, to this replica or another, finds it gone (learn.py)."""

    __slots__ = ("learner", "traffic", "turn")

    def __init__(self, traffic: Traffic, learner: Learner | None, turn: int | None = None) -> None:
        traffic.outstanding += 1
        self.traffic: Traffic | None = traffic
        self.learner = learner
        self.turn = turn  # its placement's (contracts.routing.Placement.turn), said with the counts when it ends

    def end(self) -> None:
        traffic = self.traffic
        if traffic is not None:
            self.traffic = None
            traffic.outstanding -= 1
            learner = self.learner
            if learner is not None and learner.peers:  # alone, nothing to say
                learner.finished(self.turn)


async def infer(routes: Routes, client: HttpConnection, request: Request, api: Api) -> None:
    started = client.listener.loop.time()
    read = _read(api, request)
    if isinstance(read[0], int):
        client.respond(*read)
        return
    model, body = read
    admission = await _admit(routes, client, request, api, model)
    if admission is None:
        return
    records, settings = routes.records, routes.settings
    record: Record | None = None
    if records is not None and (records.every or records.wanted()):
        if records.settings is not settings:
            records.follow(settings)
        record = [started + records.wall, model, *records.defaults]  # `at`: on the wall clock, without reading it
    asked = policy.Prompt(body, policy.session_of(request.headers.get(b"x-session-id"), body), record is not None)
    member_name, tokens = "", 0
    try:
        member_name, tokens = await _dispatch(routes, client, request, api, model, body, started, asked, record)
    finally:
        ended = client.listener.loop.time()
        routes.recorder.answered(model, member_name, api.path, client.status, ended - started)
        key = admission.name
        if key:
            if not api.generates:
                tokens = 0  # counting tokens spends none
            elif not tokens and body is not None and api.prompt_field is not None and client.status == 200:
                tokens = policy.estimate(body, api.prompt_field == "messages").total  # no `usage` reported: the estimate counts
            routes.recorder.key(key, client.status, tokens)
            if routes.keys is not None:
                routes.keys.spend(admission, tokens, client.listener.loop.time())
        if record is not None and records is not None:
            # hashed here, after the answer, where a choice among members has not hashed it already
            record[BLOCKS] = asked.recorded(settings)
            record[SESSION] = asked.session_key
            record[STATUS], record[MEMBER], record[KEY], record[ELAPSED] = client.status, member_name, key, ended - started
            records.add(record)


async def _dispatch(
    routes: Routes,
    client: HttpConnection,
    request: Request,
    api: Api,
    model: str,
    body: dict[str, Any] | None,
    started: float,
    asked: policy.Prompt,
    record: Record | None = None,
    *,
    may_hold: bool = True,
) -> tuple[str, int]:
    """Choose a member and forward; (the member that answered, the tokens its `usage` reported)."""
    found = policy.candidates(routes.members, model, api.format)
    if not found.declared:
        message = f"the model {model!r} does not exist (no member declares it; GET /v1/models lists them)"
        client.respond(*api_error(api, 404, message, "invalid_request_error", "model_not_found", "model"))
        return "", 0
    if not found.accepted:
        message = f"no member that serves {model!r} accepts {api.path} (the {api.format} API format; docs/router.md, API formats)"
        client.respond(*api_error(api, 404, message, "invalid_request_error", "unsupported_api", "model"))
        return "", 0
    if not found.ready and routes.holds is not None and hold.holdable(routes.members.declaring(model), api.format):
        held = await _held(routes, routes.holds, client, request, api, model)
        if held is None:
            return "", 0
        found = held
    windowed = body if api.generates and api.prompt_field is not None else None  # counting tokens fits no window
    fitting, too_large = policy.fitting(found.ready, model, windowed, api.prompt_field == "messages")
    if too_large is not None:
        # a 400 as OpenAI's API and vLLM answer it (the SDKs raise BadRequestError; Anthropic's invalid_request_error)
        client.respond(*api_error(api, 400, too_large, "invalid_request_error", "context_length_exceeded", api.prompt_field))
        return "", 0
    if routes.fair is not None:  # every member at its cap: wait for a slot in the model's fair queue (fair.py)
        queued = await routes.fair.wait(routes.keys, client, request, api, model, body, fitting)
        if queued is None:
            return "", 0
        fitting = queued
    settings = routes.settings
    if record is not None:
        record[CANDIDATES] = (fitting[0].key.name,) if len(fitting) == 1 else [m.key.name for m in fitting]  # one: no list
    tried: set[Key] = set()
    last_error = "no member is ready (all unhealthy, draining or not yet probed)"
    for attempt in range(2):
        ready = [m for m in fitting if m.key not in tried]
        if not ready:
            break
        if attempt:
            routes.recorder.retried(model)
        learner = routes.learner
        placed = placer = None
        if learner is None or len(ready) == 1:
            member, choice = policy.pick(settings, routes.memory, ready, routes.members.traffic, asked)
        else:
            ended = learner.previous(asked, settings)
            # a new conversation among replicas is the placer's to decide, in turn with the others' (learn.py)
            if learner.peers and not attempt and ended is None and learner.new(asked, settings):
                placed = await learner.place(model, ready, asked, settings)
            if placed is not None:
                member, choice, placer = placed
            else:
                member, choice = policy.pick(settings, routes.memory, ready, routes.members.traffic, asked, ended)
                learner.saw(asked.session_key if asked.session_key is not None else asked.hashes[-1] if asked.hashes else None)
        # counted in flight before anything awaits: a placer answering another replica meanwhile sees this choice
        in_flight = InFlight(routes.members.traffic_of(member.key), learner)
        routes.recorder.chose(settings.policy, choice.reason)
        if record is not None:
            if choice is policy.ONLY and not attempt:  # the one member ready: the rest are still the record's defaults
                record[REASON] = "only"
            else:
                record[REASON], record[SCORE], record[PREFIX], record[PLACER] = choice.reason, choice.score, choice.prefix, placer or ""
        tried.add(member.key)
        try:
            if placed is not None:
                in_flight.turn = asked.session_key if asked.session_key is not None else asked.hashes[-1] if asked.hashes else None
            elif learner is not None and learner.peers:  # the other replicas learn where it went (services/router/learn.py)
                in_flight.turn = await learner.tell(model, member.name, asked.hashes, asked.session_key)
            header = policy.route_header(choice, settings.policy)
            relay = await forward(routes, client, request, member, body, model, api, header, in_flight.end)
            if relay is None:
                return member.name, 0
            prompt, completion = relay.usage()
            if prompt or completion:
                routes.recorder.used(model, member.name, prompt, completion)
            if record is not None:
                record[TOKENS_IN], record[TOKENS_OUT] = prompt, completion
                if relay.first_at:
                    record[TTFT] = relay.first_at - started
            if relay.first_at:
                routes.recorder.stream(model, member.name, relay.first_at - started, relay.events, relay.last_at - relay.first_at)
            return member.name, prompt + completion
        except BeforeResponse as exc:
            last_error = f"member {member.name}: {exc}"
            if not client.closed:
                routes.on_failure(member.key, str(exc))
        except ClientTooSlow as exc:  # the client's doing, not the member's: drop what waits for it
            log.warning("client dropped: %s", exc, extra={"member": member.name})
            client.abort(hard=True)
            return member.name, 0
        except UpstreamError as exc:  # failed after the client got bytes: nothing to retry
            if not client.closed:  # a client that left closed the upstream itself: not the member's failure
                routes.on_failure(member.key, str(exc))
            client.abort()
            return member.name, 0
        finally:
            in_flight.end()
            if routes.fair is not None:
                routes.fair.freed(member)  # its slot goes to the next request in fair order
    if may_hold and tried and not client.closed and routes.holds is not None and hold.holdable(routes.members.declaring(model), api.format):
        # its members were Healthy when last probed but refused the connection: a deployment that has just gone to zero
        # (the probe has not seen it yet). Held as if already known to be at zero, then routed again, once
        return await _dispatch(routes, client, request, api, model, body, started, asked, record, may_hold=False)
    message = f"no member can take a request for {model!r} now: {last_error}"
    routes.recorder.refused(model)
    client.respond(*api_error(api, 503, message, "server_error", "upstream_unavailable"), extra=[(b"retry-after", b"1")])
    return "", 0


async def _held(
    routes: Routes, holds: hold.Holds, client: HttpConnection, request: Request, api: Api, model: str
) -> policy.Candidates | None:
    """Wait for a member of a model starting from zero (services/router/hold.py): its candidates once one is ready,
    or None once the 503 is answered (the hold timed out, the queue was full, the router stops) or the client left."""
    loop = client.listener.loop
    deadline = loop.time() + holds.settings.hold_seconds
    request_id = request.headers.get(b"x-request-id", b"").decode("latin-1")
    while True:
        outcome = await holds.hold(model, api.format, client, deadline, request_id)
        if outcome == hold.RELEASED:
            found = policy.candidates(routes.members, model, api.format)
            if found.ready:
                return found
            continue  # not ready again by the time it ran: held on, to the same deadline
        if outcome != hold.GONE:
            message, code, retry = hold.refusal(model, outcome, holds.settings)
            routes.recorder.refused(model)
            client.respond(*api_error(api, 503, message, "server_error", code), extra=[(b"retry-after", str(retry).encode())])
        return None


async def forward(
    routes: Routes,
    client: HttpConnection,
    request: Request,
    member: Member,
    body: dict[str, Any] | None,
    model: str,
    api: Api,
    route_header: bytes,
    on_end: Callable[[], None] | None = None,
) -> Relay | None:
    """Send the request to `member` and relay its answer; the Relay (None for an echo member's own answer). `on_end`
    runs when the member has answered all of it, before the client has the last bytes."""
    name = member.name.encode()
    if member.spec.backend == "echo":
        chat = api.prompt_field == "messages"
        assert body is not None  # echo accepts openai-chat only: a JSON body
        found = echo.problem(body, chat)
        if found:
            client.respond(*_bad(api, *found))
            return None
        extra = [(b"x-jetway-member", name), (b"x-jetway-route", route_header)]
        if body.get("stream") is True:
            events = echo.stream(body, model, chat)  # all of it before the head: nothing can fail after a 200
            client.start(200, [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *extra], None)
            for event in events:
                client.write(event)
            client.end()
        else:
            client.respond(200, echo.answer(body, model, chat), extra=extra)
        return None
    content_type = request.headers.get(b"content-type", b"application/json") if api.multipart else b"application/json"
    headers = [(b"content-type", content_type)] + [(n, v) for n, v in request.headers.items() if n in FORWARDED_REQUEST_HEADERS]
    relay = Relay(client, member.name, route_header)
    relay.on_end = on_end
    if member.spec.transport == "operator-signal":
        if routes.signal is None:
            raise BeforeResponse("operator-signal transport is not available")
        await routes.signal.forward(member.spec.computeOperatorRef or "", request.method, request.path, headers, request.body, relay)
        return relay
    resolved = routes.credentials(member.key)
    if resolved is None:
        raise BeforeResponse("not probed yet")
    endpoint, token = resolved
    if token:
        headers.append((b"authorization", b"Bearer " + token.encode()))
        if api.anthropic:
            headers.append((b"x-api-key", token.encode()))  # Anthropic-style servers read this one
    try:
        await routes.pool.send(endpoint, request.method, request.path, headers, request.body, relay, response_timeout=RESPONSE_TIMEOUT)
    finally:
        client.upstream = None
    return relay
