"""The gateway service's control plane (Kubernetes mode): each running ModelDeployment's
InferencePool, endpoint picker and HTTPRoute, `GatewayReady` and `status.gateway`, and the
deployment's member of Jetway's own router; and each Gateway's cross-namespace allowedRoutes.

A Gateway's admission is one aggregate over every deployment routing through it, whatever its
namespace's partition: the shard of the global partition alone decides it (it follows every
partition's decisions, `everywhere`), records it on the Gateway (`RoutesAdmitted`), and a
deployment whose namespace the Gateway could not be made to admit is `GatewayPatchFailed`.

Decisions are made in `control` (pure); this is where they meet the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import msgspec

from contracts.cluster import DISCOVERY, OBSERVED, deleted_by_hand
from contracts.conditions import same_decision
from contracts.events import Decision, Envelope
from contracts.gateway import GatewayReconciled, RoutesAdmitted
from contracts.objects import ref as reference
from contracts.providerconfig import EngineCapability, EngineGateway
from contracts.subjects import GATEWAY, SCALER, SELECTOR, WATCHER, WORKLOAD, Key, kind_filter
from runtime.desired import withdraw
from runtime.kube import Kube, KubeError
from runtime.kubewriter import KubeWriter, NotServed, ResourceConflict
from runtime.service import Effects, Service
from services.gateway import decide
from services.gateway.projection import GatewayState, RoutedDeployment

log = logging.getLogger("jetway.gateway.control")
SELF = GATEWAY


class GatewayService(Service):
    name = SELF
    consumes = (
        kind_filter("ModelDeployment"),
        kind_filter("ModelDeployment", SELECTOR),
        kind_filter("ModelDeployment", WORKLOAD),
        kind_filter("ModelDeployment", OBSERVED),
        kind_filter("ModelDeployment", SCALER),  # at zero, its router member stands
        kind_filter("ModelDeployment", SELF),
        kind_filter("InferenceProviderConfig"),
        kind_filter("Gateway", OBSERVED),
        kind_filter("InferencePool", OBSERVED),  # the providers' own pools, which a deployment may route to
        DISCOVERY.subject(WATCHER),
    )
    everywhere = (kind_filter("ModelDeployment", SELF),)  # every deployment's routing, for the Gateways' admission

    def __init__(
        self,
        kube: Kube,
        *,
        configured_gateway: str | None = None,
        epp_image: str = decide.DEFAULT_EPP_IMAGE,
        resync_interval: float | None = None,
    ) -> None:
        self.state = GatewayState()
        self.kube = kube
        self.writer = KubeWriter(kube)
        self.configured = configured_gateway
        self.epp_image = epp_image
        self.resync_interval = resync_interval  # level-triggered: hand-deleted objects come back
        self._rerouted: set[str] = set()  # the Gateways the last folded decision moved a deployment off or onto

    def fold(self, envelope: Envelope) -> None:
        before = self.state.routing.get(envelope.key)
        self.state.fold(envelope, SELF)
        self._rerouted = {g for g in (before, self.state.routing.get(envelope.key)) if g}

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        key = envelope.key
        if key.kind == "ModelDeployment":
            if envelope.facet == SELF:  # its routing may have moved: the Gateways it left and joined decide again
                return [_gateway_key(ref) for ref in self._rerouted]
            return (key,)
        if key.kind == "Gateway" and envelope.facet == SELF:  # an admission decided: the deployments it concerns
            return [k for k in self.state.routed_through(f"{key.namespace}/{key.name}") if k in self.state.deployments]
        if key.kind == "Gateway":
            return [key, *self.state.deployments]
        if key.kind == "InferencePool":  # a provider's pool came or went: the deployments routing to it
            pool = (key.namespace, key.name)
            return [k for k, d in self.state.deployments.items() if decide.provider_pool(k, self._capability(d)) == pool]
        return list(self.state.deployments)  # a provider, the APIs served: any deployment may route differently

    def keys(self) -> Iterable[Key]:
        return [*self.state.deployments, *(_gateway_key(ref) for ref in self.state.gateways)]

    def _engine(self, d: RoutedDeployment) -> EngineCapability | None:
        if d.selection is None:
            return None
        provider = self.state.providers.get(d.selection.provider)
        if provider is None:
            return None
        engines = (provider.capabilities.engines if provider.capabilities else None) or []
        return next((e for e in engines if e.name == d.selection.engine), None)

    def _capability(self, d: RoutedDeployment) -> EngineGateway | None:
        engine = self._engine(d)
        return engine.gateway if engine else None

    async def reconcile(self, key: Key, effects: Effects) -> None:
        if key.kind == "Gateway":
            await self._admit(key, effects)
            return
        d = self.state.deployments.get(key)
        if d is None:
            return
        if d.applied is None or d.deleting:  # what Jetway created for it goes (its Withdrawn ends its routes' admission)
            await withdraw(d, self.writer, effects, manager=SELF)
            return
        if d.paused:
            return
        inputs = decide.Inputs(
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
            tuple(engine.effective_api_formats()) if (engine := self._engine(d)) else (),
            self.state.pools.keys(),
            *decide.scale_state(d.applied, d.scale),
        )
        plan = decide.plan(inputs)
        if plan is None:
            if isinstance(d.last, GatewayReconciled) and d.last.generation != d.generation:
                await effects.emit(key, decide.regenerated(d.last, d.generation))  # kept as is, for the new generation
            return
        record: Decision = plan.decision
        held = d.last.held if d.last is not None else ()
        if effects.level or not same_decision(record, d.last) or deleted_by_hand(d.observed, held):
            record = await self._write(d, plan, inputs)
            await self._remove_stale(d, record)
        if isinstance(record, GatewayReconciled) and record.reason == "GatewayConfigured" and plan.gateway is not None:
            ref = plan.gateway.ref
            problem = decide.admission_problem(self.state.admitted.get(ref), key.namespace, ref)
            if problem:
                record = decide.decision(inputs, False, "GatewayPatchFailed", problem, gateway=plan.gateway, objects=list(plan.objects()))
        if not same_decision(record, d.last):
            await effects.emit(key, record)

    async def _write(self, d: RoutedDeployment, plan: decide.Plan, inputs: decide.Inputs) -> Decision:
        written: list[dict[str, object]] = []
        gateway = plan.gateway
        for write in plan.writes:
            try:
                await self.writer.apply(d.key, write.objects, manager=SELF)
            except (KubeError, ResourceConflict, NotServed) as exc:
                return decide.decision(inputs, False, write.reason, str(exc), gateway=gateway, objects=written)
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

    async def _admit(self, key: Key, effects: Effects) -> None:
        """A Gateway's cross-namespace admission for every deployment routing through it (the global shard's)."""
        ref = f"{key.namespace}/{key.name}"
        gateway = self.state.gateways.get(ref)
        if gateway is None:
            return
        namespaces = {k.namespace for k in self.state.routed_through(ref)}
        patch = decide.admission_patch(gateway, namespaces)
        error = ""
        if patch is not None:
            try:
                await self.writer.apply(key, [patch], manager=SELF)
            except (KubeError, NotServed) as exc:
                log.warning("allowedRoutes of Gateway %s not written: %s", ref, exc)
                error = str(exc)
        decision = RoutesAdmitted(namespaces=tuple(sorted(namespaces)), error=error)
        if not same_decision(decision, self.state.admitted.get(ref)):
            await effects.emit(key, decision)


def _gateway_key(ref: str) -> Key:
    namespace, _, name = ref.partition("/")
    return Key("Gateway", namespace, name)


__all__ = ["SELF", "GatewayService"]
