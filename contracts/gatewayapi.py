"""Reading Gateway API Gateways, purely: which Gateway a deployment uses, which listener an agent
reaches it through, and the URL that makes.

A Gateway is known from the watcher's observation (`contracts.cluster.summarize`): its labels,
listeners, published addresses and each listener's conditions. Nothing here derives an
address from a Gateway's name: a Gateway name is not a Service DNS name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INFERENCE_GATEWAY_LABEL = "airunway.ai/inference-gateway"
READY_CONDITIONS = ("Accepted", "ResolvedRefs", "Programmed")
HTTP_PROTOCOLS = {"HTTP": "http", "HTTPS": "https"}


@dataclass(frozen=True)
class GatewayView:
    namespace: str
    name: str
    generation: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    listeners: tuple[dict[str, Any], ...] = ()
    addresses: tuple[str, ...] = ()
    listener_status: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, namespace: str, name: str, summary: dict[str, Any]) -> GatewayView:
        return cls(
            namespace,
            name,
            int(summary.get("generation") or 1),
            dict(summary.get("labels") or {}),
            tuple(summary.get("listeners") or ()),
            tuple(summary.get("addresses") or ()),
            dict(summary.get("listenerStatus") or {}),
        )

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


# --- which Gateway --------------------------------------------------------------------------


@dataclass(frozen=True)
class NoGateway:
    message: str


def choose_gateway(gateways: list[GatewayView], configured: str | None = None) -> GatewayView | NoGateway:
    """The configured Gateway ("namespace/name"), else the only one, else the one labelled
    `airunway.ai/inference-gateway: "true"`; otherwise why none could be chosen."""
    if configured:
        found = next((g for g in gateways if g.ref == configured), None)
        return found or NoGateway(f"the configured Gateway {configured} does not exist")
    if not gateways:
        return NoGateway("no Gateway resources found in the cluster")
    if len(gateways) == 1:
        return gateways[0]
    labelled = sorted((g for g in gateways if g.labels.get(INFERENCE_GATEWAY_LABEL) == "true"), key=lambda g: g.ref)
    if not labelled:
        return NoGateway(f"{len(gateways)} Gateways found but none labelled {INFERENCE_GATEWAY_LABEL}=true")
    if len(labelled) > 1:
        return NoGateway(
            f"{len(labelled)} Gateways are labelled {INFERENCE_GATEWAY_LABEL}=true ({', '.join(g.ref for g in labelled)}); "
            "label exactly one, or configure one"
        )
    return labelled[0]


# --- which listener, and the URL ------------------------------------------------------------


def compatible(listener: dict[str, Any]) -> bool:
    """An HTTP(S) listener that accepts HTTPRoutes (the default for HTTP and HTTPS)."""
    if listener.get("protocol") not in HTTP_PROTOCOLS:
        return False
    kinds = ((listener.get("allowedRoutes") or {}).get("kinds")) or []
    return not kinds or any(
        k.get("kind") == "HTTPRoute" and k.get("group", "gateway.networking.k8s.io") == "gateway.networking.k8s.io" for k in kinds
    )


def not_ready(gateway: GatewayView, listener: str) -> list[str]:
    """The conditions among Accepted, ResolvedRefs and Programmed that the listener does not report
    as currently true (a condition observed for an older generation is not current)."""
    conditions = gateway.listener_status.get(listener, {})
    missing = []
    for type_ in READY_CONDITIONS:
        found = conditions.get(type_) or {}
        observed = found.get("observedGeneration")
        if found.get("status") != "True" or (observed is not None and observed < gateway.generation):
            missing.append(type_)
    return missing


@dataclass(frozen=True)
class Unresolved:
    reason: str
    message: str


def listener_url(gateway: GatewayView, listener: dict[str, Any]) -> str | Unresolved:
    """`scheme://authority:port/v1`: the listener's concrete hostname, else a published address."""
    scheme = HTTP_PROTOCOLS[listener["protocol"]]
    hostname = listener.get("hostname")
    if hostname and "*" in hostname:
        return Unresolved(
            "WildcardListenerHostname",
            f"listener {listener['name']} of Gateway {gateway.ref} has the wildcard hostname "
            f"{hostname}, which cannot identify one model endpoint; use a listener with a concrete hostname",
        )
    authority = hostname or (gateway.addresses[0] if gateway.addresses else "")
    if not authority:
        return Unresolved("GatewayAddressPending", f"Gateway {gateway.ref} has not published an address yet")
    if ":" in authority and not authority.startswith("["):
        authority = f"[{authority}]"  # an IPv6 address
    return f"{scheme}://{authority}:{listener['port']}/v1"


def select_listener(gateway: GatewayView, name: str | None) -> dict[str, Any] | Unresolved:
    """The listener an agent binds through: the named one, or the only compatible one; it must be ready."""
    usable = [item for item in gateway.listeners if compatible(item)]
    if name:
        chosen = next((item for item in gateway.listeners if item.get("name") == name), None)
        if chosen is None:
            return Unresolved("ListenerNotFound", f"Gateway {gateway.ref} has no listener named {name}")
        if not compatible(chosen):
            return Unresolved(
                "ListenerNotCompatible", f"listener {name} of Gateway {gateway.ref} is not an HTTP(S) listener for HTTPRoutes"
            )
    elif not usable:
        return Unresolved("NoCompatibleListener", f"Gateway {gateway.ref} has no HTTP(S) listener that accepts HTTPRoutes")
    elif len(usable) > 1:
        names = ", ".join(str(item.get("name")) for item in usable)
        return Unresolved(
            "ListenerNameRequired",
            f"Gateway {gateway.ref} has {len(usable)} HTTP(S) listeners ({names}): set gatewayRef.listenerName to choose one",
        )
    else:
        chosen = usable[0]
    missing = not_ready(gateway, chosen["name"])
    if missing:
        return Unresolved(
            "ListenerNotReady", f"listener {chosen['name']} of Gateway {gateway.ref} does not report {', '.join(missing)} as true"
        )
    return chosen


def ready_listeners(gateway: GatewayView) -> list[dict[str, Any]]:
    return [item for item in gateway.listeners if compatible(item) and not not_ready(gateway, item["name"])]


def normalize_endpoint(endpoint: str) -> str:
    """A published endpoint as an OpenAI base URL: a bare host gets http://, and /v1 is appended once."""
    text = endpoint.strip().rstrip("/")
    if not text.startswith(("http://", "https://")):
        text = f"http://{text}"
    return text if text.endswith("/v1") else f"{text}/v1"
