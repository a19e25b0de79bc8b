"""What the binding service knows: agent frameworks, agents, the models and Gateways they bind to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.admission import stored
from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.cluster import OBSERVED, ApisDiscovered, ObjectObserved
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted, Withdrawn
from contracts.gatewayapi import GatewayView
from contracts.modeldeployment import ModelDeployment
from contracts.subjects import BINDING, GATEWAY, REPORTED, SPEC, WORKLOAD, Key
from runtime import desired
from runtime.desired import Desired
from services.binding.decide import FrameworkView, ModelView

SELF = BINDING


@dataclass
class Framework:
    config: AgentProviderConfig
    generation: int = 0
    version: str = ""  # what the framework's own controller reports (status.version)
    last: Decision | None = None

    def view(self) -> FrameworkView:
        return FrameworkView(self.config, self.version)


@dataclass
class Agent(Desired[AgentDeployment]):
    observed: dict[tuple[str, str], ObjectObserved] = field(default_factory=dict)


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
    snapshot_version = 2  # runtime/snapshots.py: bump when what fold() keeps here changes

    frameworks: dict[str, Framework] = field(default_factory=dict)
    agents: dict[Key, Agent] = field(default_factory=dict)
    models: dict[tuple[str, str], Model] = field(default_factory=dict)
    gateways: dict[str, GatewayView] = field(default_factory=dict)
    discovered: ApisDiscovered | None = None

    def agents_of(self, framework: str) -> list[Key]:
        return [k for k, a in self.agents.items() if a.applied is not None and a.applied.spec.framework.name == framework]

    def agents_on(self, namespace: str, model: str) -> list[Key]:
        out = []
        for key, a in self.agents.items():
            ref = a.applied.spec.model.deploymentRef if a.applied else None
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
        if desired.fold(self.agents, envelope, SELF, Agent, AgentDeployment):
            return
        event, agent = envelope.event, self.agents.get(envelope.key)
        if agent is not None and envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            agent.observed[(event.object_kind, event.object_name)] = event

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
            if envelope.facet == GATEWAY:
                gateway = event.status.fields.get("gateway")
                model.gateway = dict(gateway) if isinstance(gateway, dict) and not isinstance(event, Withdrawn) else {}
            elif envelope.facet == WORKLOAD:
                endpoint = event.status.fields.get("endpoint")
                model.endpoint = dict(endpoint) if isinstance(endpoint, dict) and not isinstance(event, Withdrawn) else None
