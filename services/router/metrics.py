"""The router's Prometheus metrics, on prometheus_client's default registry (GET /metrics on the router's port,
and on the health port with the services' own: docs/metrics.md).

The hot path pays a dict lookup and an `inc()`/`observe()` per figure: the labelled children are cached
here by their label values, since prometheus_client's `labels()` costs more than the increment. In-flight
counts are not kept twice: a collector reads the router's own counters when scraped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# Latency buckets (seconds): a proxied request is ~1 ms, a generation seconds to minutes.
LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TTFT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

REQUESTS = Counter(
    "jetway_router_requests", "Requests answered, by model, member, endpoint and status", ["model", "member", "endpoint", "status"]
)
DURATION = Histogram("jetway_router_request_duration_seconds", "From the request read to the answer's end", ["endpoint"], buckets=LATENCY)
FIRST_TOKEN = Histogram(
    "jetway_router_time_to_first_token_seconds", "Streams: from the request read to its first body bytes", ["model", "member"], buckets=TTFT
)
INTER_TOKEN = Histogram(
    "jetway_router_inter_token_latency_seconds", "Streams: the mean time between events after the first", ["model"], buckets=ITL
)
TOKENS = Counter(
    "jetway_router_tokens", "Tokens the upstreams reported in `usage`, by kind (prompt, completion)", ["model", "member", "kind"]
)
RETRIES = Counter("jetway_router_retries", "Requests retried on another member after one failed before answering", ["model"])
UNAVAILABLE = Counter("jetway_router_unavailable", "Requests answered 503: no member could take them", ["model"])
CHOICES = Counter("jetway_router_policy_choices", "Members chosen, by policy and reason", ["policy", "reason"])
KEY_REQUESTS = Counter("jetway_router_key_requests", "Requests by client key (its name), by status", ["key", "status"])
KEY_TOKENS = Counter("jetway_router_key_tokens", "Tokens reported for a client key's requests", ["key"])


class InFlight(Collector):
    """`jetway_router_in_flight{member}`, read from the router's own counts when scraped."""

    def __init__(self, counts: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self.counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily("jetway_router_in_flight", "Requests in flight to each member from this router", labels=["member"])
        for member, count in self.counts():
            family.add_metric([member], count)
        yield family

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # read live: nothing to check at registration


_in_flight: InFlight | None = None


def watch_in_flight(counts: Callable[[], Iterable[tuple[str, int]]]) -> None:
    """Report these counts as in flight (the last router built in a process is the one reported)."""
    global _in_flight
    if _in_flight is not None:
        _in_flight.counts = counts
        return
    _in_flight = InFlight(counts)
    REGISTRY.register(_in_flight)


class Recorder:
    """The children of the labelled metrics, cached by label values (the hot path's only cost is a lookup)."""

    def __init__(self) -> None:
        self._requests: dict[tuple[str, str, str, int], Counter] = {}
        self._durations: dict[str, Histogram] = {}
        self._first: dict[tuple[str, str], Histogram] = {}
        self._itl: dict[str, Histogram] = {}
        self._tokens: dict[tuple[str, str], tuple[Counter, Counter]] = {}
        self._choices: dict[tuple[str, str], Counter] = {}
        self._keys: dict[tuple[str, int], Counter] = {}
        self._key_tokens: dict[str, Counter] = {}

    def answered(self, model: str, member: str, endpoint: str, status: int, seconds: float) -> None:
        labels = (model, member, endpoint, status)
        child = self._requests.get(labels)
        if child is None:
            child = self._requests[labels] = REQUESTS.labels(model, member, endpoint, str(status))
        child.inc()
        duration = self._durations.get(endpoint)
        if duration is None:
            duration = self._durations[endpoint] = DURATION.labels(endpoint)
        duration.observe(seconds)

    def stream(self, model: str, member: str, first: float, events: int, span: float) -> None:
        """A stream's time to first bytes, and the mean gap between its `events` events over `span` seconds after it."""
        child = self._first.get((model, member))
        if child is None:
            child = self._first[(model, member)] = FIRST_TOKEN.labels(model, member)
        child.observe(first)
        if events > 1:
            itl = self._itl.get(model)
            if itl is None:
                itl = self._itl[model] = INTER_TOKEN.labels(model)
            itl.observe(span / (events - 1))

    def tokens(self, model: str, member: str, prompt: int, completion: int) -> None:
        pair = self._tokens.get((model, member))
        if pair is None:
            pair = self._tokens[(model, member)] = (TOKENS.labels(model, member, "prompt"), TOKENS.labels(model, member, "completion"))
        if prompt:
            pair[0].inc(prompt)
        if completion:
            pair[1].inc(completion)

    def retried(self, model: str) -> None:
        RETRIES.labels(model).inc()  # rare: no cache

    def unavailable(self, model: str) -> None:
        UNAVAILABLE.labels(model).inc()

    def chose(self, policy: str, reason: str) -> None:
        child = self._choices.get((policy, reason))
        if child is None:
            child = self._choices[(policy, reason)] = CHOICES.labels(policy, reason)
        child.inc()

    def key(self, name: str, status: int, tokens: int) -> None:
        child = self._keys.get((name, status))
        if child is None:
            child = self._keys[(name, status)] = KEY_REQUESTS.labels(name, str(status))
        child.inc()
        if tokens:
            spent = self._key_tokens.get(name)
            if spent is None:
                spent = self._key_tokens[name] = KEY_TOKENS.labels(name)
            spent.inc(tokens)


# `usage` in an OpenAI answer (prompt_tokens, completion_tokens) or an Anthropic one (input_tokens, output_tokens);
# read from the answer's last bytes, where both put it (a stream's last event with include_usage, a body's end).
_USAGE = re.compile(rb'"(prompt_tokens|completion_tokens|input_tokens|output_tokens)"\s*:\s*(\d+)')
USAGE_TAIL = 4096


def usage(tail: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens in the last `usage` of an answer's tail; (0, 0) when it has none."""
    prompt = completion = 0
    if b"_tokens" not in tail:  # most chunks of a stream: no usage, no regex
        return 0, 0
    for name, value in _USAGE.findall(tail):
        if name in (b"prompt_tokens", b"input_tokens"):
            prompt = int(value)
        else:
            completion = int(value)
    return prompt, completion
