"""The Grafana dashboard (deploy/monitoring/grafana-dashboard.json) parses, and asks only for metrics that exist:
the services' (runtime/metrics.py) and the router's, named here."""

from __future__ import annotations

import json
import re
from typing import Any

from prometheus_client import Counter, Histogram

from runtime import metrics
from tests.support.cli import ROOT

ROUTER = {
    "jetway_router_requests_total",
    "jetway_router_request_duration_seconds_bucket",
    "jetway_router_time_to_first_token_seconds_bucket",
    "jetway_router_inter_token_latency_seconds_bucket",
    "jetway_router_tokens_total",
    "jetway_router_in_flight",
    "jetway_router_retries_total",
    "jetway_router_unavailable_total",
    "jetway_router_policy_choices_total",
    "jetway_router_key_requests_total",
}
SERIES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
METRIC = re.compile(r"\b(jetway_[a-z0-9_]+)")


def services() -> dict[str, set[str]]:
    """Each metric runtime/metrics.py defines, with its series; found by looking at the module, so that a metric
    added there is checked here."""
    collectors = [v for v in vars(metrics).values() if isinstance(v, Counter | Histogram | metrics.Watched)]
    return {family.name: {family.name + suffix for suffix in SERIES[family.type]} for c in collectors for family in c.collect()}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return found


def test_the_dashboard_parses_and_queries_only_metrics_that_exist() -> None:
    dashboard = json.loads((ROOT / "deploy" / "monitoring" / "grafana-dashboard.json").read_text())
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"]
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    defined = services()
    known = set().union(*defined.values()) | ROUTER
    assert {"jetway_events_handled_total", "jetway_consumer_lag", "jetway_reconcile_duration_seconds_bucket"} <= known
    used: set[str] = set()
    graphs = [p for p in panels(dashboard) if p["type"] != "row"]
    assert len({p["id"] for p in panels(dashboard)}) == len(panels(dashboard))
    for panel in graphs:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(METRIC.findall(target["expr"]))
            assert names and names <= known, (panel["title"], names - known)
            used |= names
    assert [name for name, series in defined.items() if not series & used] == []  # every metric has a panel
    assert used >= ROUTER
