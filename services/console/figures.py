"""The pool members page's live router figures, from the router's own metrics (services/router/metrics.py).

Under `jetway up` the router runs in the apply API's process, so the console reads its `RECORDER` (the
counters `GET /metrics` exposes) directly. A `Sample` is a copy of the cumulative counts at one moment;
`figures(before, now)` turns two samples into rates and quantiles over the time between them, per member and
per model. Both are plain data: the decisions are tested without a router (tests/console/test_console_members.py).

- requests per second: answers counted between the two samples, over the seconds between them;
- in flight: the router's outstanding requests per member now (a model's is not kept: "—");
- error rate: answers with a status of 500 or more (the member failed, or none could take it: 503) over all
  answers between the samples; 4xx are the client's mistakes, not counted; None when nothing was answered;
- TTFT p50/p90: from the time-to-first-token histogram's buckets added between the samples, interpolated
  within a bucket as Prometheus' `histogram_quantile` does; None when no stream started meanwhile;
- requests: the cumulative count since the router started (what the page shows before a second sample).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

WINDOW = 10.0  # seconds: rates are over the last samples within this window
SPACING = 1.0  # seconds: a poll sooner than this after the last sample reuses it (several tabs, one series)

Buckets = tuple[int, ...]  # counts per bucket of TTFT (not cumulative), the last +Inf


class Histogram(Protocol):
    @property
    def bounds(self) -> tuple[float, ...]: ...

    @property
    def counts(self) -> Sequence[int]: ...


class Counters(Protocol):
    """The router's counters in this process (services/router/metrics.py `Recorder`), as the figures read them:
    given to the console by whoever runs both (`jetway up`), so the console imports nothing of the router."""

    @property
    def requests(self) -> Mapping[tuple[str, str, str, str], int]: ...

    @property
    def first_token(self) -> Mapping[tuple[str, str], Histogram]: ...

    def in_flight(self) -> Iterable[tuple[str, int]]: ...


@dataclass(frozen=True)
class Sample:
    """The router's cumulative counts at `at` (seconds on a monotonic clock)."""

    at: float
    requests: Mapping[tuple[str, str, int], int] = field(default_factory=dict)  # (model, member, status) → answers
    first_token: Mapping[tuple[str, str], Buckets] = field(default_factory=dict)  # (model, member) → bucket counts
    in_flight: Mapping[str, int] = field(default_factory=dict)  # member → outstanding now
    bounds: tuple[float, ...] = ()  # the TTFT histogram's upper bounds (seconds; services/router/metrics.py TTFT)


def sample(recorder: Counters, at: float) -> Sample:
    """A copy of what `recorder` counted so far (the endpoint label summed away)."""
    requests: dict[tuple[str, str, int], int] = {}
    for (model, member, _endpoint, status), count in list(recorder.requests.items()):
        key = (model, member, int(status))
        requests[key] = requests.get(key, 0) + count
    histograms = list(recorder.first_token.items())
    first_token = {key: tuple(histogram.counts) for key, histogram in histograms}
    in_flight: dict[str, int] = {}
    for member, count in list(recorder.in_flight()):
        in_flight[member] = in_flight.get(member, 0) + count
    return Sample(at, requests, first_token, in_flight, histograms[0][1].bounds if histograms else ())


