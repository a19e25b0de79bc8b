"""Events of the gateway service: a ModelDeployment's Gateway API Inference Extension objects and a Gateway's
cross-namespace admission."""

from __future__ import annotations

from typing import Any

from contracts.events import Decision, register


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
