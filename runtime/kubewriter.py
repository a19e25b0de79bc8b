"""The Kubernetes writer: server-side apply with one field manager per service, and nothing
written over an object Jetway does not own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contracts.objects import MODEL_DEPLOYMENT, OWNER_UID
from contracts.subjects import Key
from runtime.kube import Kube, KubeError, NotFound


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


class KubeWriter:
    cluster = True

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def _resource_known(self, obj: dict[str, Any]) -> None:
        try:
            await self.kube.served(obj["apiVersion"], obj["kind"])  # discovers again if a CRD may have appeared since
        except NotFound:
            raise NotServed(f"the cluster does not serve {obj['kind']} ({obj['apiVersion']}): is its operator installed?") from None

    async def apply(self, owner: Key, objects: Sequence[dict[str, Any]], *, manager: str) -> None:
        # every object is checked before any is written: a conflict or a kind not served writes none of them
        for obj in objects:
            await self._resource_known(obj)
            await self._not_taken(owner, obj)
        for obj in objects:
            meta = obj["metadata"]
            try:
                await self.kube.apply(obj, manager=f"jetway-{manager}")
            except KubeError as exc:
                raise KubeError(exc.status, exc.reason, f"{obj['kind']}/{meta['name']}: {exc.message}") from None

    async def _not_taken(self, owner: Key, obj: dict[str, Any]) -> None:
        """ResourceConflict when an object of that name exists under another controller, or none."""
        meta = obj["metadata"]
        wanted = _controller(obj)
        if wanted is None:
            return
        existing = await self.kube.get_or_none(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
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
