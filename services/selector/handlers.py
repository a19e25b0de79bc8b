"""The selector service: a selection per deployment, re-run when providers change.

Scoring a deployment evaluates each candidate provider's selection rules; a rule that fails to
evaluate is reported on the provider (`SelectionRulesValid`) in a `SelectionRulesChecked` that
carries the failures, and the projection folds them back from it: no state outside the log."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from contracts.conditions import carried, same_decision
from contracts.events import Envelope
from contracts.objects import PAUSED
from contracts.pipeline import ProviderSelected, RuleFailure, SelectionFailed, SelectionRulesChecked
from contracts.subjects import GLOBAL, PREFIX, SPEC, Key, kind_filter
from runtime.service import Effects, Service
from runtime.waiting import FoldWaits
from services.selector import decide
from services.selector.projection import SELF, SelectorState


class SelectorService(Service):
    name = SELF
    consumes = (kind_filter("ModelDeployment"), kind_filter("ModelDeployment", SELF), f"{PREFIX}.{GLOBAL}.inferenceproviderconfig.>")

    def __init__(self) -> None:
        self.state = SelectorState()
        self._waits = FoldWaits()  # `knows`: the providers awaited

    def fold(self, envelope: Envelope) -> None:
        self.state.fold(envelope)
        if envelope.key.kind == "InferenceProviderConfig":
            self._waits.folded()

    async def knows(self, names: Collection[str], timeout: float) -> bool:
        """Wait until every provider in `names` is folded here, told by the fold that makes it so; False after
        `timeout`. Standalone start-up waits on the built-in ones (services/catalog.py `providers_known`)."""
        wanted = frozenset(names)
        return await self._waits.until(lambda: wanted <= self.state.providers.keys(), timeout)

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
            config = self.state.providers.get(provider)
            if config is not None and tuple(failures) != config.rule_failures:
                await self._reconcile_provider(Key("InferenceProviderConfig", "", provider), effects, tuple(failures))
        decision = carried(outcome.decision, deployment.decision)
        if not same_decision(decision, deployment.decision):
            await effects.emit(key, decision)

    async def _reconcile_provider(self, key: Key, effects: Effects, failures: tuple[RuleFailure, ...] | None = None) -> None:
        """Record the provider's SelectionRulesValid: with `failures` just found by scoring a deployment, else
        with those last recorded."""
        provider = self.state.providers.get(key.name)
        if provider is None:
            return
        failures = provider.rule_failures if failures is None else failures
        slice_ = decide.rules_status(provider.view(), failures, provider.generation)
        decision = carried(SelectionRulesChecked(generation=provider.generation, status=slice_, failures=failures), provider.rules_status)
        if not same_decision(decision, provider.rules_status):
            await effects.emit(key, decision)


__all__ = ["SelectionFailed", "SelectorService"]
