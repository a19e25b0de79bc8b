"""`jetway replay --rerun SERVICE`: the recorded inputs fed to the installed decision functions, against a real stream.

The history is recorded once for the module by the real services (watcher, router, selector, storage and
workload on real NATS, through the apply API); each test reads it and writes nothing.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli import history
from cli.main import main
from contracts.events import Envelope, StatusCondition, StatusSlice
from contracts.pipeline import ProviderSelected, WorkloadRendered
from contracts.subjects import Key
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.rerun import changes
from services.selector import decide
from testbed.waiting import eventually
from tests.contracts.cases import AD, APC, MD, changed
from tests.support.cli import run_jetway
from tests.support.nats import nats_endpoint
from tests.support.stack import quiet, running_binding, running_pipeline, running_stack

HEAVY_RULE = "has(spec.resources.gpu) && spec.resources.gpu.count >= 4"


def provider(name: str, rule: str, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "InferenceProviderConfig",
        "metadata": {"name": name},
        "spec": {
            "capabilities": {"engines": [{"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True}]},
            "selectionRules": [{"condition": rule, "priority": priority}],
        },
        "status": {"ready": True, "version": f"{name}:1"},
    }


@dataclass(frozen=True)
class Recorded:
    url: str
    big_selected: int  # the sequence of the selector's decision for md/big (provider "heavy")
    last: int


async def _record(url: str, directory: Path) -> Recorded:
    async with running_stack(url, directory) as stack, running_pipeline(url) as pipeline, running_binding(url, ready_timeout=20) as binding:
        assert (await stack.apply(provider("heavy", HEAVY_RULE, 900)))[0] == 201
        assert (await stack.apply(provider("light", "true", 800)))[0] == 201
        assert (await stack.apply(changed(MD, {"metadata.name": "big", "spec.resources.gpu.count": 4})))[0] == 201
        assert (await stack.apply(changed(MD, {"metadata.name": "small"})))[0] == 201
        assert (await stack.apply(APC))[0] == 201
        assert (await stack.apply(changed(AD, {"spec.model.deploymentRef.name": "small"})))[0] == 201

        async def rendered() -> bool:
            for name in ("big", "small"):
                _, view = await stack.get(f"/v1/kinds/md/{name}")
                if not any(c["type"] == "ResourceCreated" for c in view["status"].get("conditions", [])):
                    return False
            _, agent = await stack.get("/v1/kinds/agentdeployment/sre-bot")
            return any(c["type"] == "ModelBound" for c in agent["status"].get("conditions", []))

        await eventually(rendered, timeout=30, message="both deployments rendered")
        runners = [*pipeline, binding, stack.watcher.runner, stack.router.runner]
        await eventually(lambda: quiet(binding.nc, runners), timeout=30, message="every service caught up")
    nc = await connect(url, name="read")
    try:
        items = await EventStore(nc, producer="t").read("jetway.evt.>")
    finally:
        await nc.close()
    envelopes = [i for i in items if isinstance(i, Envelope)]
    big = [e for e in envelopes if e.subject == Key("ModelDeployment", "default", "big").subject("selector")]
    assert len(big) == 1 and isinstance(big[0].event, ProviderSelected) and big[0].event.provider == "heavy"
    return Recorded(url, big[0].seq, envelopes[-1].seq)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    directory = tmp_path_factory.mktemp("rerun")
    with nats_endpoint(directory / "nats") as endpoint:
        yield asyncio.run(_record(endpoint.url, directory))


def rerun(recorded: Recorded, service: str, ref: str | None = None, *, until: int | None = None, output: str = "text") -> tuple[int, str]:
    """In this process, so that a decision changed by the test is the installed one."""
    out = io.StringIO()
    point = str(until) if until is not None else None
    code = history.run(history.rerun(recorded.url, service, ref, None, point, output, out=out))
    return code, out.getvalue()


@pytest.mark.parametrize("service", ["selector", "storage", "workload", "binding"])
def test_the_installed_code_decides_what_was_recorded(recorded: Recorded, service: str) -> None:
    shown = run_jetway("replay", "--rerun", service, "--nats", recorded.url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(f"# the {service} service as installed now, given the ")
    assert f"events it had seen in jetway up's stream (up to sequence {recorded.last}), decides again" in shown.stdout
    summary = shown.stdout.splitlines()[-1]
    assert summary.endswith(", 0 differ"), shown.stdout
    compared = int(summary.split()[1])
    assert compared >= 2, shown.stdout


def test_a_changed_decision_is_shown_per_resource_and_field(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    original = decide.evaluate

    def heavy_never_holds(condition: str, spec: dict[str, Any]) -> tuple[bool, str | None]:
        return (False, None) if condition == HEAVY_RULE else original(condition, spec)

    monkeypatch.setattr(decide, "evaluate", heavy_never_holds)  # the upgrade: the heavy provider's rule no longer wins
    code, out = rerun(recorded, "selector")
    assert code == 1, out
    lines = out.splitlines()
    assert f"ModelDeployment/default/big: seq {recorded.big_selected} recorded ProviderSelected.v1, new ProviderSelected.v1" in lines
    assert '  - status.fields.provider.name: "heavy"' in lines and '  + status.fields.provider.name: "light"' in lines
    assert '  - provider: "heavy"' in lines and '  + provider: "light"' in lines
    assert '  - status.conditions[ProviderSelected].message: "Provider heavy auto-selected"' in lines
    assert '  + status.conditions[ProviderSelected].message: "Provider light auto-selected"' in lines
    assert not any("small" in line for line in lines), "md/small chose light before and after"
    assert not any("lastTransitionTime" in line for line in lines)
    assert lines[-1].endswith(", 1 differ")

    code, out = rerun(recorded, "selector", output="json")
    assert code == 1
    body = json.loads(out)
    assert [d["resource"] for d in body["differ"]] == ["ModelDeployment/default/big"]
    assert {"path": "status.fields.provider.name", "recorded": "heavy", "new": "light"} in body["differ"][0]["changes"]

    code, out = rerun(recorded, "selector", "md/small")  # one resource: only its decisions are compared
    assert code == 0 and out.splitlines()[-1].endswith(", 0 differ"), out


def test_until_bounds_the_rerun(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decide, "evaluate", lambda condition, spec: (False, None))  # no rule holds any more
    code, out = rerun(recorded, "selector", until=recorded.big_selected - 1)
    assert code == 0 and "ModelDeployment/default/big:" not in out, "the decision for big is after the point"
    assert f"(up to sequence {recorded.big_selected - 1})," in out.splitlines()[0]
    code, out = rerun(recorded, "selector", until=recorded.big_selected)
    assert code == 1 and f"ModelDeployment/default/big: seq {recorded.big_selected}" in out, out


def test_an_unknown_or_online_only_service_is_a_clear_error(recorded: Recorded) -> None:
    unknown = run_jetway("replay", "--rerun", "selectr", "--nats", recorded.url)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert unknown.stderr.strip() == (
        "error: unknown service 'selectr' (these can be rerun: selector, storage, workload, binding; not offline: watcher, router, gateway)"
    )
    online = run_jetway("replay", "--rerun", "router", "--nats", "nats://127.0.0.1:1")  # refused before connecting
    assert online.returncode == 2 and online.stderr.startswith("error: router cannot be rerun offline: it decides a member's health")
    assert main(["replay", "--rerun", "watcher", "--nats", recorded.url]) == 2


def test_differences_name_conditions_by_type_objects_by_kind_and_name_and_fields_by_path() -> None:
    def rendered(replicas: int, reason: str, stamp: str) -> WorkloadRendered:
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qwen"}, "spec": {"replicas": replicas}}
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "qwen"}, "spec": {"ports": [{"port": 8000}]}}
        condition = StatusCondition("ResourceCreated", "True", reason, "created", stamp, 1)
        return WorkloadRendered(
            generation=1, provider="vllm", objects=(deployment, service), status=StatusSlice(conditions=(condition,), phase="Deploying")
        )

    recorded, new = rendered(1, "Created", "2026-01-01T00:00:00Z"), rendered(2, "Rendered", "2026-02-02T00:00:00Z")
    assert [(c.path, c.recorded, c.new) for c in changes(recorded, new)] == [
        ("status.conditions[ResourceCreated].reason", "Created", "Rendered"),
        ("objects[Deployment/qwen].spec.replicas", 1, 2),
    ], "transition times are not a difference"
    assert changes(recorded, rendered(1, "Created", "2026-03-03T00:00:00Z")) == []
