"""The router's Prometheus metrics (docs/router.md, "Metrics"), exposed through prometheus_client's default
registry: GET /metrics on the router's port, and on the health port with the services' own (docs/metrics.md).

The hot path keeps plain counters: a request adds to a few ints and one histogram's bucket list, on the
event loop, with no lock (prometheus_client's own metrics take a lock per increment, which measured as a
tenth of the router's per-request time). A collector turns them into metric families when scraped; the
exposition format is prometheus_client's. One recorder per process (`RECORDER`): several routers in one
process (tests) add to the same series, as they would to prometheus_client's metrics.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# Latency buckets (seconds): a proxied request is ~1 ms, a generation seconds to minutes.
LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TTFT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class Histogram:
    """Counts per bucket (the last is +Inf) and the sum; cumulated only when scraped."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        cumulative, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), list(self.counts), strict=True):
            cumulative += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        return out


class Recorder:
    """What the router counts; a request pays a dict lookup and an addition per figure."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.durations: dict[str, Histogram] = {}
        self.first_token: dict[tuple[str, str], Histogram] = {}
        self.inter_token: dict[str, Histogram] = {}
        self.tokens: dict[tuple[str, str, str], int] = {}
        self.retries: dict[str, int] = {}
        self.unavailable: dict[str, int] = {}
        self.choices: dict[tuple[str, str], int] = {}
        self.key_requests: dict[tuple[str, str], int] = {}
        self.key_tokens: dict[str, int] = {}
        self.hold_outcomes: dict[tuple[str, str], int] = {}
        self.fair_outcomes: dict[tuple[str, str], int] = {}
        self.in_flight: Callable[[], Iterable[tuple[str, int]]] = list
        self.held: Callable[[], Iterable[tuple[str, int]]] = list  # (model, requests held now): services/router/hold.py
        self.queued: Callable[[], Iterable[tuple[str, int]]] = list  # (model, requests waiting now): services/router/fair.py

    def answered(self, model: str, member: str, endpoint: str, status: int, seconds: float) -> None:
        labels = (model, member, endpoint, str(status))
        self.requests[labels] = self.requests.get(labels, 0) + 1
        duration = self.durations.get(endpoint)
        if duration is None:
            duration = self.durations[endpoint] = Histogram(LATENCY)
        duration.observe(seconds)

    def stream(self, model: str, member: str, first: float, events: int, span: float) -> None:
        """A stream's time to first bytes, and the mean gap between its `events` events over `span` seconds after it."""
        histogram = self.first_token.get((model, member))
        if histogram is None:
            histogram = self.first_token[(model, member)] = Histogram(TTFT)
        histogram.observe(first)
        if events > 1:
            itl = self.inter_token.get(model)
            if itl is None:
                itl = self.inter_token[model] = Histogram(ITL)
            itl.observe(span / (events - 1))

    def used(self, model: str, member: str, prompt: int, completion: int) -> None:
        for kind, count in (("prompt", prompt), ("completion", completion)):
            if count:
                labels = (model, member, kind)
                self.tokens[labels] = self.tokens.get(labels, 0) + count

    def retried(self, model: str) -> None:
        self.retries[model] = self.retries.get(model, 0) + 1

    def refused(self, model: str) -> None:
        self.unavailable[model] = self.unavailable.get(model, 0) + 1

    def unheld(self, model: str, outcome: str) -> None:
        """A held request's end: released, timed_out, full (refused at once), gone, stopping."""
        labels = (model, outcome)
        self.hold_outcomes[labels] = self.hold_outcomes.get(labels, 0) + 1

    def unqueued(self, model: str, outcome: str) -> None:
        """A request that met a saturated model's fair queue: released, full, tenant_full, timed_out, gone, stopping."""
        labels = (model, outcome)
        self.fair_outcomes[labels] = self.fair_outcomes.get(labels, 0) + 1

    def chose(self, policy: str, reason: str) -> None:
        labels = (policy, reason)
        self.choices[labels] = self.choices.get(labels, 0) + 1

    def key(self, name: str, status: int, tokens: int) -> None:
        labels = (name, str(status))
        self.key_requests[labels] = self.key_requests.get(labels, 0) + 1
        if tokens:
            self.key_tokens[name] = self.key_tokens.get(name, 0) + tokens


