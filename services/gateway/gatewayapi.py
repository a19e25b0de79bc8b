"""The gateway service's control plane (Kubernetes mode): each running ModelDeployment's
InferencePool, endpoint picker and HTTPRoute, the Gateway's cross-namespace allowedRoutes,
`GatewayReady` and `status.gateway`, and the deployment's member of Jetway's own router.

Decisions are made in `control` (pure); this is where they meet the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

import msgspec

from contracts.cluster import DISCOVERY, OBSERVED, deleted_by_hand
from contracts.conditions import same_decision
from contracts.events import Decision, Envelope
from contracts.gateway import GatewayReconciled
from contracts.gatewayapi import GatewayView
from contracts.objects import ref as reference
from contracts.providerconfig import EngineGateway
from contracts.subjects import GATEWAY_API, SELECTOR, WATCHER, WORKLOAD, Key, kind_filter
from runtime.desired import withdraw
from runtime.kube import Kube, KubeError
from runtime.kubewriter import KubeWriter, NotServed, ResourceConflict
from runtime.service import Effects, Service
from services.gateway import control
from services.gateway.apiprojection import GatewayApiState, RoutedDeployment

log = logging.getLogger("jetway.gateway.control")
SELF = GATEWAY_API


class GatewayApiService(Service):
    name = SELF
    consumes = (
        kind_filter("ModelDeployment"),
        kind_filter("ModelDeployment", SELECTOR),
        kind_filter("ModelDeployment", WORKLOAD),
        kind_filter("ModelDeployment", OBSERVED),
        kind_filter("ModelDeployment", SELF),
        kind_filter("InferenceProviderConfig"),
        kind_filter("Gateway", OBSERVED),
        DISCOVERY.subject(WATCHER),
    )

    def __init__(
        self,
        kube: Kube,
        *,
        configured_gateway: str | None = None,
        epp_image: str = control.DEFAULT_EPP_IMAGE,
        resync_interval: float | None = None,
    ) -> None:
        self.state = GatewayApiState()
        self.kube = kube
        self.writer = KubeWriter(kube)
        self.configured = configured_gateway
        self.epp_image = epp_image
        self.resync_interval = resync_interval  # level-triggered: hand-deleted objects come back

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope, SELF)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        key = envelope.key
        if key.kind == "ModelDeployment":
            return (key,) if envelope.facet != SELF else ()
        return list(self.state.deployments)  # a Gateway, a provider, the APIs served: any deployment may route differently

    def keys(self) -> Iterable[Key]:
        return list(self.state.deployments)

    def _capability(self, d: RoutedDeployment) -> EngineGateway | None:
        if d.selection is None:
            return None
        provider = self.state.providers.get(d.selection.provider)
        if provider is None:
            return None
        engines = (provider.capabilities.engines if provider.capabilities else None) or []
        engine = next((e for e in engines if e.name == d.selection.engine), None)
        return engine.gateway if engine else None

    async def reconcile(self, key: Key, effects: Effects) -> None:
        d = self.state.deployments.get(key)
        if d is None:
            return
        if d.applied is None or d.deleting:  # what Jetway created for it goes, and so does its routes' admission
            await withdraw(d, self.writer, effects, manager=SELF, then=self._unroute(d))
            return
        if d.paused:
            return
        inputs = control.Inputs(
            key,
            d.uid,
            d.generation,
            d.applied,
            d.running,
            d.endpoint,
            d.service_ip,
            self._capability(d),
            self.state.apis(),
            sorted(self.state.gateways.values(), key=lambda g: g.ref),
            self.configured,
            True,
            self.epp_image,
        )
        plan = control.plan(inputs)
        if plan is None:
            if isinstance(d.last, GatewayReconciled) and d.last.generation != d.generation:
                await effects.emit(key, control.regenerated(d.last, d.generation))  # kept as is, for the new generation
            return
        record: Decision = plan.decision
        previous = d.last.gateway if isinstance(d.last, GatewayReconciled) else ""
        held = d.last.held if d.last is not None else ()
        if effects.level or not same_decision(record, d.last) or deleted_by_hand(d.observed, held):
            record = await self._write(d, plan, inputs)
            routed = isinstance(record, GatewayReconciled) and record.reason == "GatewayConfigured"
            problem = await self._allowed_routes(key, plan.gateway, previous, routed)
            if problem:
                record = control.decision(
                    inputs, False, "GatewayPatchFailed", problem, gateway=plan.gateway, objects=[o for o in plan.objects()]
                )
            await self._remove_stale(d, record)
        if not same_decision(record, d.last):
            await effects.emit(key, record)

    async def _write(self, d: RoutedDeployment, plan: control.Plan, inputs: control.Inputs) -> Decision:
        written: list[dict[str, object]] = []
        gateway = plan.gateway
        if plan.provider_pool is not None:
            namespace, name = plan.provider_pool
            try:
                found = await self.kube.get_or_none(control.POOL_API, "InferencePool", name, namespace)
            except KubeError as exc:
                found, why = None, exc.message
            else:
                why = "it does not exist yet"
            if found is None:
                return control.decision(
                    inputs,
                    False,
                    "InferencePoolFailed",
                    f"waiting for the provider's InferencePool {namespace}/{name}: {why}",
                    gateway=gateway,
                )
        for write in plan.writes:
            try:
                await self.writer.apply(d.key, write.objects, manager=SELF)
            except (KubeError, ResourceConflict, NotServed) as exc:
                return control.decision(inputs, False, write.reason, str(exc), gateway=gateway, objects=written)
            written += write.objects
        if plan.member is not None:
            try:
                await self.writer.apply(d.key, [plan.member], manager=SELF)
            except ResourceConflict as exc:
                # Members are cluster-scoped and named after the deployment: another namespace's deployment of
                # the same name holds this one. It is not ours, so the decision does not claim it (or withdrawing
                # would delete the other's member).
                log.warning("%s: no router member: %s", d.key, exc)
                member = reference(plan.member)
                return msgspec.structs.replace(plan.decision, objects=tuple(o for o in plan.decision.objects if o != member))
            except (KubeError, NotServed) as exc:  # the router member is a convenience: say so, fail nothing
                log.warning("%s: no router member: %s", d.key, exc)
        return plan.decision

    async def _remove_stale(self, d: RoutedDeployment, record: Decision) -> None:
        if not isinstance(d.last, GatewayReconciled) or not isinstance(record, GatewayReconciled):
            return
        wanted = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in record.objects}
        stale = [o for o in d.last.objects if (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) not in wanted]
        if stale and not record.reason.endswith("Failed"):  # a failed write keeps what stands until it succeeds
            await self.writer.delete(stale, manager=SELF)

    def _unroute(self, d: RoutedDeployment) -> Callable[[Decision], Awaitable[str | None]]:
        """What follows a withdrawn deployment's objects: its Gateway no longer admits routes for it."""
        return lambda last: self._allowed_routes(d.key, None, last.gateway if isinstance(last, GatewayReconciled) else "", False)

    def _namespaces(self, ref: str, key: Key, routes_here: bool) -> set[str]:
        """Namespaces whose HTTPRoutes attach to Gateway `ref`, with this deployment's new decision counted."""
        others = {d.key.namespace for d in self.state.deployments.values() if d.key != key and self.state.routes_to(d, ref)}
        return others | ({key.namespace} if routes_here else set())

    async def _allowed_routes(self, key: Key, chosen: GatewayView | None, previous: str, routes_here: bool) -> str | None:
        """Cross-namespace routes need the Gateway's listeners to admit them; when none need it, our fields go.
        Returns why the chosen Gateway could not be patched, if it could not."""
        for ref in {g for g in (chosen.ref if chosen else "", previous) if g}:
            gateway = self.state.gateways.get(ref)
            if gateway is None:
                continue
            namespaces = self._namespaces(ref, key, routes_here and chosen is not None and ref == chosen.ref)
            cross = namespaces - {gateway.namespace}
            if cross and control.allows(gateway, namespaces):
                continue
            if not cross and not control.selects(gateway):
                continue  # nothing of ours to take back
            try:
                await self.writer.apply(
                    Key("Gateway", gateway.namespace, gateway.name), [control.allowed_routes(gateway, namespaces)], manager=SELF
                )
            except (KubeError, NotServed) as exc:
                log.warning("allowedRoutes of Gateway %s not written: %s", ref, exc)
                if chosen is not None and ref == chosen.ref:
                    return f"cannot admit routes from namespace {key.namespace} on Gateway {ref}: {exc}"
        return None


__all__ = ["SELF", "GatewayApiService"]
