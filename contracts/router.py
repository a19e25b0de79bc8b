"""Events of the router service: each InferencePoolMember's health as its prober found it, and the
not-stored signal that a member was just probed."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from contracts.events import Decision, register
from contracts.subjects import SIGNAL_PREFIX

PROBE_SIGNALS = f"{SIGNAL_PREFIX}.probed"


class MemberHealthChanged(Decision, frozen=True, tag="MemberHealthChanged.v1"):
    """A member's health as the prober last found it; recorded only when it changes."""

    healthy: bool = False
    reason: str = ""
    advertised: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    transport: str = "http-direct"
    saturated: bool = False  # its Saturated condition is True (services/router/load.py)

    def describe(self) -> str:
        return (
            ("healthy" if self.healthy else f"unhealthy: {self.reason}")
            + (" (saturated)" if self.saturated else "")
            + (f"; missing {', '.join(self.missing)}" if self.missing else "")
        )


register(MemberHealthChanged)


class ProbeSignal(msgspec.Struct, frozen=True):
    """Published (not stored) each time the prober reconciles a member: its last_reconciled_at."""

    subject: str
    at: datetime


def probe_signal(subject: str) -> bytes:
    return msgspec.json.encode(ProbeSignal(subject=subject, at=datetime.now(UTC)))
