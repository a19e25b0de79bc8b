"""Projections forget what is gone: 10,000 create → delete cycles of deployments, provider configs, pool
members and Gateways, folded as real envelopes into the watcher, console, selector, router and gateway
services (each given only the subjects it consumes, as its runner does), leave every projection as
large as it was before them, counted over every dict, list and set in it, at any depth."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from contracts.cluster import OBSERVED, DeletionRequested, ObjectObserved
from contracts.events import Envelope, Event, ResourceApplied, ResourceDeleted, StatusSlice, Withdrawn, new_envelope
from contracts.gateway import GatewayReconciled
from contracts.pipeline import ProviderSelected, RuleFailure, SelectionRulesChecked, WorkloadRendered
from contracts.router import MemberHealthChanged
from contracts.subjects import GATEWAY, ROUTER, SELECTOR, SPEC, WORKLOAD, Key, facet_filter, matcher
from runtime.kube import Kube
from runtime.secrets import FileSecrets
from runtime.service import Service
from services.console.handlers import ConsoleService
from services.gateway.handlers import GatewayService
from services.router.handlers import RouterService
from services.router.probe import Prober
from services.router.upstream import UpstreamPool
from services.selector.handlers import SelectorService
from services.watcher.handlers import WatcherService
from tests.contracts.cases import IPC, MD, MEMBER

CYCLES = 10_000


def entries(value: Any) -> int:
    """Entries of every container reachable from `value` through dataclasses and containers (events, models and
    other values are leaves: they are replaced, never grown)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(entries(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return len(value) + sum(entries(v) for v in value.values())
    if isinstance(value, list | set | frozenset):
        return len(value) + sum(entries(v) for v in value)
    return 0


class Folding:
    """The services, each folding what its runner would give it, in stream order."""

    def __init__(self, tmp_path: Path) -> None:
        self.watcher = WatcherService()
        self.console = ConsoleService()
        self.prober = Prober(pool=UpstreamPool(), secrets=FileSecrets(tmp_path))
        self.services: list[Service] = [
            self.watcher,
            self.console,
            SelectorService(),
            RouterService(self.prober),
            GatewayService(Kube.at("https://127.0.0.1:9")),  # never called: folding needs no API server
        ]
        self.wanted = [matcher([*s.consumes, facet_filter(s.name)]) for s in self.services]
        self.seq = itertools.count(1)

    def __call__(self, key: Key, event: Event, facet: str = SPEC) -> None:
        envelope = new_envelope(key.subject(facet), event, producer="test")
        envelope = Envelope(id=envelope.id, subject=envelope.subject, producer="test", time=envelope.time, event=event, seq=next(self.seq))
        for service, wanted in zip(self.services, self.wanted, strict=True):
            if wanted.match(envelope.subject):
                service.fold(envelope)

    def sizes(self) -> dict[str, int]:
        found = {s.name: entries(s.projection()) for s in self.services}
        found["prober"] = entries(self.prober.resolved)
        return found


def applied(key: Key, spec: dict[str, Any]) -> ResourceApplied:
    return ResourceApplied(kind=key.kind, namespace=key.namespace, name=key.name, generation=1, spec=spec, uid=f"uid-{key.name}")


def deleted(key: Key) -> ResourceDeleted:
    return ResourceDeleted(kind=key.kind, namespace=key.namespace, name=key.name)


def cycle(fold: Folding, n: int) -> None:
    """One of each resource created, decided about, observed, deleted, and its objects reported gone."""
    provider = Key("InferenceProviderConfig", "", f"p{n}")
    fold(provider, applied(provider, IPC["spec"]))
    failure = RuleFailure(0, "spec.nowhere.count > 1", "failed to evaluate: no such key")
    fold(provider, SelectionRulesChecked(generation=1, failures=(failure,)), SELECTOR)
    fold(provider, deleted(provider))

    md = Key("ModelDeployment", "default", f"md{n}")
    fold(md, applied(md, MD["spec"]))
    fold(md, ProviderSelected(generation=1, engine="vllm", provider="acme"), SELECTOR)
    fold(md, WorkloadRendered(generation=1, provider="acme", status=StatusSlice(phase="Running")), WORKLOAD)
    for kind, name in (("Deployment", md.name), ("Service", md.name)):
        fold(md, ObjectObserved(api_version="v1", object_kind=kind, object_name=name, summary={"clusterIP": "10.0.0.1"}), OBSERVED)
    claim = ObjectObserved(api_version="v1", object_kind="PersistentVolumeClaim", object_name="shared", summary={"phase": "Bound"})
    fold(md, msgspec.structs.replace(claim, referenced=True), OBSERVED)
    objects = ({"kind": "HTTPRoute", "metadata": {"name": md.name}},)
    fold(md, GatewayReconciled(generation=1, gateway="infra/gw", objects=objects, reason="GatewayConfigured"), GATEWAY)
    fold(md, DeletionRequested(kind=md.kind, namespace=md.namespace, name=md.name))
    fold(md, deleted(md))
    fold(md, Withdrawn(generation=1), GATEWAY)
    for kind, name in (("Deployment", md.name), ("Service", md.name)):  # garbage-collected after their owner
        fold(md, ObjectObserved(api_version="v1", object_kind=kind, object_name=name, exists=False), OBSERVED)

    member = Key("InferencePoolMember", "", f"m{n}")
    fold(member, applied(member, {**MEMBER["spec"], "backend": "echo", "url": ""}))
    fold(member, MemberHealthChanged(generation=1, healthy=True, advertised=("qwen",)), ROUTER)
    fold.console.state.probed(member.subject(), datetime.now(UTC))  # the gateway's probe signal
    fold(member, deleted(member))
    fold.console.state.probed(member.subject(), datetime.now(UTC))  # a last probe's signal, after the deletion

    gateway = Key("Gateway", "infra", f"gw{n}")
    fold(gateway, ObjectObserved(api_version="gateway.networking.k8s.io/v1", object_kind="Gateway", object_name=gateway.name), OBSERVED)
    gone = ObjectObserved(api_version="gateway.networking.k8s.io/v1", object_kind="Gateway", object_name=gateway.name, exists=False)
    fold(gateway, gone, OBSERVED)

    pool = Key("InferencePool", "pools", f"pool{n}")  # a provider's own, which a deployment may route to
    fold(pool, ObjectObserved(api_version="inference.networking.k8s.io/v1", object_kind="InferencePool", object_name=pool.name), OBSERVED)
    gone = ObjectObserved(api_version="inference.networking.k8s.io/v1", object_kind="InferencePool", object_name=pool.name, exists=False)
    fold(pool, gone, OBSERVED)


async def test_ten_thousand_create_delete_cycles_leave_the_watcher_selector_and_gateway_projections_as_they_were(
    tmp_path: Path,
) -> None:
    fold = Folding(tmp_path)  # in a running loop: the gateway's upstream pool is made in one
    standing = Key("InferenceProviderConfig", "", "acme")  # one that stays: the sizes are not only of empty projections
    fold(standing, applied(standing, IPC["spec"]))
    before = fold.sizes()
    assert before["selector"] and before["watcher"] and before["console"] and before["gateway"], before
    cycle(fold, 0)
    assert fold.sizes() == before, "one cycle left something behind"
    for n in range(1, CYCLES):
        cycle(fold, n)
    assert fold.sizes() == before