def from_exposition(texts: list[str], at: float) -> Sample:
    """A sample from routers' `/metrics` texts (a cluster: one per router pod), their counts added together.

    Reads `jetway_router_requests_total`, `jetway_router_time_to_first_token_seconds_bucket` (cumulative in the
    exposition, per bucket here) and `jetway_router_in_flight`, with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    requests: dict[tuple[str, str, int], int] = {}
    cumulative: dict[tuple[str, str], dict[float, float]] = {}
    in_flight: dict[str, int] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for found in family.samples:
                labels = found.labels
                if found.name == "jetway_router_requests_total":
                    answered = (labels.get("model", ""), labels.get("member", ""), int(labels.get("status", "0") or 0))
                    requests[answered] = requests.get(answered, 0) + int(found.value)
                elif found.name == "jetway_router_time_to_first_token_seconds_bucket":
                    series = cumulative.setdefault((labels.get("model", ""), labels.get("member", "")), {})
                    bound = float(labels.get("le", "+Inf"))
                    series[bound] = series.get(bound, 0.0) + found.value
                elif found.name == "jetway_router_in_flight":
                    member = labels.get("member", "")
                    in_flight[member] = in_flight.get(member, 0) + int(found.value)
    first_token: dict[tuple[str, str], Buckets] = {}
    bounds: tuple[float, ...] = ()
    for key, series in cumulative.items():
        ordered = sorted(series.items())
        bounds = tuple(b for b, _ in ordered if b != float("inf"))
        counts, previous = [], 0.0
        for _, total in ordered:
            counts.append(int(total - previous))
            previous = total
        first_token[key] = tuple(counts)
    return Sample(at, requests, first_token, in_flight, bounds)


def keep(samples: list[Sample], now: Sample, window: float = WINDOW, spacing: float = SPACING) -> list[Sample]:
    """The samples to keep after taking `now`: those within `window` seconds of it (the oldest is the baseline),
    `now` added unless the last kept one is under `spacing` seconds old."""
    kept = [s for s in samples if now.at - s.at <= window]
    if not kept or now.at - kept[-1].at >= spacing:
        kept.append(now)
    return kept


def quantile(q: float, counts: Buckets, bounds: tuple[float, ...]) -> float | None:
    """The q-quantile of a histogram's bucket counts, interpolated linearly within its bucket (Prometheus'
    `histogram_quantile`); the highest finite bound when it falls in +Inf; None for an empty histogram."""
    total = sum(counts)
    if total == 0 or not bounds:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(bounds):
                return bounds[-1]
            lower = bounds[index - 1] if index > 0 else 0.0
            return lower + (bounds[index] - lower) * (rank - seen) / count
        seen += count
    return bounds[-1]


@dataclass
class _Tally:
    total: int = 0
    answered: int = 0
    errors: int = 0
    first_token: list[int] = field(default_factory=list)  # bucket counts added between the samples

    def add_first_token(self, added: list[int]) -> None:
        self.first_token = [a + b for a, b in zip(self.first_token or [0] * len(added), added, strict=True)]

    def figures(self, seconds: float, in_flight: int | None, bounds: tuple[float, ...]) -> dict[str, Any]:
        p50, p90 = quantile(0.5, tuple(self.first_token), bounds), quantile(0.9, tuple(self.first_token), bounds)
        return {
            "requests": self.total,
            "rps": round(self.answered / seconds, 3) if seconds > 0 else None,
            "in_flight": in_flight,
            "error_rate": round(self.errors / self.answered, 4) if self.answered else None,
            "ttft_p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "ttft_p90_ms": None if p90 is None else round(p90 * 1000, 1),
        }


def figures(before: Sample | None, now: Sample) -> dict[str, Any]:
    """Per member and per model: requests (cumulative), rps, in flight, error rate, TTFT p50/p90 (ms), over the
    time from `before` to `now` (rates None without `before`). Requests no member took (member "") count for
    the model only."""
    seconds = now.at - before.at if before is not None else 0.0
    members: dict[str, _Tally] = {}
    models: dict[str, _Tally] = {}
    for (model, member, status), count in now.requests.items():
        gained = count - (before.requests.get((model, member, status), 0) if before is not None else count)
        gained = max(gained, 0)  # a counter never goes back; a restarted router would
        for tally in [models.setdefault(model, _Tally())] + ([members.setdefault(member, _Tally())] if member else []):
            tally.total += count
            tally.answered += gained
            if status >= 500:
                tally.errors += gained
    for (model, member), counts in now.first_token.items():
        earlier = before.first_token.get((model, member)) if before is not None else None
        added = [max(c - (earlier[i] if earlier else 0), 0) for i, c in enumerate(counts)] if before is not None else [0] * len(counts)
        for tally in (models.setdefault(model, _Tally()), members.setdefault(member, _Tally())):
            tally.add_first_token(added)
    for member in now.in_flight:
        members.setdefault(member, _Tally())
    return {
        "seconds": round(seconds, 3),
        "members": {name: t.figures(seconds, now.in_flight.get(name, 0), now.bounds) for name, t in sorted(members.items())},
        "models": {name: t.figures(seconds, None, now.bounds) for name, t in sorted(models.items())},
    }
