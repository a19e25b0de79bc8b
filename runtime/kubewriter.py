"""The Kubernetes writer: server-side apply with one field manager per service, and nothing
written over an object Jetway does not own.

While `run` runs (a service's duty beside its consumer), the writer keeps a cache of each kind it
has written (runtime/informer.py: Jetway's objects only, by their label), as controller-runtime
reads from its informers. An object the cache shows already as it would be written is neither read
nor written again, so a resync that finds nothing changed costs no request; one changed or deleted
behind Jetway's back differs from what is wanted there and is written. What the cache does not show
(not listed yet, or no object of Jetway's by that name) is read first, as without a cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from contracts.objects import APP_MANAGED_BY, CONTROLLER, MANAGED_SELECTOR, MODEL_DEPLOYMENT, OWNER_UID
from contracts.subjects import Key
from runtime.informer import Cache
from runtime.kube import Kube, KubeError, NotFound
from runtime.tasks import cancel_and_wait


class ResourceConflict(Exception):
    """An object of that name exists and is not controlled by the resource that wants it."""

    def __init__(self, message: str, *, kind: str = "", name: str = "", namespace: str = "", held: str = "") -> None:
        super().__init__(message)
        self.kind, self.name, self.namespace = kind, name, namespace  # the object in the way
        self.held = held  # who controls it instead ("not owned by anything", "owned by Kind/name (uid ...)")


class NotServed(Exception):
    """The cluster does not serve a kind Jetway needs to write (its operator is not installed)."""


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The owner that controls `obj`: its controller reference, or for a cluster-scoped object made for a
    namespaced resource, the owner uid it records (an owner reference there would be invalid)."""
    meta = obj.get("metadata", {})
    found = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if found is None and (meta.get("annotations") or {}).get(OWNER_UID):
        labels = meta.get("labels") or {}
        found = {"kind": "ModelDeployment", "name": labels.get(MODEL_DEPLOYMENT, meta.get("name")), "uid": meta["annotations"][OWNER_UID]}
    return found


def _as_written(obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of an object: what a writer sets, not who set it (managedFields) or its status."""
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def holds(live: Any, wanted: Any) -> bool:
    """Whether `live` shows every field `wanted` sets, as it sets it: applying `wanted` would change nothing.
    What others added (defaults, other managers' fields) does not count; a list must match item by item."""
    if live is None and wanted in ({}, []):
        return True  # a server keeps no empty map or list (a Deployment's template annotations {})
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(holds(live.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(map(holds, live, wanted))
    return bool(live == wanted)


class KubeWriter:
    cluster = True

    def __init__(self, kube: Kube, *, retry_delay: float = 1.0) -> None:
        self.kube = kube
        self.retry_delay = retry_delay
        self.caches: dict[tuple[str, str], Cache] = {}  # (apiVersion, kind) → Jetway's objects of it, while `run` runs
        self.skipped = 0  # objects not written: the cache showed them as wanted
        self._following: list[asyncio.Task[None]] | None = None  # the caches' informers; None: `run` is not running

    async def run(self) -> None:
        """Follow each kind written, from its first write on, until cancelled (then the caches go)."""
        self._following = []
        try:
            await asyncio.Event().wait()
        finally:
            following, self._following = self._following, None
            self.caches = {}
            with contextlib.suppress(asyncio.CancelledError):  # again and again: a library can lose a cancellation (runtime/tasks.py)
                await cancel_and_wait(*following)

    def _cached(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object as the cache shows it; None when the cache cannot say (not running, not listed yet, not
        one of Jetway's by its label, or absent: an object by that name may still be someone else's)."""
        meta = obj["metadata"]
        if self._following is None or (meta.get("labels") or {}).get(APP_MANAGED_BY) != CONTROLLER or _controller(obj) is None:
            return None
        which = (obj["apiVersion"], obj["kind"])
        cache = self.caches.get(which)
        if cache is None:
            cache = Cache(self.kube, *which, label_selector=MANAGED_SELECTOR, keep=_as_written, retry_delay=self.retry_delay)
            self.caches[which] = cache
            self._following.append(asyncio.create_task(cache.run(), name=f"cache-{obj['kind']}"))
        return cache.get(meta.get("namespace") or "", meta["name"]) if cache.synced else None

    async def _resource_known(self, obj: dict[str, Any]) -> None:
        try:
            await self.kube.served(obj["apiVersion"], obj["kind"])  # discovers again if a CRD may have appeared since
        except NotFound:
            raise NotServed(f"the cluster does not serve {obj['kind']} ({obj['apiVersion']}): is its operator installed?") from None

    async def apply(self, owner: Key, objects: Sequence[dict[str, Any]], *, manager: str, deleted: bool = False) -> None:
        """`deleted`: the watcher reported one of them deleted, which this writer's cache may not show yet:
        every one is read and written."""
        # every object is checked before any is written: a conflict or a kind not served writes none of them
        for obj in objects:
            await self._resource_known(obj)
        seen = [None if deleted else self._cached(obj) for obj in objects]
        for obj, live in zip(objects, seen, strict=True):
            await self._not_taken(owner, obj, live)
        for obj, live in zip(objects, seen, strict=True):
            meta = obj["metadata"]
            if live is not None and holds(live, obj):
                self.skipped += 1
                continue
            try:
                await self.kube.apply(obj, manager=f"jetway-{manager}")
            except KubeError as exc:
                raise KubeError(exc.status, exc.reason, f"{obj['kind']}/{meta['name']}: {exc.message}") from None

    async def _not_taken(self, owner: Key, obj: dict[str, Any], cached: dict[str, Any] | None = None) -> None:
        """ResourceConflict when an object of that name exists under another controller, or none; read from
        the server unless the cache shows it."""
        meta = obj["metadata"]
        wanted = _controller(obj)
        if wanted is None:
            return
        existing = cached or await self.kube.get_or_none(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        if existing is None:
            return
        current = _controller(existing)
        if current is None or current.get("uid") != wanted.get("uid"):
            held = f"owned by {current['kind']}/{current['name']} (uid {current['uid']})" if current else "not owned by anything"
            raise ResourceConflict(
                f"resource {meta.get('namespace', '')}/{meta['name']} exists but is not managed by this {owner.kind} ({held})",
                kind=obj["kind"],
                name=meta["name"],
                namespace=meta.get("namespace", ""),
                held=held,
            )

    async def delete(self, objects: Sequence[dict[str, Any]], *, manager: str) -> None:
        for obj in objects:
            meta = obj["metadata"]
            try:
                await self.kube.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            except NotFound:
                continue
