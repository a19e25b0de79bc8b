"""The binding service: agent frameworks' readiness, each AgentDeployment's model binding, and its workload."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.cluster import DISCOVERY, OBSERVED, deleted_by_hand
from contracts.conditions import carried, same_decision
from contracts.events import Envelope
from contracts.subjects import GATEWAY, WATCHER, WORKLOAD, Key, kind_filter
from runtime.desired import withdraw
from runtime.kube import KubeError
from runtime.kubewriter import NotServed, ResourceConflict
from runtime.service import Effects, Service
from runtime.writer import RecordedWriter, Writer
from services.binding import decide
from services.binding.projection import REPORTED, SELF, BindingState


class BindingService(Service):
    name = SELF
    consumes = (
        kind_filter("AgentDeployment"),
        kind_filter("AgentDeployment", OBSERVED),
        kind_filter("AgentDeployment", SELF),
        kind_filter("AgentProviderConfig"),
        kind_filter("AgentProviderConfig", REPORTED),
        kind_filter("AgentProviderConfig", SELF),
        kind_filter("ModelDeployment"),
        kind_filter("ModelDeployment", WORKLOAD),
        kind_filter("ModelDeployment", GATEWAY),
        kind_filter("Gateway", OBSERVED),
        DISCOVERY.subject(WATCHER),
    )

    def __init__(self, writer: Writer | None = None, *, resync_interval: float | None = None) -> None:
        self.state = BindingState()
        self.writer: Writer = writer or RecordedWriter()
        # Gateway-backed bindings are rechecked on every pass as well as on each Gateway change
        self.resync_interval = resync_interval

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        key = envelope.key
        if envelope.facet == SELF:
            return ()
        if key.kind == "AgentDeployment":
            return (key,)
        if key.kind == "AgentProviderConfig":
            return [key, *self.state.agents_of(key.name)]
        if key.kind == "ModelDeployment":
            return self.state.agents_on(key.namespace, key.name)
        return [*(Key("AgentProviderConfig", "", n) for n in self.state.frameworks), *self.state.agents]  # Gateways, discovery

    def keys(self) -> Iterable[Key]:
        return [*(Key("AgentProviderConfig", "", n) for n in self.state.frameworks), *self.state.agents]

    async def reconcile(self, key: Key, effects: Effects) -> None:
        if key.kind == "AgentProviderConfig":
            await self._framework(key, effects)
        elif key.kind == "AgentDeployment":
            await self._agent(key, effects)

    # --- frameworks ------------------------------------------------------------------------

    async def _framework(self, key: Key, effects: Effects) -> None:
        framework = self.state.frameworks.get(key.name)
        if framework is None:
            return
        decision = carried(decide.framework_assessed(framework.config, framework.generation, self.state.discovered), framework.last)
        if not same_decision(decision, framework.last):
            await effects.emit(key, decision)

    # --- agents ----------------------------------------------------------------------------

    async def _agent(self, key: Key, effects: Effects) -> None:
        agent = self.state.agents.get(key)
        if agent is None:
            return
        if agent.applied is None or agent.deleting:
            await withdraw(agent, self.writer, effects, manager=self.name)
            return
        if agent.paused:
            return
        framework = self.state.frameworks.get(agent.applied.spec.framework.name)
        decision, objects = decide.agent_reconciled(
            agent.applied,
            agent.generation,
            agent.uid,
            agent.observed,
            framework.view() if framework is not None else None,
            self.state.discovered,
            {k: m.view() for k, m in self.state.models.items()},
            self.state.gateways,
        )
        previous = agent.last.held if agent.last is not None else ()
        if objects and (effects.level or not same_decision(decision, agent.last) or deleted_by_hand(agent.observed, previous)):
            try:
                await self.writer.apply(key, objects, manager=self.name)
            except (ResourceConflict, NotServed, KubeError) as exc:
                decision = decide.failed(decision, "WorkloadFailed", str(exc))
                objects = []
        stale = decide.stale(previous, objects)
        if stale:
            await self.writer.delete(stale, manager=self.name)
        decision = carried(decision, agent.last)
        if not same_decision(decision, agent.last):
            await effects.emit(key, decision)
