"""One-time login codes and browser sessions, kept in memory (a restart logs every browser out).

A code is printed by `jetway up` or `jetway console` and redeemed once by `GET /ui/login?code=`, for a
session cookie; the API token itself never reaches a log, a URL or a page. Who may call what is decided
by `access`, a pure function of what the request carries.
"""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum

CODE_TTL = 600.0  # seconds a login code stays valid: long enough to copy it from a terminal
SESSION_TTL = 12 * 3600.0  # a working day; then `jetway console` again
MAX_CODES = 64  # codes not yet redeemed; the oldest go first (each is one API call with the token)
MAX_SESSIONS = 256
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CONSOLE_HEADER = "x-jetway-console"  # a cross-site form cannot set a custom header: the CSRF guard
COOKIE = "jetway_session"


class Access(Enum):
    ALLOWED = "allowed"
    UNAUTHORIZED = "unauthorized"  # neither the token nor a live session: 401
    CROSS_SITE = "cross_site"  # a session's change without the console's header: 403


def access(method: str, *, token_ok: bool, session_ok: bool, console_header: str | None) -> Access:
    """The bearer token may do anything; a session may read, and change only with the console's header."""
    if token_ok:
        return Access.ALLOWED
    if not session_ok:
        return Access.UNAUTHORIZED
    if method.upper() in SAFE_METHODS or console_header == "1":
        return Access.ALLOWED
    return Access.CROSS_SITE


def _expire(entries: OrderedDict[str, float], now: float, keep: int) -> None:
    for key in [k for k, until in entries.items() if until <= now]:
        del entries[key]
    while len(entries) > keep:
        entries.popitem(last=False)


@dataclass
class Logins:
    """Codes waiting to be redeemed and the sessions they became, each with when it expires (monotonic seconds)."""

    code_ttl: float = CODE_TTL
    session_ttl: float = SESSION_TTL
    codes: OrderedDict[str, float] = field(default_factory=OrderedDict)
    sessions: OrderedDict[str, float] = field(default_factory=OrderedDict)

    def issue(self, now: float) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = now + self.code_ttl
        _expire(self.codes, now, MAX_CODES)
        return code

    def redeem(self, code: str, now: float) -> str | None:
        """A new session for a valid code, which is spent; None for an unknown, spent or expired one."""
        _expire(self.codes, now, MAX_CODES)
        found = next((c for c in self.codes if hmac.compare_digest(c.encode(), code.encode())), None)
        if found is None:
            return None
        del self.codes[found]
        session = secrets.token_urlsafe(32)
        self.sessions[session] = now + self.session_ttl
        _expire(self.sessions, now, MAX_SESSIONS)
        return session

    def valid(self, session: str | None, now: float) -> bool:
        if not session:
            return False
        until = self.sessions.get(session)
        return until is not None and until > now

    def end(self, session: str | None) -> None:
        if session:
            self.sessions.pop(session, None)
