"""Who is calling, and what they may do: one `Gate` per way Jetway runs, the same routes behind both.

- `TokenGate` (`jetway up`): the apply API's bearer token, or a console session made from a one-time login
  code (services/console/logins.py). Whoever holds either may do anything: it is one user's machine.
- `KubeGate` (the console Deployment in a cluster): the user's own Kubernetes token, given at login and
  checked by the API server (services/console/kubeuser.py); what the console shows from the event stream is
  narrowed to what that user may `get`/`list`, and every change is made with that token.

Both refuse a change made with the session cookie but without `x-jetway-console: 1` (the CSRF guard) and
answer 401 to a request with neither credential.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from contracts.kinds import KINDS, KindInfo, resolve_kind
from contracts.subjects import Key
from runtime.resources import Resources, ResourceState
from services.console.kubeuser import KubeAsUser, KubeRefused
from services.console.logins import CONSOLE_HEADER, COOKIE, SESSION_TTL, Access, Logins, access

WHO_TTL = 60.0  # seconds a token's user is remembered (a revoked or expired token is refused within this)
KUBE_COOKIE = "jetway_cluster_session"  # not `jetway up`'s: both may be on 127.0.0.1 (cookies ignore the port)
MAX_KUBE_SESSIONS = 4096
SESSIONS_PER_USER = 8  # one user's new logins push out that user's oldest sessions, never another user's


@dataclass(frozen=True)
class Caller:
    """The credential a request came with: `via` "token" (a bearer token) or "session" (the console's cookie)."""

    via: str
    user: str = ""
    session: str = ""  # the cookie's session id, or a bearer token's digest: the key of cached decisions
    token: str = field(default="", repr=False)  # a cluster user's Kubernetes token; never logged or shown


CALLER = web.RequestKey("jetway_caller", Caller)  # set by the API's guard on every route it guards


class Denied(Exception):
    """A request the gate refuses: 401 (who?) or 403 (a cross-site change)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Gate(Protocol):
    async def caller(self, request: web.Request) -> Caller:
        """The request's caller; Denied when it has no valid credential."""
        ...

    async def may(self, caller: Caller, verb: str, info: KindInfo, namespace: str | None) -> bool:
        """Whether the caller may `verb` (get, list, ...) the kind in `namespace` (None: everywhere)."""
        ...


class Writes(Protocol):
    """Where changes go when not to the event log directly: the cluster console's Kubernetes, as the user."""

    async def apply(self, caller: Caller, manifest: object, *, dry_run: bool) -> web.Response: ...

    async def delete(self, caller: Caller, info: KindInfo, key: Key) -> web.Response: ...


def where(namespace: str) -> str:
    return f" in namespace {namespace!r}" if namespace else ""


def requested_key(request: web.Request, info: KindInfo) -> Key:
    """The resource a route names: `{name}` in the path, `?namespace=` (default "default") for a namespaced kind."""
    return Key(info.kind, (request.query.get("namespace") or "default") if info.namespaced else "", request.match_info["name"])


def known_kind(request: web.Request, fail: Callable[..., web.Response]) -> KindInfo | web.Response:
    """The kind a route's `{kind}` names (a name, plural or short name), or the 404 naming the known ones."""
    info = resolve_kind(request.match_info["kind"])
    if info is None:
        return fail(404, f"unknown kind {request.match_info['kind']!r} (known: {', '.join(KINDS)})", code="unknown_kind")
    return info


async def readable(request: web.Request, gate: Gate, fail: Callable[..., web.Response]) -> tuple[KindInfo, Key] | web.Response:
    """The kind and key a `{kind}/{name}` route names, once the caller may `get` it; else the answer: 404 for a kind
    Jetway does not know, 403 when the caller may not (the same words on every read route)."""
    info = known_kind(request, fail)
    if isinstance(info, web.Response):
        return info
    key = requested_key(request, info)
    if not await gate.may(request[CALLER], "get", info, key.namespace or None):
        return fail(403, f"you may not get {info.plural}{where(key.namespace)}", code="forbidden")
    return info, key


async def readable_resource(
    request: web.Request, gate: Gate, fail: Callable[..., web.Response], resources: Resources
) -> tuple[KindInfo, ResourceState] | web.Response:
    """What `readable` names, as the console's fold holds it; 404 when the fold holds no such resource."""
    found = await readable(request, gate, fail)
    if isinstance(found, web.Response):
        return found
    info, key = found
    state = resources.items.get(key)
    if state is None:
        return fail(404, f"{info.kind}/{key.name} not found{where(key.namespace)}", code="not_found")
    return info, state


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.startswith("Bearer ") else ""


def _verdict(request: web.Request, *, token_ok: bool, session_ok: bool) -> None:
    verdict = access(request.method, token_ok=token_ok, session_ok=session_ok, console_header=request.headers.get(CONSOLE_HEADER))
    if verdict is Access.UNAUTHORIZED:
        raise Denied(401, "missing or invalid bearer token or console session")
    if verdict is Access.CROSS_SITE:
        raise Denied(403, f"a change from a console session needs the header {CONSOLE_HEADER}: 1")


@dataclass
class TokenGate:
    """`jetway up`: the API token, or a session from a login code; either may do anything."""

    token: str
    logins: Logins
    clock: Callable[[], float] = time.monotonic

    async def caller(self, request: web.Request) -> Caller:
        given = bearer(request)
        token_ok = bool(given) and hmac.compare_digest(given.encode(), self.token.encode())
        session = request.cookies.get(COOKIE, "")
        _verdict(request, token_ok=token_ok, session_ok=not token_ok and self.logins.valid(session, self.clock()))
        return Caller("token") if token_ok else Caller("session", session=session)

    async def may(self, caller: Caller, verb: str, info: KindInfo, namespace: str | None) -> bool:
        return True


@dataclass
class KubeSession:
    user: str
    token: str = field(repr=False)
    until: float = 0.0
    checked: float = 0.0  # when the API server last took the token (it is asked again `recheck` seconds after)


@dataclass
class KubeGate:
    """A cluster: the user's Kubernetes token, as a bearer token or behind a session made at login."""

    kube: KubeAsUser
    clock: Callable[[], float] = time.monotonic
    session_ttl: float = SESSION_TTL
    cookie: str = KUBE_COOKIE
    recheck: float = WHO_TTL  # JETWAY_CONSOLE_RECHECK_SECONDS: how soon a revoked or expired token stops working
    sessions: OrderedDict[str, KubeSession] = field(default_factory=OrderedDict)
    known: OrderedDict[str, tuple[str, float]] = field(default_factory=OrderedDict)  # token digest → (user, until)

    async def login(self, token: str) -> tuple[str, str]:
        """A new session for a token the API server takes: (session id, user); KubeRefused otherwise."""
        user = await self.kube.who(token)
        session = secrets.token_urlsafe(32)
        now = self.clock()
        self.sessions[session] = KubeSession(user, token, now + self.session_ttl, now)
        for stale in [s for s, held in self.sessions.items() if held.until <= now]:
            self.end(stale)
        for extra in [s for s, held in self.sessions.items() if held.user == user][:-SESSIONS_PER_USER]:
            self.end(extra)
        while len(self.sessions) > MAX_KUBE_SESSIONS:
            self.end(next(iter(self.sessions)))
        return session, user

    def end(self, session: str | None) -> None:
        if session and self.sessions.pop(session, None) is not None:
            self.kube.forget(session)

    async def caller(self, request: web.Request) -> Caller:
        given = bearer(request)
        if given:
            digest = hashlib.sha256(given.encode()).hexdigest()
            now = self.clock()
            known = self.known.get(digest)
            if known is None or known[1] <= now:
                try:
                    user = await self.kube.who(given)
                except KubeRefused as exc:
                    raise Denied(401, "the Kubernetes API server does not take this token") from exc
                known = (user, now + self.recheck)
                self.known[digest] = known
                while len(self.known) > MAX_KUBE_SESSIONS:
                    self.known.popitem(last=False)
            return Caller("token", user=known[0], session=digest, token=given)
        session = request.cookies.get(self.cookie, "")
        held = self.sessions.get(session) if session else None
        now = self.clock()
        _verdict(request, token_ok=False, session_ok=held is not None and held.until > now)
        assert held is not None
        if held.checked + self.recheck <= now:  # every route, not only those that ask for access, stops with the token
            try:
                await self.kube.who(held.token)
            except KubeRefused as exc:
                if exc.status == 401:
                    self.end(session)
                    raise Denied(401, "the Kubernetes API server no longer takes this session's token; log in again") from exc
                raise
            held.checked = now
        return Caller("session", user=held.user, session=session, token=held.token)

    async def may(self, caller: Caller, verb: str, info: KindInfo, namespace: str | None) -> bool:
        try:
            return await self.kube.may(caller.session, caller.token, verb, info, namespace)
        except KubeRefused as exc:
            if exc.status == 401:  # the token expired or was revoked since the login
                self.end(caller.session)
                raise Denied(401, "the Kubernetes API server no longer takes this session's token; log in again") from exc
            raise


class Fail(Protocol):
    """services.console.api.error: the API's error body, so the console's errors read like every other."""

    def __call__(self, status: int, message: str, *, code: str, path: str | None = None) -> web.Response: ...