COUNTERS = (  # name, help, labels, the Recorder's attribute
    (
        "jetway_router_requests",
        "Requests answered, by model, member, endpoint and status",
        ["model", "member", "endpoint", "status"],
        "requests",
    ),
    ("jetway_router_tokens", "Tokens the members reported in `usage`, by kind", ["model", "member", "kind"], "tokens"),
    ("jetway_router_retries", "Requests retried on another member after one failed before answering", ["model"], "retries"),
    ("jetway_router_unavailable", "Requests answered 503: no member could take them", ["model"], "unavailable"),
    ("jetway_router_policy_choices", "Members chosen, by policy and reason", ["policy", "reason"], "choices"),
    ("jetway_router_key_requests", "Requests by client key (its name) and status", ["key", "status"], "key_requests"),
    ("jetway_router_key_tokens", "Tokens counted against a client key", ["key"], "key_tokens"),
    (
        "jetway_router_hold_outcomes",
        "Requests held for a model starting from zero, by how the hold ended: released, timed_out, full, gone, stopping",
        ["model", "outcome"],
        "hold_outcomes",
    ),
    (
        "jetway_router_fair_outcomes",
        "Requests that met a saturated model's fair queue, by how it ended: released, full, tenant_full, timed_out, gone, stopping",
        ["model", "outcome"],
        "fair_outcomes",
    ),
)
HISTOGRAMS = (
    ("jetway_router_request_duration_seconds", "From the request read to the answer's end", ["endpoint"], "durations"),
    (
        "jetway_router_time_to_first_token_seconds",
        "Streams: from the request read to its first body bytes",
        ["model", "member"],
        "first_token",
    ),
    ("jetway_router_inter_token_latency_seconds", "Streams: the mean time between events after the first", ["model"], "inter_token"),
)


def _labels(key: Any) -> list[str]:
    return list(key) if isinstance(key, tuple) else [key]


class RouterCollector(Collector):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        r = self.recorder
        for name, documentation, labels, attribute in COUNTERS:
            counter = CounterMetricFamily(name, documentation, labels=labels)
            for key, value in list(getattr(r, attribute).items()):  # a copy: a scrape runs in a thread while requests add
                counter.add_metric(_labels(key), value)
            yield counter
        for name, documentation, labels, attribute in HISTOGRAMS:
            histogram = HistogramMetricFamily(name, documentation, labels=labels)
            for key, found in list(getattr(r, attribute).items()):
                histogram.add_metric(_labels(key), found.buckets(), sum_value=found.total)
            yield histogram
        in_flight = GaugeMetricFamily("jetway_router_in_flight", "Requests in flight to each member from this router", labels=["member"])
        for member, count in list(r.in_flight()):
            in_flight.add_metric([member], count)
        yield in_flight
        held = GaugeMetricFamily("jetway_router_held_requests", "Requests held now for a model no member is ready for", labels=["model"])
        for model, count in list(r.held()):
            held.add_metric([model], count)
        yield held
        queued = GaugeMetricFamily("jetway_router_fair_queued", "Requests waiting now in a saturated model's fair queue", labels=["model"])
        for model, count in list(r.queued()):
            queued.add_metric([model], count)
        yield queued


RECORDER = Recorder()
REGISTRY.register(RouterCollector(RECORDER))


# `usage` in an OpenAI answer (prompt_tokens, completion_tokens) or an Anthropic one (input_tokens, output_tokens);
# read from the answer's last bytes, where both put it (a stream's last event with include_usage, a body's end).
USAGE_TAIL = 4096
_PROMPT = (b'"prompt_tokens":', b'"input_tokens":')
_COMPLETION = (b'"completion_tokens":', b'"output_tokens":')


_NUMBER = re.compile(rb"\s*(\d+)")


def _last_number(tail: bytes, names: tuple[bytes, bytes]) -> int:
    for name in names:
        at = tail.rfind(name)
        if at != -1:
            found = _NUMBER.match(tail, at + len(name))
            return int(found.group(1)) if found else 0
    return 0


def usage(tail: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens in the last `usage` of an answer's tail; (0, 0) when it has none."""
    if b"_tokens" not in tail:  # most chunks of a stream
        return 0, 0
    return _last_number(tail, _PROMPT), _last_number(tail, _COMPLETION)
