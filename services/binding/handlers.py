"""The binding service: agent frameworks' readiness, each AgentDeployment's model binding, and its workload."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contracts.binding import AgentReconciled, FrameworkAssessed
from contracts.cluster import DISCOVERY, OBSERVED, deleted_by_hand
from contracts.conditions import carried, same_decision
from contracts.events import Envelope, StatusCondition, StatusSlice, Withdrawn
from contracts.objects import ref
from contracts.subjects import GATEWAY_API, WORKLOAD, Key, kind_filter
from runtime.kube import KubeError
from runtime.kubewriter import NotServed, ResourceConflict
from runtime.service import Effects, Service
from runtime.writer import RecordedWriter, Writer
from services.binding import decide, render
from services.binding.projection import REPORTED, SELF, Agent, BindingState

# Binding failures the user must fix (the agent is Failed); the others resolve by waiting (Pending).
PERMANENT = {
    "UnsupportedBindingMode",
    "CrossNamespaceRefNotAllowed",
    "InvalidExternalAPI",
    "WildcardListenerHostname",
    "ListenerNameRequired",
    "ListenerNotFound",
    "ListenerNotCompatible",
    "NoCompatibleListener",
}


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
        kind_filter("ModelDeployment", GATEWAY_API),
        kind_filter("Gateway", OBSERVED),
        DISCOVERY.subject("watcher"),
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
        readiness = decide.framework_readiness(framework.config, self.state.discovered)
        condition = StatusCondition.of("Ready", readiness.ready, readiness.reason, readiness.message, framework.generation)
        decision = carried(
            FrameworkAssessed(
                generation=framework.generation,
                ready=readiness.ready,
                reason=readiness.reason,
                status=StatusSlice(conditions=(condition,), fields={"ready": readiness.ready}),
            ),
            framework.last,
        )
        if not same_decision(decision, framework.last):
            await effects.emit(key, decision)

    # --- agents ----------------------------------------------------------------------------

    async def _agent(self, key: Key, effects: Effects) -> None:
        agent = self.state.agents.get(key)
        if agent is None:
            return
        if agent.agent is None or agent.deleting:
            if agent.last is not None and not isinstance(agent.last, Withdrawn):
                if isinstance(agent.last, AgentReconciled) and agent.last.objects:
                    await self.writer.delete(list(reversed(agent.last.objects)), manager=self.name)
                await effects.emit(key, Withdrawn(generation=agent.generation))
            return
        if agent.paused:
            return
        decision, objects = self._decide(agent)
        previous = agent.last.objects if isinstance(agent.last, AgentReconciled) else ()
        if objects and (effects.level or not same_decision(decision, agent.last) or self._gone(agent)):
            try:
                await self.writer.apply(key, objects, manager=self.name)
            except (ResourceConflict, NotServed, KubeError) as exc:
                decision = self._failed(agent, decision, "WorkloadFailed", str(exc))
                objects = []
        wanted = {(o["kind"], o["metadata"]["name"]) for o in objects}
        stale = [o for o in previous if (o["kind"], o["metadata"]["name"]) not in wanted]
        if stale:
            await self.writer.delete(stale, manager=self.name)
        decision = carried(decision, agent.last)
        if not same_decision(decision, agent.last):
            await effects.emit(key, decision)

    def _gone(self, agent: Agent) -> bool:
        return deleted_by_hand(agent.observed, agent.last.objects if isinstance(agent.last, AgentReconciled) else ())

    def _decide(self, agent: Agent) -> tuple[AgentReconciled, list[dict[str, Any]]]:
        """The agent's conditions, binding and workload objects (the status is what it will be once they are written)."""
        spec = agent.agent
        assert spec is not None
        generation = agent.generation
        name = spec.spec.framework.name
        framework = self.state.frameworks.get(name)
        fields: dict[str, Any] = {
            "framework": {"name": name, **({"providerVersion": framework.version} if framework and framework.version else {})}
        }
        if framework is None:
            readiness = decide.Readiness(False, "FrameworkNotFound", f"AgentProviderConfig {name} not found")
        else:
            readiness = decide.framework_readiness(framework.config, self.state.discovered)  # instructions already appended
        framework_ready = StatusCondition.of(
            "FrameworkReady", readiness.ready, "FrameworkReady" if readiness.ready else readiness.reason, readiness.message, generation
        )
        if not readiness.ready or framework is None:
            return self._status(
                agent,
                "Pending",
                "WaitingForFramework",
                [
                    framework_ready,
                    StatusCondition.of("ModelBound", False, "WaitingForFramework", "waiting for the framework", generation),
                    StatusCondition.of("Ready", False, "WaitingForFramework", "waiting for the framework", generation),
                ],
                fields,
            ), []
        outcome = decide.bind(spec, framework.config, {k: m.view() for k, m in self.state.models.items()}, self.state.gateways)
        if isinstance(outcome, decide.NotBound):
            phase = "Failed" if outcome.reason in PERMANENT else "Pending"
            return self._status(
                agent,
                phase,
                outcome.reason,
                [
                    framework_ready,
                    StatusCondition.of("ModelBound", False, outcome.reason, outcome.message, generation),
                    StatusCondition.of("Ready", False, outcome.reason, outcome.message, generation),
                ],
                fields,
            ), []
        fields["modelBinding"] = outcome.binding
        bound = StatusCondition.of("ModelBound", True, "ModelBound", outcome.message, generation)
        try:
            rendered = render.render(spec, framework.config, agent.uid, outcome.binding)
        except render.RenderError as exc:
            return self._status(
                agent,
                "Failed",
                exc.reason,
                [framework_ready, bound, StatusCondition.of("Ready", False, exc.reason, str(exc), generation)],
                fields,
                binding=outcome.binding,
            ), []
        fields["runtime"] = {"workloadRef": rendered.workload, **({"address": rendered.address} if rendered.address else {})}
        phase, reason, message, replicas = self._progress(agent, rendered.workload)
        if replicas is not None:
            fields["replicas"] = replicas
        ready = StatusCondition.of("Ready", phase in ("Running", "Completed"), reason, message, generation)
        return self._status(
            agent, phase, reason, [framework_ready, bound, ready], fields, binding=outcome.binding, objects=rendered.objects
        ), rendered.objects

    def _progress(self, agent: Agent, workload: dict[str, str]) -> tuple[str, str, str, dict[str, int] | None]:
        """(phase, reason, message, replicas) from what the cluster reports of the agent's primary object."""
        seen = agent.observed.get((workload["kind"], workload["name"]))
        if seen is None or not seen.exists:
            return "Deploying", "WorkloadNotReady", f"{workload['kind']} {workload['name']} created, waiting for it to report", None
        summary = seen.summary
        conditions = {c.get("type"): c.get("status") for c in summary.get("conditions", [])}
        if workload["kind"] == "Deployment":
            available = int(summary.get("availableReplicas") or 0)
            replicas = {
                "desired": int(summary.get("replicas") or 1),
                "ready": int(summary.get("readyReplicas") or 0),
                "available": available,
            }
            if available > 0:
                return "Running", "WorkloadReady", "the agent is running", replicas
            return "Deploying", "WorkloadNotReady", "waiting for the agent's pods to be available", replicas
        if workload["kind"] == "Job":
            if conditions.get("Failed") == "True":
                return "Failed", "JobFailed", "the agent's Job failed", None
            if conditions.get("Complete") == "True" or int(summary.get("succeeded") or 0) > 0:
                return "Completed", "JobCompleted", "the agent's Job completed", None
            if int(summary.get("active") or 0) > 0:
                return "Running", "JobRunning", "the agent's Job is running", None
            return "Deploying", "JobPending", "waiting for the agent's Job to start", None
        if conditions.get("Ready") == "True":
            return "Running", "AgentReady", "the agent reports Ready", None
        return "Deploying", "AwaitingKagent", "waiting for kagent to report the Agent Ready", None

    def _status(
        self,
        agent: Agent,
        phase: str,
        reason: str,
        conditions: list[StatusCondition],
        fields: dict[str, Any],
        *,
        binding: dict[str, Any] | None = None,
        objects: list[dict[str, Any]] | None = None,
    ) -> AgentReconciled:
        message = next((c.message for c in conditions if c.status != "True"), "the agent is running")
        return AgentReconciled(
            generation=agent.generation,
            binding=binding or {},
            reason=reason,
            objects=tuple(ref(o) for o in objects or []),
            status=StatusSlice(conditions=tuple(conditions), phase=phase, message=message, fields=fields),
        )

    def _failed(self, agent: Agent, decision: AgentReconciled, reason: str, message: str) -> AgentReconciled:
        conditions = tuple(
            c if c.type != "Ready" else StatusCondition.of("Ready", False, reason, message, agent.generation)
            for c in decision.status.conditions
        )
        return AgentReconciled(
            generation=agent.generation,
            binding=decision.binding,
            reason=reason,
            status=StatusSlice(conditions=conditions, phase="Failed", message=message, fields=decision.status.fields),
        )
