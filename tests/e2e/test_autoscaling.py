"""Autoscaling on the test stack (issue 25): a deployment applied through the apply API, the selector, storage and
workload services beside it, and the scaler on the same NATS. A member's load published as the router publishes it
changes the replicas of the Deployment the workload service renders (what `jetway render md/NAME` and the console
show), a narrower range clamps it at once, and a deployment without autoscaling is rendered from its spec again.
Standalone, where Jetway runs no engines, the scaler only recommends. Nothing sleeps: each step waits on what the
API shows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from contracts.scaling import LOAD_SIGNALS, MemberLoad
from runtime.bus import connect
from runtime.service import Runner
from services.scaler.handlers import ScalerService
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.nats import NatsEndpoint
from tests.support.stack import SETTINGS, Stack, running_pipeline, running_stack


@dataclass
class Scaled:
    stack: Stack
    scaler: ScalerService

    async def apply(self, autoscaling: dict[str, Any] | None, **changes: Any) -> None:
        doc = changed(MD, {"spec.provider": {"name": "vllm"}, **changes})
        if autoscaling is not None:
            doc["spec"].setdefault("scaling", {})["autoscaling"] = autoscaling
        status, body = await self.stack.apply(doc)
        assert status in (200, 201), body

    async def replicas(self) -> int | None:
        """The replicas of the Deployment the workload service recorded for the deployment (None: none yet)."""
        code, body = await self.stack.get("/v1/kinds/ModelDeployment/qwen/objects?namespace=default")
        if code != 200:
            return None
        found = [o for o in body["objects"].get("workload", []) if o["kind"] == "Deployment"]
        return int(found[0]["spec"]["replicas"]) if found else None

    async def rendered_at(self, count: int) -> None:
        async def check() -> bool:
            return await self.replicas() == count

        await eventually(check, timeout=30, message=f"the Deployment rendered with {count} replicas")

    async def load(self, waiting: int) -> None:
        reading = MemberLoad(member="qwen", deployment="default/qwen", models=("qwen",), healthy=True, running=1, waiting=waiting)
        nc = self.stack.watcher.runner.nc
        await nc.publish(LOAD_SIGNALS, msgspec.json.encode(reading))
        await nc.flush()


@pytest.fixture
def applied() -> bool:
    return True


@pytest.fixture
async def scaled(nats: NatsEndpoint, tmp_path: Path, applied: bool) -> AsyncIterator[Scaled]:
    async with running_stack(nats.url, tmp_path) as stack, running_pipeline(nats.url):
        nc = await connect(nats.url, name="scaler")
        # as in a cluster (`applied`), where the workload renders what it decides; the tick is the tests' own
        scaler = ScalerService(applied=applied, tick=0.05, clock=lambda: datetime.now(UTC))
        runner = Runner(scaler, nc, SETTINGS)
        task = asyncio.create_task(runner.run())
        try:
            await asyncio.wait_for(runner.ready.wait(), 20)
            yield Scaled(stack, scaler)
        finally:
            runner.stop()
            await asyncio.gather(task, return_exceptions=True)
            await nc.close()


async def test_the_workload_renders_the_count_the_scaler_decided(scaled: Scaled) -> None:
    await scaled.apply({"minReplicas": 1, "maxReplicas": 4}, **{"spec.scaling.replicas": 1})
    await scaled.rendered_at(1)

    await scaled.load(waiting=10)  # 10 waiting on the one replica serving, 4 per replica wanted
    await scaled.rendered_at(3)
    code, shown = await scaled.stack.get("/v1/kinds/ModelDeployment/qwen?namespace=default")  # `jetway get md qwen -o yaml`
    assert code == 200 and shown["status"]["replicas"]["desired"] == 3

    await scaled.apply({"minReplicas": 1, "maxReplicas": 2}, **{"spec.scaling.replicas": 1})  # a narrower range
    await scaled.rendered_at(2)

    await scaled.apply(None, **{"spec.scaling.replicas": 1})  # no autoscaling: the spec's count again
    await scaled.rendered_at(1)


async def test_a_starting_count_outside_the_range_renders_within_it(scaled: Scaled) -> None:
    await scaled.apply({"minReplicas": 2, "maxReplicas": 3}, **{"spec.scaling.replicas": 9})
    await scaled.rendered_at(3)


@pytest.mark.parametrize("applied", [False])
async def test_standalone_the_scaler_recommends_and_the_render_keeps_the_spec(scaled: Scaled) -> None:
    await scaled.apply({"minReplicas": 1, "maxReplicas": 4}, **{"spec.scaling.replicas": 1})
    await scaled.rendered_at(1)
    await scaled.load(waiting=10)

    async def recommended() -> bool:
        code, body = await scaled.stack.get("/v1/kinds/ModelDeployment/qwen/history?namespace=default")
        return code == 200 and any("would scale (recommendation) 1 -> 3" in str(entry.get("summary")) for entry in body.get("events", []))

    await eventually(recommended, timeout=30, message="the recommendation in the deployment's history")
    assert await scaled.replicas() == 1, "a recommendation changes nothing"
