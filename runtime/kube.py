"""Talking to Kubernetes: one small client over kubernetes-asyncio's ApiClient, for any kind.

Jetway writes Deployments, Services, PVCs, Jobs and provider custom resources alike, so it
works with unstructured objects (dicts) through the generic `call_api`: discovery maps a kind to
its path, `apply` is server-side apply with a field manager per service, `watch` streams
events. The same client talks to a real cluster (in-cluster config or $KUBECONFIG) and to the
test suite's API emulator.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("jetway.kube")
JSON = "application/json"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
# metadata only (what client-go's metadata informers ask for): the server sends each object's metadata and no
# more; a list must ask for the List form and a watch for the object form (a real server answers a watch that
# asks for the List form with an empty stream)
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
# one watch event is one object on one line; etcd holds at most ~1.5 MiB an object, so a line past this is no
# event a sane server sends, and the buffer must not grow without end
MAX_EVENT_BYTES = 16 * 1024 * 1024


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(KubeError):
    pass


class Gone(KubeError):
    """A watch's resourceVersion is too old: list again."""


class EventTooLarge(KubeError):
    """A watch event longer than MAX_EVENT_BYTES: the stream is cut (a list reads it whole)."""


async def _lines(content: aiohttp.StreamReader, what: str, limit: int) -> AsyncGenerator[bytes, None]:
    """The stream's lines as they come, each up to `limit` bytes. A watch event is a whole object on one
    line; aiohttp's readline bounds a line by its read buffer (twice it: 4 MiB with kubernetes_asyncio's
    2 MiB, 128 KiB with aiohttp's default) and raises LineTooLong, an error no caller expects."""

    def too_large() -> EventTooLarge:
        return EventTooLarge(0, "EventTooLarge", f"a watch event of {what} over {limit} bytes: the stream was cut (a list reads it)")

    buffer = bytearray()
    async for chunk in content.iter_any():
        searched = len(buffer)  # what is buffered has no newline: look only in what came
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", searched)) >= 0:
            if end - start > limit:
                raise too_large()
            yield bytes(buffer[start:end])
            start = searched = end + 1
        del buffer[:start]
        if len(buffer) > limit:
            raise too_large()
    if buffer:
        yield bytes(buffer)


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


@dataclass
class Discovery:
    """What the cluster serves: (apiVersion, kind) → resource, and the API groups present."""

    resources: dict[tuple[str, str], Resource] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)  # "group/version" pairs

    def find(self, api_version: str, kind: str) -> Resource | None:
        return self.resources.get((api_version, kind))

    def serves(self, group_version: str, plural: str | None = None) -> bool:
        if plural is None:
            return group_version in self.groups or any(k[0].split("/")[0] == group_version for k in self.resources)
        return any(r.api_version == group_version and r.plural == plural for r in self.resources.values())


def _error(exc: ApiException) -> KubeError:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (ValueError, TypeError):
        body = {}
    message = body.get("message") or str(exc.reason)
    reason = body.get("reason") or str(exc.reason)
    if exc.status == 404:
        return NotFound(404, reason, message)
    if exc.status == 410:
        return Gone(410, reason, message)
    return KubeError(int(exc.status or 0), reason, message)


