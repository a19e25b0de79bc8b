"""What the gateway knows: every member, its last recorded health, and live traffic state.

`Members` is folded from events and forgets what is deleted. `Members.traffic`
is the one part that is not, and it stays out of the log (and out of snapshots) on purpose:
`outstanding` counts this process's requests in flight, which another replica's router does not carry
and a restart does not have; `failed` marks a member that failed a request since its last probe, and is
superseded by a probe before a new process routes at all (its start-up pass probes every member and
records health when it changed, before the router listens). What a user sees of a member (its health,
phase, advertised models) is the recorded `MemberHealthChanged`, which a hand-over keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from contracts.events import Envelope, ResourceApplied, ResourceDeleted
from contracts.objects import MODEL_DEPLOYMENT, MODEL_DEPLOYMENT_NAMESPACE
from contracts.poolmember import InferencePoolMemberSpec
from contracts.router import MemberHealthChanged
from contracts.scaling import SCALE_FROM_ZERO
from contracts.subjects import SPEC, Key
from services.router.apis import formats_of
from services.router.load import Load

# A change to any of these means the last probe no longer speaks for the member.
CONNECTION_FIELDS = ("backend", "url", "authSecretRef", "caFileRef", "transport", "computeOperatorRef")


@dataclass
class Member:
    key: Key
    generation: int
    spec: InferencePoolMemberSpec
    health: MemberHealthChanged | None = None
    probed_generation: int = 0  # the generation a health decision was last recorded for
    needs_probe: bool = True  # new, re-pointed or un-drained: not routable before a fresh probe
    formats: frozenset[str] = frozenset()  # the API formats it accepts (services/router/apis.py)
    deployment: str = ""  # "namespace/name" of the ModelDeployment it serves (its labels); "" for a user's member
    scale_from_zero: bool = False  # its deployment may go to zero: a request is held while it is down (hold.py)

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def declared(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.spec.models)

    def window(self, model: str) -> int | None:
        for declared in self.spec.models:
            if declared.name == model:
                return declared.contextWindow or None  # 0 is "no hint"
        return None


def deployment_of(labels: Mapping[str, str]) -> str:
    """ "namespace/name" from the labels the gateway writes on a deployment's member; "" when it names none."""
    name = labels.get(MODEL_DEPLOYMENT, "")
    return f"{labels.get(MODEL_DEPLOYMENT_NAMESPACE) or 'default'}/{name}" if name else ""


@dataclass
class Traffic:
    """Live, per-process state: not a fact, never an event (see the module's docstring)."""

    outstanding: int = 0
    others: int = 0  # the other router replicas' requests in flight to it, as they last said (services/router/learn.py)
    failed: bool = False  # failed mid-request; cleared by the next successful probe
    load: Load | None = None  # what the member last reported on its /metrics (services/router/load.py)


@dataclass
class Members:
    snapshot_version = 3  # runtime/snapshots.py: bump when what fold() keeps here changes
    snapshot_skip = ("traffic", "_ordered")  # live, per process: a restart starts with no request in flight; a cache

    items: dict[Key, Member] = field(default_factory=dict)
    traffic: dict[Key, Traffic] = field(default_factory=dict)
    by_model: dict[str, set[Key]] = field(default_factory=dict)
    _ordered: dict[str, list[Member]] = field(default_factory=dict)  # by_model's members in key order, built when asked

    def declaring(self, model: str) -> list[Member]:
        """The members that declare `model`, in key order (the same list until a member changes)."""
        found = self._ordered.get(model)
        if found is None:
            found = self._ordered[model] = [self.items[k] for k in sorted(self.by_model.get(model, ()))]
        return found

    def _unindex(self, member: Member) -> None:
        for model in member.declared:
            keys = self.by_model.get(model)
            if keys is not None:
                keys.discard(member.key)
                if not keys:
                    del self.by_model[model]

    def fold(self, envelope: Envelope) -> None:
        event, key = envelope.event, envelope.key
        if envelope.facet == SPEC:
            self._ordered.clear()
            old = self.items.get(key)
            if old is not None:
                self._unindex(old)
            if isinstance(event, ResourceApplied):
                spec = InferencePoolMemberSpec.model_validate(event.spec)
                labels = event.labels
                member = Member(
                    key,
                    event.generation,
                    spec,
                    formats=formats_of(spec.backend, labels),
                    deployment=deployment_of(labels),
                    scale_from_zero=labels.get(SCALE_FROM_ZERO) == "true",
                )
                if old is not None:
                    member.health, member.probed_generation = old.health, old.probed_generation
                    repointed = any(getattr(old.spec, f) != getattr(spec, f) for f in CONNECTION_FIELDS)
                    undrained = old.spec.draining and not spec.draining
                    member.needs_probe = old.needs_probe or repointed or undrained
                self.items[key] = member
                self.traffic.setdefault(key, Traffic())
                for model in member.declared:
                    self.by_model.setdefault(model, set()).add(key)
            elif isinstance(event, ResourceDeleted):
                self.items.pop(key, None)
                self.traffic.pop(key, None)  # a request still in flight holds its own reference
        elif isinstance(event, MemberHealthChanged):
            probed = self.items.get(key)
            if probed is not None and event.generation >= probed.probed_generation:
                probed.health = event
                probed.probed_generation = event.generation
                if event.generation == probed.generation:
                    probed.needs_probe = False

    def traffic_of(self, key: Key) -> Traffic:
        """A member's traffic; for a member no longer known, a counter that is not kept."""
        found = self.traffic.get(key)
        if found is None:
            found = Traffic()
            if key in self.items:
                self.traffic[key] = found
        return found
