"""List-then-watch of one kind, for any reader of the cluster (the watcher's ingest, a writer's cache).

An `Informer` lists, hands the list to its reader, then watches from the list's resourceVersion.
A dropped watch resumes from the last version seen (bookmarks keep it fresh), so nothing is listed
again; `410 Gone` (the history compacted past that version) or an event too long to read lists
again, and the list tells the reader what the gap hid, deletions included. A reader cut off from the
API or NATS fails as a dropped watch does: the watch resumes from before the event, which comes
again. A reader that fails otherwise has a bug that may come again: the informer starts over from a
list after a backoff (`Restarts`), and never gives up. It ends when the kind is no longer served.

A `Cache` is an informer whose reader keeps the objects it was shown, for a reader that must not ask
the API server each time (runtime/kubewriter.py's resync, as controller-runtime resyncs from its cache).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from runtime.kube import EventTooLarge, Gone, Kube, KubeError, NotFound

log = logging.getLogger("jetway.informer")
OnChange = Callable[[str, dict[str, Any]], Awaitable[None]]  # (ADDED | MODIFIED | DELETED, object)
OnList = Callable[[str, list[dict[str, Any]]], Awaitable[None]]  # (kind, every object the list showed)
TRANSIENT = (TimeoutError, aiohttp.ClientError, OSError)  # the API or NATS out of reach for a moment


@dataclass(frozen=True)
class Restarts:
    """When a follow that failed starts again: `base` after its first failure, doubling with each failure in
    a row up to `cap`; a follow that got through its list before failing counts from the first again."""

    base: float
    cap: float
    failures: int = 0  # in a row, without a list got through

    def failed(self, *, progressed: bool) -> Restarts:
        return replace(self, failures=1 if progressed else self.failures + 1)

    @property
    def delay(self) -> float:
        return min(self.cap, self.base * 2 ** max(0, self.failures - 1))


class HandlerFailed(Exception):
    """A reader's handler raised: what it was handling may be half done, so the informer starts again from a list."""


async def _handling(handled: Awaitable[None]) -> None:
    """A handler that could not reach the API or NATS fails as a dropped watch does; any other failure is a bug."""
    try:
        await handled
    except TRANSIENT:
        raise
    except Exception as exc:
        raise HandlerFailed(f"{type(exc).__name__}: {exc}") from exc


class Informer:
    """Follow one kind (in one namespace, or all) until it is no longer served or the task is cancelled."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        kind: str,
        *,
        on_change: OnChange,
        on_list: OnList,
        namespace: str | None = None,
        label_selector: str | None = None,
        metadata_only: bool = False,
        retry_delay: float = 1.0,
        restart_cap: float = 60.0,
        logger: logging.Logger = log,
        synced: asyncio.Event | None = None,
    ) -> None:
        self.kube = kube
        self.api_version, self.kind = api_version, kind
        self.on_change, self.on_list = on_change, on_list
        self.namespace = namespace
        self.label_selector = label_selector
        self.metadata_only = metadata_only
        self.retry_delay = retry_delay
        self.restart_cap = restart_cap
        self.log = logger  # the reader's: a dropped watch is logged as its own
        self.version = ""  # the last resourceVersion seen: where a dropped watch resumes ("": list first)
        self.lists = 0  # lists got through (handled by the reader)
        self.restarts = 0  # starts over after a failure the loop itself does not handle
        self.synced = synced or asyncio.Event()  # set once the first list is handled (a reader may hold it across informers)

    async def run(self) -> None:
        """List and watch; when that fails in a way `_list_and_watch` does not handle, log it and start again
        from a list after a backoff."""
        restarts = Restarts(self.retry_delay, self.restart_cap)
        while True:
            lists = self.lists
            try:
                await self._list_and_watch()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                restarts = restarts.failed(progressed=self.lists != lists)
                self.restarts += 1
                self.log.error(
                    "following %s failed (%s): starting it again from a list in %.1fs (%d failure(s) in a row)",
                    self.kind,
                    exc,
                    restarts.delay,
                    restarts.failures,
                    exc_info=exc,
                )
                await asyncio.sleep(restarts.delay)

    async def _list(self) -> None:
        items, listed_at = await self.kube.list(
            self.api_version, self.kind, self.namespace, label_selector=self.label_selector, metadata_only=self.metadata_only
        )
        for item in items:
            item.setdefault("apiVersion", self.api_version)
            item.setdefault("kind", self.kind)
        await _handling(self.on_list(self.kind, items))
        self.version = listed_at  # only once handled: a list that broke off is listed again
        self.lists += 1
        self.synced.set()

    async def _list_and_watch(self) -> None:
        """List, then watch from there; resume after a drop, relist after 410, stop when the kind is no longer served."""
        self.version = ""
        while True:
            try:
                if not self.version:
                    await self._list()
                async for change, obj in self.kube.watch(
                    self.api_version,
                    self.kind,
                    self.version,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    metadata_only=self.metadata_only,
                ):
                    if change != "BOOKMARK":
                        await _handling(self.on_change(change, obj))
                    # after handling: an event whose handler was cut off comes again
                    self.version = obj.get("metadata", {}).get("resourceVersion") or self.version
            except asyncio.CancelledError:
                raise
            except Gone:
                self.log.info("watch of %s expired: listing again", self.kind)
                self.version = ""
            except NotFound:
                self.log.info("%s is no longer served: stopped following it", self.kind)
                return
            except EventTooLarge as exc:
                self.log.error("watch of %s: %s; listing again", self.kind, exc.message)
                self.version = ""
            except (TimeoutError, KubeError, aiohttp.ClientError, OSError, ValueError) as exc:
                self.log.warning("watch of %s dropped (%s): resuming from %s", self.kind, exc, self.version or "a new list")
                await asyncio.sleep(self.retry_delay)


Where = tuple[str, str]  # (namespace, name); namespace "" for a cluster-scoped object


def where(obj: dict[str, Any]) -> Where:
    meta = obj.get("metadata", {})
    return meta.get("namespace") or "", meta["name"]


class Cache:
    """The objects of one kind as an informer last showed them, by (namespace, name). Only an answer once
    `synced` (its first list done); until then, and while its watch is away, it may be behind the server, so a
    reader decides from it only what the next resync would put right."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        kind: str,
        *,
        label_selector: str | None = None,
        namespace: str | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] = lambda obj: obj,
        retry_delay: float = 1.0,
    ) -> None:
        self.objects: dict[Where, dict[str, Any]] = {}
        self.keep = keep  # what of an object to hold (less memory: managedFields, status dropped)
        self.informer = Informer(
            kube,
            api_version,
            kind,
            on_change=self._changed,
            on_list=self._listed,
            namespace=namespace,
            label_selector=label_selector,
            retry_delay=retry_delay,
        )

    @property
    def synced(self) -> bool:
        return self.informer.synced.is_set()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    async def run(self) -> None:
        await self.informer.run()

    async def _listed(self, kind: str, items: list[dict[str, Any]]) -> None:
        self.objects = {where(obj): self.keep(obj) for obj in items}  # what the gap hid goes too

    async def _changed(self, change: str, obj: dict[str, Any]) -> None:
        if change == "DELETED":
            self.objects.pop(where(obj), None)
        else:
            self.objects[where(obj)] = self.keep(obj)
