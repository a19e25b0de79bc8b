"""OpenTelemetry: a span per handled event, trace context across NATS, a few instruments.

Off by default. The standard variables turn it on: `OTEL_TRACES_EXPORTER` and
`OTEL_METRICS_EXPORTER` (`console` or `otlp`; the OTLP exporter needs the
`opentelemetry-exporter-otlp` package), `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_*`,
`OTEL_SDK_DISABLED=true` to force it off. Trace context always travels in NATS headers
(`traceparent`, `tracestate`), so a collector sees producer → consumer as one trace.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from contracts.events import TraceContext

log = logging.getLogger("jetway.telemetry")
_propagator = TraceContextTextMapPropagator()
_configured = False

tracer = trace.get_tracer("jetway")
meter = metrics.get_meter("jetway")

events_handled = meter.create_counter("jetway.events.handled", unit="{event}", description="Events a service folded and reconciled")
events_redelivered = meter.create_counter(
    "jetway.events.redelivered", unit="{event}", description="Deliveries beyond the first (a handler failed or timed out)"
)
events_dead_lettered = meter.create_counter(
    "jetway.events.dead_lettered", unit="{event}", description="Events moved to the dead-letter subject"
)
handler_duration = meter.create_histogram("jetway.handler.duration", unit="s", description="Time to fold and reconcile one delivered batch")
_lag_sources: dict[str, Callable[[], int]] = {}


def _observe_lag(options: Any) -> Iterable[metrics.Observation]:
    for service, source in list(_lag_sources.items()):
        yield metrics.Observation(source(), {"service": service})


meter.create_observable_gauge(
    "jetway.consumer.lag", callbacks=[_observe_lag], unit="{event}", description="Events stored but not yet handled by a service's consumer"
)


def register_lag(service: str, source: Callable[[], int]) -> None:
    _lag_sources[service] = source


def setup(service_name: str) -> bool:
    """Configure exporters from the OTEL_* variables; returns whether any exporter is on."""
    global _configured
    if _configured or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    traces = os.environ.get("OTEL_TRACES_EXPORTER", "none").lower()
    metric_exporter = os.environ.get("OTEL_METRICS_EXPORTER", "none").lower()
    if traces == "none" and metric_exporter == "none":
        return False
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", f"jetway-{service_name}")})
    if traces != "none":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=resource)
        exporter = _span_exporter(traces)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
    if metric_exporter != "none":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader_exporter = _metric_exporter(metric_exporter)
        if reader_exporter is not None:
            metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(reader_exporter)]))
    _configured = True
    return True


def _span_exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("OTEL_TRACES_EXPORTER=otlp needs `pip install opentelemetry-exporter-otlp`; traces stay off")
            return None
        return OTLPSpanExporter()
    log.warning("unknown OTEL_TRACES_EXPORTER %r; traces stay off", name)
    return None


def _metric_exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        except ImportError:
            log.warning("OTEL_METRICS_EXPORTER=otlp needs `pip install opentelemetry-exporter-otlp`; metrics stay off")
            return None
        return OTLPMetricExporter()
    log.warning("unknown OTEL_METRICS_EXPORTER %r; metrics stay off", name)
    return None


def current_trace() -> TraceContext:
    """The active span's context as W3C headers, for an event about to be appended."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return TraceContext(traceparent=carrier.get("traceparent", ""), tracestate=carrier.get("tracestate", ""))


def trace_headers(context: TraceContext) -> dict[str, str]:
    headers = {}
    if context.traceparent:
        headers["traceparent"] = context.traceparent
    if context.tracestate:
        headers["tracestate"] = context.tracestate
    return headers


class _HeaderGetter(Getter[Mapping[str, str]]):
    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if value else None

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier)


def context_from(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The producer's trace context from a message's headers (empty when there is none)."""
    return _propagator.extract(headers or {}, getter=_HeaderGetter())
