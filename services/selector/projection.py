"""What the selector knows: deployments, provider configs with their readiness, its own decisions.

Everything here is folded from the stream, so a restart or another replica knows the same: the
rules of a provider that failed to evaluate come from the selector's own `SelectionRulesChecked`
on the provider (not from memory), and a deleted deployment or provider leaves nothing behind."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.admission import stored
from contracts.events import Decision, Envelope, ResourceApplied, ResourceDeleted
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, RuleFailure, SelectionFailed, SelectionRulesChecked
from contracts.providerconfig import InferenceProviderConfigSpec
from contracts.subjects import SELECTOR, SPEC, Key
from services.selector.decide import Provider

SELF = SELECTOR


@dataclass
class Deployment:
    key: Key
    generation: int
    md: ModelDeployment
    decision: ProviderSelected | SelectionFailed | None = None


@dataclass
class ProviderConfig:
    name: str
    generation: int
    spec: InferenceProviderConfigSpec
    reports: dict[str, tuple[int, bool]] = field(default_factory=dict)  # facet → (seq, ready)
    rules_status: Decision | None = None  # this service's last SelectionRulesValid decision

    @property
    def rule_failures(self) -> tuple[RuleFailure, ...]:
        """The rules that failed to evaluate when a deployment was last scored against this provider, as recorded."""
        return self.rules_status.failures if isinstance(self.rules_status, SelectionRulesChecked) else ()

    @property
    def ready(self) -> bool:
        """The readiness most recently reported, by whoever reports it (the provider, a user's manifest, the cluster)."""
        if not self.reports:
            return False
        return max(self.reports.values())[1]

    def view(self) -> Provider:
        return Provider(self.name, self.spec, self.ready)


def model_deployment(event: ResourceApplied) -> ModelDeployment:
    md = stored("ModelDeployment", event.name, event.namespace, event.spec, event.labels, event.annotations)
    assert isinstance(md, ModelDeployment)
    return md


@dataclass
class SelectorState:
    snapshot_version = 2  # runtime/snapshots.py: bump when what fold() keeps here changes

    deployments: dict[Key, Deployment] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)

    def views(self) -> list[Provider]:
        return [p.view() for p in self.providers.values()]

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if key.kind == "ModelDeployment":
            if envelope.facet == SPEC:
                if isinstance(event, ResourceApplied):
                    old = self.deployments.get(key)
                    self.deployments[key] = Deployment(key, event.generation, model_deployment(event), old.decision if old else None)
                elif isinstance(event, ResourceDeleted):
                    self.deployments.pop(key, None)
            elif envelope.facet == SELF and isinstance(event, ProviderSelected | SelectionFailed):
                deployment = self.deployments.get(key)
                if deployment is not None:
                    deployment.decision = event
        elif key.kind == "InferenceProviderConfig":
            if envelope.facet == SPEC:
                if isinstance(event, ResourceApplied):
                    old_config = self.providers.get(key.name)
                    config = ProviderConfig(key.name, event.generation, InferenceProviderConfigSpec.model_validate(event.spec))
                    if old_config is not None:
                        config.reports, config.rules_status = old_config.reports, old_config.rules_status
                    self.providers[key.name] = config
                elif isinstance(event, ResourceDeleted):
                    self.providers.pop(key.name, None)
            elif isinstance(event, Decision):
                provider = self.providers.get(key.name)
                if provider is None:
                    return
                if envelope.facet == SELF:
                    provider.rules_status = event
                elif "ready" in event.status.fields:
                    provider.reports[envelope.facet] = (envelope.seq, bool(event.status.fields["ready"]))
