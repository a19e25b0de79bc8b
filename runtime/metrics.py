"""The services' Prometheus metrics, on prometheus_client's default registry: `GET /metrics` on the health
port (runtime/entry.py), and on the apply API under `jetway up` (docs/metrics.md).

One process is one registry, and `jetway up` runs every service in one process, so every metric carries a
`service` label. The hot path pays little: each runner caches its labelled children (`RunnerMetrics`), since
prometheus_client's `labels()` costs several times the increment, and counts handled events a batch at a time.
A rebuild folds 100k+ events/s and is counted once, at its end. The gauges (consumer lag, leases held) are not
kept twice: a collector reads the runners' and the leases' own figures when scraped.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable, Sequence

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from contracts.events import Event, type_tag

# Seconds: a reconcile that only appends a decision takes a millisecond or two; one that writes to the
# Kubernetes API, tens to hundreds of them; a batch of 64, up to the sum.
DURATION = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HANDLED = Counter(
    "jetway_events_handled",
    "Events a runner folded from its feeds, once each, by type and how their handling ended",
    ["service", "type", "outcome"],
)
RETRIED = Counter("jetway_events_retried", "Reconciles of a key run again after a failure, or when it asked (Again)", ["service"])
DEAD_LETTERED = Counter("jetway_events_dead_lettered", "Events moved to the dead-letter subject jetway.dlq.<service>", ["service"])
PERMANENT = Counter("jetway_reconcile_permanent_failures", "Reconciles that raised Permanent: recorded, not retried", ["service"])
REPLAYED = Counter("jetway_events_replayed", "Events folded by rebuilds at start (after the snapshot, when one was loaded)", ["service"])
RECONCILE = Histogram("jetway_reconcile_duration_seconds", "Time of each call of a service's reconcile", ["service"], buckets=DURATION)
HANDLER = Histogram(
    "jetway_handler_duration_seconds", "Time to fold one delivered batch and reconcile what it affects", ["service"], buckets=DURATION
)
SNAPSHOTS_WRITTEN = Counter("jetway_snapshots_written", "Snapshots of a projection stored", ["service"])


class RunnerMetrics:
    """One runner's children, cached. Handled events are counted a batch at a time: per event, an `inc()` and
    the event's type tag cost 8% of a fold-only batch (0.6 µs of 7); a list of their classes, counted at its end, 1%."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._handled: dict[tuple[type[Event] | str, str], Counter] = {}
        self.retried = RETRIED.labels(service)
        self.dead_lettered = DEAD_LETTERED.labels(service)
        self.permanent = PERMANENT.labels(service)
        self.replayed = REPLAYED.labels(service)
        self.reconcile = RECONCILE.labels(service)
        self.handler = HANDLER.labels(service)

    def handled(self, events: Sequence[type[Event] | str], outcome: str) -> None:
        """Count events, given by their classes (or a type label, for what has none), that ended with `outcome`."""
        if not events:
            return
        for kind, count in collections.Counter(events).items():
            child = self._handled.get((kind, outcome))
            if child is None:
                label = kind if isinstance(kind, str) else type_tag(kind)
                child = self._handled[(kind, outcome)] = HANDLED.labels(self.service, label, outcome)
            child.inc(count)


Lags = Callable[[], Iterable[tuple[str, int]]]  # (feed, messages its consumer still has to deliver)


class Watched(Collector):
    """`jetway_consumer_lag{service,feed}` and `jetway_leases_held{service}`, read from the live runners and
    leases when scraped, summed over those of one service in this process (each shard of a replica follows the
    global partition `g` itself). Scrapes run in a thread: each source copies what it reads in one step."""

    def __init__(self) -> None:
        self.lags: dict[object, tuple[str, Lags]] = {}
        self.leases: dict[object, tuple[str, Callable[[], int]]] = {}

    def collect(self) -> Iterable[GaugeMetricFamily]:
        lags: dict[tuple[str, str], int] = {}
        for service, source in list(self.lags.values()):
            for feed, pending in source():
                lags[(service, feed)] = lags.get((service, feed), 0) + pending
        lag = GaugeMetricFamily(
            "jetway_consumer_lag",
            "Messages a runner's consumer still had to deliver, as its last delivery said",
            labels=["service", "feed"],
        )
        for labels, value in sorted(lags.items()):
            lag.add_metric(labels, value)
        yield lag
        leases: dict[str, int] = {}
        for service, count in list(self.leases.values()):
            leases[service] = leases.get(service, 0) + count()
        held = GaugeMetricFamily("jetway_leases_held", "Partition leases this process holds and may act on", labels=["service"])
        for service, value in sorted(leases.items()):
            held.add_metric([service], value)
        yield held

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # read live: nothing to check at registration


WATCHED = Watched()
REGISTRY.register(WATCHED)


def watch_lag(owner: object, service: str, source: Lags) -> None:
    """Report `source` as `service`'s consumer lag until `unwatch(owner)`."""
    WATCHED.lags[owner] = (service, source)


def watch_leases(owner: object, service: str, count: Callable[[], int]) -> None:
    """Report `count` as leases `service` holds until `unwatch(owner)`."""
    WATCHED.leases[owner] = (service, count)


def unwatch(owner: object) -> None:
    WATCHED.lags.pop(owner, None)
    WATCHED.leases.pop(owner, None)


async def handle(request: web.Request) -> web.Response:
    """`GET /metrics`: every metric in this process (the router's too, under `jetway up`). Generated in a thread:
    with the router's histograms it is a few milliseconds of work the event loop does not wait for."""
    body = await asyncio.to_thread(generate_latest, REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


__all__ = [
    "DEAD_LETTERED",
    "HANDLED",
    "HANDLER",
    "PERMANENT",
    "RECONCILE",
    "REPLAYED",
    "RETRIED",
    "SNAPSHOTS_WRITTEN",
    "RunnerMetrics",
    "handle",
    "unwatch",
    "watch_lag",
    "watch_leases",
]
