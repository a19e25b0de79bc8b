"""The selector service: a selection per deployment, re-run when providers change."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.conditions import carried, same_decision
from contracts.events import Envelope, StatusReported
from contracts.objects import PAUSED
from contracts.pipeline import ProviderSelected, SelectionFailed
from contracts.subjects import SPEC, Key, kind_filter
from runtime.service import Effects, Service
from services.selector import decide
from services.selector.projection import SELF, SelectorState


class SelectorService(Service):
    name = SELF
    consumes = (kind_filter("ModelDeployment"), kind_filter("ModelDeployment", SELF), "jetway.evt.inferenceproviderconfig.>")

    def __init__(self) -> None:
        self.state = SelectorState()
        self.rule_failures: dict[str, list[decide.RuleFailure]] = {}

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)

    def affected(self, envelope: Envelope) -> Iterable[Key]:
        key = envelope.key
        if key.kind == "ModelDeployment":
            return (key,) if envelope.facet == SPEC else ()
        if envelope.facet == SELF:
            return ()
        # A provider changed (config or readiness): deployments still waiting for one, or that name it, choose again.
        waiting = [
            d.key
            for d in self.state.deployments.values()
            if not isinstance(d.decision, ProviderSelected) or (d.md.spec.provider and d.md.spec.provider.name == key.name)
        ]
        return [*waiting, key]

    def keys(self) -> Iterable[Key]:
        return [*self.state.deployments, *(Key("InferenceProviderConfig", "", name) for name in self.state.providers)]

    async def reconcile(self, key: Key, effects: Effects) -> None:
        if key.kind == "InferenceProviderConfig":
            await self._reconcile_provider(key, effects)
            return
        deployment = self.state.deployments.get(key)
        if deployment is None or (deployment.md.metadata.annotations or {}).get(PAUSED) == "true":
            return  # paused: the user has taken the wheel
        previous = deployment.decision if isinstance(deployment.decision, ProviderSelected) else None
        outcome = decide.select(deployment.md, deployment.generation, previous, self.state.views())
        for provider, failures in outcome.rule_failures.items():
            if failures != self.rule_failures.get(provider):
                self.rule_failures[provider] = failures
                await self._reconcile_provider(Key("InferenceProviderConfig", "", provider), effects)
        decision = carried(outcome.decision, deployment.decision)
        if not same_decision(decision, deployment.decision):
            await effects.emit(key, decision)

    async def _reconcile_provider(self, key: Key, effects: Effects) -> None:
        provider = self.state.providers.get(key.name)
        if provider is None:
            return
        slice_ = decide.rules_status(provider.view(), self.rule_failures.get(key.name, []), provider.generation)
        decision = carried(StatusReported(generation=provider.generation, status=slice_), provider.rules_status)
        if not same_decision(decision, provider.rules_status):
            await effects.emit(key, decision)


__all__ = ["SelectionFailed", "SelectorService"]