class Kube:
    def __init__(self, api: kclient.ApiClient) -> None:
        self.api = api
        self.discovery = Discovery()
        self.requests: Counter[str] = Counter()  # "list <Kind>", "watch <Kind>": how often this client asked

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Kube:
        """In a pod, the service account; else $KUBECONFIG (or the given file)."""
        configuration = kclient.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kconfig.load_incluster_config(client_configuration=configuration)
        else:
            await kconfig.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=configuration)
        return cls(kclient.ApiClient(configuration))

    @classmethod
    def at(cls, host: str, token: str | None = None) -> Kube:
        configuration = kclient.Configuration(host=host)
        if token:
            configuration.api_key = {"authorization": f"Bearer {token}"}
        return cls(kclient.ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float | None = 30.0,
    ) -> Any:
        try:
            return await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": accept},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            raise _error(exc) from None

    # --- discovery -------------------------------------------------------------------------

    async def discover(self) -> Discovery:
        found = Discovery()
        versions = ["v1"]
        core = await self.request("GET", "/api")
        versions = core.get("versions", versions)
        group_versions = [("", v) for v in versions]
        groups = await self.request("GET", "/apis")
        for group in groups.get("groups", []):
            for version in group.get("versions", []):
                group_versions.append((group["name"], version["version"]))
        for group, version in group_versions:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                listing = await self.request("GET", path)
            except KubeError:
                continue
            found.groups.add(f"{group}/{version}" if group else version)
            subresources: dict[str, set[str]] = {}
            for item in listing.get("resources", []):
                if "/" in item["name"]:
                    base, sub = item["name"].split("/", 1)
                    subresources.setdefault(base, set()).add(sub)
            for item in listing.get("resources", []):
                if "/" in item["name"]:
                    continue
                resource = Resource(
                    group, version, item["kind"], item["name"], bool(item.get("namespaced")), frozenset(subresources.get(item["name"], ()))
                )
                found.resources[(resource.api_version, resource.kind)] = resource
        self.discovery = found
        return found

    def resource(self, api_version: str, kind: str) -> Resource:
        resource = self.discovery.find(api_version, kind)
        if resource is None:
            raise NotFound(404, "NotFound", f"the cluster does not serve {kind} in {api_version}")
        return resource

    async def served(self, api_version: str, kind: str) -> Resource:
        """The resource for a kind, discovering again when it is not known: a CRD may have come since."""
        if self.discovery.find(api_version, kind) is None:
            await self.discover()
        return self.resource(api_version, kind)

    # --- objects ---------------------------------------------------------------------------

    async def _locate(self, obj: dict[str, Any]) -> tuple[Resource, str | None, str]:
        resource = await self.served(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata", {})
        return resource, (meta.get("namespace") if resource.namespaced else None), meta["name"]

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        resource = await self.served(api_version, kind)
        return dict(await self.request("GET", resource.path(namespace if resource.namespaced else None, name)))

    async def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return await self.get(api_version, kind, name, namespace)
        except NotFound:
            return None

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        metadata_only: bool = False,
    ) -> tuple[list[Any], str]:
        """The objects and the list's resourceVersion; with `metadata_only`, PartialObjectMetadata items
        (kind and apiVersion those of meta.k8s.io, `metadata` the object's)."""
        resource = await self.served(api_version, kind)
        query = [("labelSelector", label_selector)] if label_selector else []
        self.requests[f"list {kind}"] += 1
        listing = await self.request(
            "GET", resource.path(namespace if resource.namespaced else None), query=query, accept=METADATA_LIST if metadata_only else JSON
        )
        # `or`: an empty PartialObjectMetadataList has "items": null on a real server
        items = list(listing.get("items") or [])
        if not metadata_only:  # a real server's list items carry no apiVersion or kind: restore them, as kopf does
            for item in items:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
        return items, str(listing.get("metadata", {}).get("resourceVersion", ""))

    async def apply(self, obj: dict[str, Any], *, manager: str, subresource: str | None = None, force: bool = True) -> dict[str, Any]:
        """Server-side apply: the fields in `obj` are this manager's; the API server merges and tracks ownership."""
        resource, namespace, name = await self._locate(obj)
        query = [("fieldManager", manager)] + ([("force", "true")] if force else [])
        return dict(await self.request("PATCH", resource.path(namespace, name, subresource), query=query, body=obj, content_type=APPLY))

    async def patch(self, obj: dict[str, Any], patch: dict[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        resource, namespace, name = await self._locate(obj)
        return dict(await self.request("PATCH", resource.path(namespace, name, subresource), body=patch, content_type=MERGE))

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        resource, namespace, _ = await self._locate(obj)
        return dict(await self.request("POST", resource.path(namespace), body=obj))

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete (background propagation); False when it was already gone."""
        resource = await self.served(api_version, kind)
        try:
            await self.request(
                "DELETE",
                resource.path(namespace if resource.namespaced else None, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except NotFound:
            return False
        return True

    async def watch(
        self,
        api_version: str,
        kind: str,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout: int = 300,
        metadata_only: bool = False,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(type, object) pairs from `resource_version` on; raises Gone when that version is too old. With
        `metadata_only` each object is a PartialObjectMetadata (bookmarks too; an ERROR's Status is as ever)."""
        resource = await self.served(api_version, kind)
        self.requests[f"watch {kind}"] += 1
        query: list[tuple[str, Any]] = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", timeout)]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        try:
            response = await self.api.call_api(
                resource.path(namespace if resource.namespaced else None),
                "GET",
                query_params=query,
                header_params={"Accept": METADATA if metadata_only else JSON},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout + 30,
            )
        except ApiException as exc:
            raise _error(exc) from None
        try:
            if response.status == 410:
                raise Gone(410, "Expired", "too old resource version")
            if response.status >= 400:
                raise KubeError(response.status, "WatchFailed", (await response.read()).decode(errors="replace")[:200])
            async with contextlib.aclosing(_lines(response.content, kind, max_event_bytes)) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object", {})
                        if status.get("code") == 410:
                            raise Gone(410, status.get("reason", "Expired"), status.get("message", "too old resource version"))
                        raise KubeError(int(status.get("code", 500)), status.get("reason", "WatchError"), status.get("message", ""))
                    yield event["type"], event["object"]
        finally:
            response.release()
