"""The watcher in Kubernetes mode: the cluster in, status and finalizers out.

One informer per kind (runtime/informer.py: list, watch, resume after a drop, list again after
`410 Gone`, start over after a handler's failure). What is the watcher's own is what it does with
what they show: which kinds it follows (its own resources, the objects Jetway owns, Gateways, every
InferencePool, every claim, CRDs metadata-only), what to record (`ingest`, pure) and what to write back (`status`, pure).
Discovery is refreshed when a CRD comes or goes, and follows start or stop with the kinds served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp

from contracts.cluster import (
    CLEANUP_FINALIZER,
    DISCOVERY,
    OBSERVED,
    ApisDiscovered,
    DeletionRequested,
    ObjectObserved,
    SpecRejected,
    rejected,
    validation_failed,
)
from contracts.conditions import same_decision
from contracts.events import Event, ResourceDeleted, StatusReported, StatusSlice, Withdrawn
from contracts.kinds import KINDS
from contracts.objects import MANAGED_SELECTOR
from contracts.subjects import BINDING, REPORTED, SPEC, WATCHER, WORKLOAD, Key
from runtime.informer import Informer, OnChange, OnList
from runtime.kube import Kube, KubeError, NotFound
from runtime.resources import condition_dict
from services.watcher.decide import ingest, status
from services.watcher.projection import WatcherState

log = logging.getLogger("jetway.watcher.cluster")
SELF = WATCHER
DESIRED = tuple((info.api_version, info.kind) for info in KINDS.values())
OWNED = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("batch/v1", "Job"),
    ("nvidia.com/v1alpha1", "DynamoGraphDeployment"),
    ("kaito.sh/v1beta1", "Workspace"),
    ("ray.io/v1", "RayService"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("kagent.dev/v1alpha2", "Agent"),
)
# followed whoever wrote them: Gateways, and every InferencePool (Jetway's observed on their deployment, a provider's
# on itself: the gateway waits for the one its deployment routes to, services/gateway/projection.py)
READ = (("gateway.networking.k8s.io/v1", "Gateway"), ("inference.networking.k8s.io/v1", "InferencePool"))
# every claim, not only Jetway's: a deployment's volumes may mount pre-existing ones, whose phase its storage waits on
CLAIMS = ("v1", "PersistentVolumeClaim")
CRDS = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
FINALIZED_KINDS = ("ModelDeployment",)
# What one watcher replica holds a lease on (runtime/leases.py): each of Jetway's kinds (its list-then-watch,
# the status and finalizer writes of its resources), and `cluster`: the objects Jetway owns, Gateways, claims,
# CRDs and discovery. One replica holds each at a time; with several replicas they are shared.
CLUSTER_GROUP = "cluster"
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    **{kind: ((api_version, kind),) for api_version, kind in DESIRED},
    CLUSTER_GROUP: (*OWNED, *READ, CLAIMS),
}


def group_of(kind: str) -> str:
    """The lease a resource's status writes are held under: its kind's, or `cluster` (discovery)."""
    return kind if kind in GROUPS else CLUSTER_GROUP


def _now() -> datetime:
    return datetime.now(UTC)


def _not_older(obj: dict[str, Any], than: dict[str, Any] | None) -> bool:
    """Whether `obj` is no older than `than`, by resourceVersion. Clients are told to take those as opaque; a
    real server's (etcd's revision) and the emulator's are one increasing integer, and anything else is taken
    as newer."""
    if than is None:
        return True
    mine, theirs = obj["metadata"].get("resourceVersion", ""), than["metadata"].get("resourceVersion", "")
    return not (mine.isdigit() and theirs.isdigit()) or int(mine) >= int(theirs)


def _when(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return None


class Recorder(Protocol):
    """What the cluster side needs of the watcher service (handlers.py, which builds on this module, not the
    other way round): the projection to compare with, and a way to record what the cluster showed."""

    state: WatcherState

    async def record(self, key: Key, event: Event, facet: str) -> None: ...


class ClusterSync:
    """The cluster side of the watcher. Its dicts are caches of what the API server shows, not facts: they are
    refilled by each follow's first list, so a restart or another replica rebuilds them from the cluster, and
    nothing is written from them before that list (`reconcile` writes nothing for a resource not listed yet).

    `live`, the last object the API server showed of each of Jetway's resources, stays out of the log on
    purpose: it is the whole object (spec, status, managedFields) as the cluster holds it, moving with every
    status write; its resourceVersion guards the finalizer's patch, so it must be the server's latest, which
    only the list-then-watch can say; and what it adds to the events (spec, labels, deletion) is recorded
    already, by `ingest`. An event per status write would also echo back as one more write to compare.
    """

    def __init__(
        self,
        kube: Kube,
        service: Recorder,
        *,
        namespace: str | None = None,
        rediscover_interval: float = 60.0,
        retry_delay: float = 1.0,
        restart_cap: float = 60.0,
    ) -> None:
        self.kube = kube
        self.service = service
        self.namespace = namespace  # None: every namespace
        self.rediscover_interval = rediscover_interval
        self.retry_delay = retry_delay
        self.restart_cap = restart_cap
        self.live: dict[Key, dict[str, Any]] = {}  # the last object the cluster showed for each of Jetway's resources
        self.written: dict[Key, dict[str, dict[str, Any]]] = {}  # key → owner → the status it holds there
        self.refused: set[Key] = set()  # new objects refused at ingest: the watcher wrote their status itself
        self.claims: dict[tuple[str, str], dict[str, Any]] | None = None  # (namespace, name) → every PVC; None until listed
        self.named: dict[Key, set[str]] = {}  # deployment → the pre-existing claims its volumes name
        self.mounting: dict[tuple[str, str], set[Key]] = {}  # (namespace, claim) → the deployments naming it
        self.follows: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.synced: dict[tuple[str, str], asyncio.Event] = {}
        self.informers: dict[tuple[str, str], Informer] = {}  # the latest informer of each kind followed
        self.held: set[str] = set()  # the groups (GROUPS) this replica follows and writes for
        self.ready = asyncio.Event()  # the held groups listed, and discovery recorded when `cluster` is held
        self._cluster_duties: list[asyncio.Task[None]] = []
        self._discovered = False
        self._holding: dict[str, asyncio.Task[None]] = {}  # group → its `hold` under way (its first lists)
        self._reconciling: dict[Key, asyncio.Lock] = {}

    # --- running -------------------------------------------------------------------------

    async def run(self, hold_all: bool = True) -> None:
        """Follow the cluster until cancelled: every group (one watcher), or what `hold` is given (its leases)."""
        await self._retrying(self.kube.discover)
        try:
            if hold_all:
                for group in GROUPS:
                    await self.hold(group)
            await asyncio.Event().wait()
        finally:
            for group in list(self.held):
                await self.release(group)

    def holds_kind(self, kind: str) -> bool:
        return group_of(kind) in self.held

    async def take(self, group: str) -> None:
        """A lease's gain: `hold` in the background (lists take a while; the lease's loop must not wait)."""
        task = asyncio.create_task(self.hold(group), name=f"hold-{group}")
        self._holding[group] = task
        task.add_done_callback(lambda _: self._holding.pop(group, None) if self._holding.get(group) is task else None)

    async def hold(self, group: str) -> None:
        """Start following a group's kinds (its lease was gained): its first lists record what is new and
        write the status of what is there; `cluster` also records discovery and follows CRDs."""
        if group in self.held:
            return
        self.held.add(group)
        self.ready.clear()
        if not self.kube.discovery.resources:
            await self._retrying(self.kube.discover)
        self._start_follows()
        for kind in GROUPS[group]:
            if kind in self.synced:
                await self.synced[kind].wait()
        if group == CLUSTER_GROUP:
            await self._record_discovery()  # after the first lists: whoever waits on discovery sees what exists
            self._discovered = True
            self._cluster_duties = [
                asyncio.create_task(
                    self.follow(*CRDS, self._crd_changed, self._crd_listed, label_selector=None, metadata_only=True), name="watch-crds"
                ),
                asyncio.create_task(self._rediscovering(), name="rediscover"),
            ]
        self._check_ready()

    async def release(self, group: str) -> None:
        """Stop following a group (its lease was lost or given up); what was cached of it goes with it."""
        holding = self._holding.pop(group, None)
        if holding is not None:
            holding.cancel()
        if group not in self.held:
            return
        self.held.discard(group)
        stopped: list[asyncio.Task[Any]] = [holding] if holding is not None else []
        for kind in GROUPS[group]:
            task = self.follows.pop(kind, None)
            if task is not None:
                task.cancel()
                stopped.append(task)
            self.synced.pop(kind, None)
        if group == CLUSTER_GROUP:
            stopped += self._cluster_duties
            for task in self._cluster_duties:
                task.cancel()
            self._cluster_duties = []
            self._discovered = False
            self.claims = None
        else:
            for key in [k for k in self.live if k.kind == group]:
                self.live.pop(key, None)
                self.written.pop(key, None)
                self.refused.discard(key)
        await asyncio.gather(*stopped, return_exceptions=True)
        self._check_ready()

    def _check_ready(self) -> None:
        started = [kind for group in self.held for kind in GROUPS[group] if kind in self.synced]  # the served ones
        if all(self.synced[kind].is_set() for kind in started) and (CLUSTER_GROUP not in self.held or self._discovered):
            self.ready.set()

    async def _rediscovering(self) -> None:
        while True:
            await asyncio.sleep(self.rediscover_interval)
            await self.rediscover()

    async def _retrying(self, call: Callable[[], Awaitable[Any]]) -> Any:
        while True:
            try:
                return await call()
            except (TimeoutError, KubeError, aiohttp.ClientError, OSError) as exc:
                log.warning("kubernetes API: %s; retrying", exc)
                await asyncio.sleep(self.retry_delay)

    def _start_follows(self) -> None:
        wanted: dict[tuple[str, str], tuple[Any, Any, str | None]] = {}
        for kind in DESIRED:
            wanted[kind] = (self._desired_changed, self._desired_listed, None)
        for kind in OWNED:
            wanted[kind] = (self._owned_changed, self._owned_listed, MANAGED_SELECTOR)
        for kind in READ:
            wanted[kind] = (self._owned_changed, self._owned_listed, None)
        wanted[CLAIMS] = (self._claim_changed, self._claims_listed, None)
        held = {kind for group in self.held for kind in GROUPS[group]}
        for kind, (on_change, on_list, selector) in wanted.items():
            if kind not in held:
                continue
            served = self.kube.discovery.find(*kind) is not None
            running = kind in self.follows and not self.follows[kind].done()
            if served and not running:
                self.synced.setdefault(kind, asyncio.Event())
                self.follows[kind] = asyncio.create_task(
                    self.follow(*kind, on_change, on_list, label_selector=selector), name=f"watch-{kind[1]}"
                )
            elif not served and running:
                self.follows.pop(kind).cancel()

    async def rediscover(self) -> None:
        with contextlib.suppress(KubeError, aiohttp.ClientError, asyncio.TimeoutError, OSError):
            await self.kube.discover()
            self._start_follows()
            await self._record_discovery()

    async def _record_discovery(self) -> None:
        served = tuple(sorted(f"{r.api_version}/{r.plural}" for r in self.kube.discovery.resources.values()))
        last = self.service.state.discovered
        if last is None or last.resources != served:
            await self.service.record(DISCOVERY, ApisDiscovered(resources=served), SELF)

    async def follow(
        self,
        api_version: str,
        kind: str,
        on_change: OnChange,
        on_list: OnList,
        *,
        label_selector: str | None,
        metadata_only: bool = False,
    ) -> None:
        """Follow a kind with these handlers until it is no longer served (runtime/informer.py)."""
        which = (api_version, kind)
        informer = Informer(
            self.kube,
            api_version,
            kind,
            on_change=on_change,
            on_list=on_list,
            namespace=None if which == CRDS else self.namespace,
            label_selector=label_selector,
            metadata_only=metadata_only,
            retry_delay=self.retry_delay,
            restart_cap=self.restart_cap,
            logger=log,
            synced=self.synced.get(which),
        )
        self.informers[which] = informer
        await informer.run()

    @property
    def listed(self) -> Counter[tuple[str, str]]:
        """Lists each follow got through (handlers and all)."""
        return Counter({which: informer.lists for which, informer in self.informers.items()})

    @property
    def restarts(self) -> Counter[tuple[str, str]]:
        """Follows started again after a failure their informer does not handle itself."""
        return Counter({which: informer.restarts for which, informer in self.informers.items()})

    # --- Jetway's kinds --------------------------------------------------------------------

    async def _desired_listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        present = set()
        for obj in items:
            present.add(ingest.key_of(obj))
            await self._desired_changed("ADDED", obj)
        for key in [k for k in self.service.state.resources.items if k.kind == kind and k not in present]:
            if self.namespace is None or key.namespace == self.namespace:
                await self._desired_changed(
                    "DELETED",
                    {"apiVersion": KINDS[kind].api_version, "kind": kind, "metadata": {"name": key.name, "namespace": key.namespace}},
                )

    async def _desired_changed(self, change: str, obj: dict[str, Any]) -> None:
        key = ingest.key_of(obj)
        resources = self.service.state.resources
        if change == "DELETED":
            self._index_claims(key, set())
            self.live.pop(key, None)
            self.written.pop(key, None)
            self.refused.discard(key)
            self._reconciling.pop(key, None)
            if key in resources.items:
                await self.service.record(key, ResourceDeleted(kind=key.kind, namespace=key.namespace, name=key.name), SPEC)
            return
        if _not_older(obj, self.live.get(key)):
            self.live[key] = obj  # an older one (a status write's echo, after its answer) would undo what was written
        current = resources.items.get(key)
        outcome = ingest.desired(obj, current)
        if isinstance(outcome, ingest.Rejected):
            await self._refuse(key, obj, outcome, current is not None)
            return
        if outcome is not None:
            if key in self.refused:
                await self._apply_status(key, obj, SELF, {})  # the refusal written before is over
                self.refused.discard(key)
            await self.service.record(key, outcome, SPEC)
        current = resources.items.get(key)
        if current is not None and isinstance(current.decision(SELF), SpecRejected) and not isinstance(outcome, DeletionRequested):
            await self.service.record(key, Withdrawn(generation=current.generation), SELF)
        if current is not None and key.kind in ("InferenceProviderConfig", "AgentProviderConfig"):
            await self._record_reported(key, obj)
        await self._report_claims(key)  # its volumes may name other claims now
        await self.reconcile(key)

    async def _refuse(self, key: Key, obj: dict[str, Any], refusal: ingest.Rejected, known: bool) -> None:
        lines = refusal.lines()
        log.warning("%s refused: %s", key, "; ".join(lines))
        generation = int(obj["metadata"].get("generation") or 1)
        if known:  # keep serving the accepted spec, and say why the new one was not taken
            decision = rejected(generation, lines)
            current = self.service.state.resources.items[key]
            if not same_decision(decision, current.decision(SELF)):
                await self.service.record(key, decision, SELF)
            return
        self.refused.add(key)
        message = "; ".join(lines)
        condition = condition_dict(validation_failed(generation, message, _now().strftime("%Y-%m-%dT%H:%M:%SZ")))
        body = {"phase": "Failed", "message": message, "observedGeneration": generation, "conditions": [condition]}
        body = status.fitting(key.kind, body)  # only what the kind's status has (an AgentDeployment has no message)
        if not status.contained({k: v for k, v in body.items() if k != "conditions"}, obj.get("status") or {}):
            await self._apply_status(key, obj, SELF, body)

    async def _record_reported(self, key: Key, obj: dict[str, Any]) -> None:
        """A provider's own controller reports readiness on its config; Jetway's built-ins report theirs as events."""
        current = self.service.state.resources.items[key]
        fields = ingest.reported(obj)
        if not fields or current.decision(WORKLOAD) is not None or current.decision(BINDING) is not None:
            return
        last = current.decision(REPORTED)
        if last is None or last.status.fields != fields:
            await self.service.record(key, StatusReported(status=StatusSlice(fields=fields)), REPORTED)

    # --- status and finalizers -------------------------------------------------------------

    async def reconcile(self, key: Key) -> None:
        """Bring the cluster's view of one resource to what the events say: its status, its finalizer. One
        at a time per resource: an event's pass and its watch's would both judge the same live object and
        both write; the second, waiting, judges what the first wrote and writes nothing."""
        if not self.holds_kind(key.kind):
            return  # another watcher replica holds its kind
        lock = self._reconciling.setdefault(key, asyncio.Lock())
        async with lock:
            await self._reconcile(key)

    async def _reconcile(self, key: Key) -> None:
        obj = self.live.get(key)
        state = self.service.state.resources.items.get(key)
        if obj is None or state is None:
            return
        # the finalizer first, as AI Runway does: its write is guarded by resourceVersion, and each status
        # write moves that on, so after them it would conflict and wait for the next event
        if key.kind in FINALIZED_KINDS:
            await self._finalize(key, obj)
        await self._write_status(key, self.live.get(key, obj))

    async def _write_status(self, key: Key, obj: dict[str, Any]) -> None:
        state = self.service.state.resources.items[key]
        live = obj.get("status") or {}
        wanted = status.owner_statuses(state, live)
        wanted[status.COMPOSER] = status.composed(state)
        written = self.written.setdefault(key, {})
        for owner in [o for o in written if o not in wanted]:
            await self._apply_status(key, obj, owner, {})  # withdrawn: its fields go
            written.pop(owner, None)
        for owner, body in wanted.items():
            if not status.contained(body, live):
                await self._apply_status(key, obj, owner, body)
            written[owner] = body

    async def _apply_status(self, key: Key, obj: dict[str, Any], owner: str, body: dict[str, Any]) -> None:
        meta = {"name": key.name, **({"namespace": key.namespace} if key.namespace else {})}
        patch = {"apiVersion": obj["apiVersion"], "kind": key.kind, "metadata": meta, "status": body}
        try:
            updated = await self.kube.apply(patch, manager=f"jetway-{owner}", subresource="status")
        except NotFound:
            return
        except KubeError as exc:
            log.warning("status of %s (as %s) not written: %s", key, owner, exc.message)
            return
        if key in self.live and updated.get("metadata", {}).get("resourceVersion"):
            self.live[key] = updated  # the next guarded write starts from this version

    async def _finalize(self, key: Key, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        deleting = _when(meta.get("deletionTimestamp"))
        state = self.service.state.resources.items.get(key)
        if deleting is None and CLEANUP_FINALIZER not in finalizers:
            await self._set_finalizer(key, obj, True)
        elif deleting is not None and CLEANUP_FINALIZER in finalizers and status.cleanup_done(state, deleting, _now()):
            await self._set_finalizer(key, obj, False)

    async def _set_finalizer(self, key: Key, obj: dict[str, Any], present: bool) -> None:
        """A merge patch guarded by resourceVersion: it never creates the object (a server-side apply would, if
        the object went meanwhile), and a concurrent change makes it fail and be retried from what is current."""
        current = list(obj["metadata"].get("finalizers") or [])
        wanted = [*current, CLEANUP_FINALIZER] if present else [f for f in current if f != CLEANUP_FINALIZER]
        patch = {"metadata": {"finalizers": wanted or None, "resourceVersion": obj["metadata"]["resourceVersion"]}}
        try:
            updated = await self.kube.patch(obj, patch)
        except NotFound:
            return
        except KubeError as exc:
            if exc.status != 409:
                log.warning("finalizer of %s not %s: %s", key, "added" if present else "removed", exc.message)
            return
        if key in self.live and updated.get("metadata", {}).get("resourceVersion"):
            self.live[key] = updated

    # --- objects Jetway owns, and Gateways --------------------------------------------------

    async def _owned_listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        present = set()
        for obj in items:
            present.add((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
            await self._owned_changed("ADDED", obj)
        for (key, object_kind, name), seen in list(self.service.state.observed.items()):
            ours = self.namespace is None or key.namespace == self.namespace
            if object_kind == kind and seen.exists and not seen.referenced and (key.namespace, name) not in present and ours:
                await self._observe(key, ObjectObserved(api_version=seen.api_version, object_kind=kind, object_name=name, exists=False))

    async def _owned_changed(self, change: str, obj: dict[str, Any]) -> None:
        found = ingest.observation(obj, exists=change != "DELETED")
        if found is not None:
            await self._observe(*found)

    async def _observe(self, key: Key, event: ObjectObserved) -> None:
        last = self.service.state.observed.get((key, event.object_kind, event.object_name))
        if last is None and not event.exists and not event.referenced:
            return  # never seen, now gone: nothing to tell (a missing pre-existing claim is: its deployment fails)
        if last is not None and (last.exists, last.summary) == (event.exists, event.summary):
            return  # nothing that matters changed (a resourceVersion bump, our own write echoing back)
        await self.service.record(key, event, OBSERVED)

    # --- claims: Jetway's on their owner, pre-existing ones on each deployment that mounts them ---

    async def _claims_listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        self.claims = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in items}
        await self._owned_listed(kind, [o for o in items if ingest.managed(o)])
        for key in [k for k in self.service.state.resources.items if k.kind == "ModelDeployment"]:
            await self._report_claims(key)  # after a list: what exists, and what is missing (deletions in a gap too)

    async def _claim_changed(self, change: str, obj: dict[str, Any]) -> None:
        where = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if self.claims is not None:
            if change == "DELETED":
                self.claims.pop(where, None)
            else:
                self.claims[where] = obj
        if ingest.managed(obj):
            await self._owned_changed(change, obj)
        for key in sorted(self.mounting.get(where, ()), key=str):
            await self._report_claims(key)

    async def _report_claims(self, key: Key) -> None:
        """Tell a deployment how the pre-existing claims its volumes name are: their phase, or missing. Only once
        the claims are listed (before, a claim not seen may still exist); not the claims it owns (observed as its own)."""
        state = self.service.state.resources.items.get(key)
        named = ingest.claims_named(state.spec) if state is not None and key.kind == "ModelDeployment" else set()
        self._index_claims(key, named)
        if self.claims is None or (self.namespace is not None and key.namespace != self.namespace):
            return  # not listed yet, or its claims are not listed here
        for name in sorted(named):
            claim = self.claims.get((key.namespace, name))
            if claim is not None and ingest.owner_of(claim) == key:
                continue
            await self._observe(key, ingest.claim_observation(name, claim))

    def _index_claims(self, key: Key, named: set[str]) -> None:
        """Which deployments name which claims: a claim's event tells those, without a pass over every resource."""
        for name in self.named.pop(key, set()) - named:
            mounting = self.mounting.get((key.namespace, name), set())
            mounting.discard(key)
            if not mounting:
                self.mounting.pop((key.namespace, name), None)
        if named:
            self.named[key] = named
            for name in named:
                self.mounting.setdefault((key.namespace, name), set()).add(key)

    # --- CRDs: discovery follows them ------------------------------------------------------

    async def _crd_listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        await self.rediscover()

    async def _crd_changed(self, change: str, obj: dict[str, Any]) -> None:
        await self.rediscover()
