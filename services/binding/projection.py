"""What the binding service knows: agent frameworks, agents, the models and Gateways they bind to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.admission import stored
from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.cluster import OBSERVED, ApisDiscovered, DeletionRequested, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted, Withdrawn
from contracts.gatewayapi import GatewayView
from contracts.modeldeployment import ModelDeployment
from contracts.objects import PAUSED
from contracts.subjects import BINDING, GATEWAY_API, REPORTED, SPEC, WORKLOAD, Key
from services.binding.decide import ModelView

SELF = BINDING


@dataclass
class Framework:
    config: AgentProviderConfig
    generation: int = 0
    version: str = ""  # what the framework's own controller reports (status.version)
    last: Decision | None = None


@dataclass
class Agent:
    key: Key
    agent: AgentDeployment | None = None  # None once deleted (kept until its objects are withdrawn)
    generation: int = 0
    uid: str = ""
    paused: bool = False
    deleting: bool = False
    observed: dict[tuple[str, str], ObjectObserved] = field(default_factory=dict)
    last: Decision | None = None


@dataclass
class Model:
    md: ModelDeployment
    uid: str
    gateway: dict[str, Any] = field(default_factory=dict)  # status.gateway, from the gateway service
    endpoint: dict[str, Any] | None = None  # status.endpoint, from the workload service

    def view(self) -> ModelView:
        return ModelView(self.md, self.uid, self.gateway, self.endpoint)


@dataclass
class BindingState:
    snapshot_version = 1  # runtime/snapshots.py: bump when what fold() keeps here changes

    frameworks: dict[str, Framework] = field(default_factory=dict)
    agents: dict[Key, Agent] = field(default_factory=dict)
    models: dict[tuple[str, str], Model] = field(default_factory=dict)
    gateways: dict[str, GatewayView] = field(default_factory=dict)
    discovered: ApisDiscovered | None = None

    def agents_of(self, framework: str) -> list[Key]:
        return [k for k, a in self.agents.items() if a.agent is not None and a.agent.spec.framework.name == framework]

    def agents_on(self, namespace: str, model: str) -> list[Key]:
        out = []
        for key, a in self.agents.items():
            ref = a.agent.spec.model.deploymentRef if a.agent else None
            if ref is not None and ref.name == model and (ref.namespace or key.namespace) == namespace:
                out.append(key)
        return out

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if isinstance(event, ApisDiscovered):
            self.discovered = event
        elif key.kind == "Gateway" and isinstance(event, ObjectObserved):
            ref = f"{key.namespace}/{key.name}"
            if event.exists:
                self.gateways[ref] = GatewayView.of(key.namespace, key.name, event.summary)
            else:
                self.gateways.pop(ref, None)
        elif key.kind == "AgentProviderConfig":
            self._fold_framework(envelope)
        elif key.kind == "AgentDeployment":
            self._fold_agent(envelope)
        elif key.kind == "ModelDeployment":
            self._fold_model(envelope)

    def _fold_framework(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        found = self.frameworks.get(key.name)
        if envelope.facet == SPEC and isinstance(event, ResourceApplied):
            config = stored(key.kind, key.name, "", event.spec, event.labels, event.annotations)
            assert isinstance(config, AgentProviderConfig)
            self.frameworks[key.name] = Framework(config, event.generation, found.version if found else "", found.last if found else None)
        elif envelope.facet == SPEC and isinstance(event, ResourceDeleted):
            self.frameworks.pop(key.name, None)
        elif found is not None and envelope.facet == REPORTED and isinstance(event, Decision):
            found.version = str(event.status.fields.get("version") or "")
        elif found is not None and envelope.facet == SELF and isinstance(event, Decision):
            found.last = event

    def _fold_agent(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        agent = self.agents.get(key)
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                agent = agent or Agent(key)
                typed = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
                assert isinstance(typed, AgentDeployment)
                agent.agent, agent.generation, agent.uid = typed, event.generation, event.uid
                agent.paused = event.annotations.get(PAUSED) == "true"
                self.agents[key] = agent
            elif isinstance(event, DeletionRequested) and agent is not None:
                agent.deleting = True
            elif isinstance(event, ResourceDeleted) and agent is not None:
                agent.agent = None
                if not (agent.last and agent.last.holds_objects()):
                    self.agents.pop(key, None)
        elif agent is None:
            return
        elif envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            agent.observed[(event.object_kind, event.object_name)] = event
        elif envelope.facet == SELF and isinstance(event, Decision):
            agent.last = event
            if isinstance(event, Withdrawn) and agent.agent is None:
                self.agents.pop(key, None)

    def _fold_model(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        where = (key.namespace, key.name)
        model = self.models.get(where)
        if envelope.facet == SPEC:
            if isinstance(event, ResourceApplied):
                md = stored(key.kind, key.name, key.namespace, event.spec, event.labels, event.annotations)
                assert isinstance(md, ModelDeployment)
                self.models[where] = Model(md, event.uid, model.gateway if model else {}, model.endpoint if model else None)
            elif isinstance(event, ResourceDeleted):
                self.models.pop(where, None)
        elif model is not None and isinstance(event, Decision):
            if envelope.facet == GATEWAY_API:
                gateway = event.status.fields.get("gateway")
                model.gateway = dict(gateway) if isinstance(gateway, dict) and not isinstance(event, Withdrawn) else {}
            elif envelope.facet == WORKLOAD:
                endpoint = event.status.fields.get("endpoint")
                model.endpoint = dict(endpoint) if isinstance(endpoint, dict) and not isinstance(event, Withdrawn) else None
