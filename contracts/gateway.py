"""Events of the gateway service about InferencePoolMembers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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


# --- the control plane: a ModelDeployment's Gateway API Inference Extension objects --------------


class GatewayReconciled(Decision, frozen=True, tag="GatewayReconciled.v1"):
    """What the gateway service set up for a deployment: which Gateway, the objects it wrote (the
    InferencePool and endpoint picker, the HTTPRoute, a ReferenceGrant, the router member) and
    `GatewayReady` with `status.gateway` in its status slice."""

    gateway: str = ""  # "namespace/name" of the chosen Gateway, "" when none
    objects: tuple[dict[str, Any], ...] = ()  # references of what stands in the cluster for this decision
    reason: str = ""

    @property
    def held(self) -> tuple[dict[str, Any], ...]:
        return self.objects

    def describe(self) -> str:
        return (
            f"{self.reason}"
            + (f" via {self.gateway}" if self.gateway else "")
            + (f", {len(self.objects)} object(s)" if self.objects else "")
        )


register(GatewayReconciled)


class RoutesAdmitted(Decision, frozen=True, tag="RoutesAdmitted.v1"):
    """A Gateway's cross-namespace admission, decided once for every deployment routing through it (the
    gateway service's shard of the global partition holds it): the namespaces whose HTTPRoutes its
    listeners admit through Jetway's `allowedRoutes`, and `error`, why that could not be written."""

    namespaces: tuple[str, ...] = ()
    error: str = ""

    def describe(self) -> str:
        return f"routes from {', '.join(self.namespaces) or 'no namespace'}" + (f": {self.error}" if self.error else "")


register(RoutesAdmitted)
