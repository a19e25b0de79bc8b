"""One composition root (services/catalog.py): each service says once what it is (`SERVICE` in its main.py), and
`python -m services.<name>`, `jetway up`, the tests and the benchmarks all start it through that declaration."""

from __future__ import annotations

import importlib
import runpy
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from contracts.subjects import ALL_PARTITIONS
from runtime import entry
from runtime import settings as tree
from runtime.bus import connect
from runtime.entry import Context, Declared
from runtime.replica import Replica
from runtime.service import Runner
from services import catalog
from services.scaler.handlers import ScalerService
from services.workload.handlers import WorkloadService
from services.workload.registry import RegistryResolver
from services.workload.render import kaito
from tests.support.nats import NatsEndpoint

SERVICES = Path(__file__).resolve().parent.parent / "services"


@pytest.fixture
async def nc(nats: NatsEndpoint) -> AsyncIterator[Client]:
    client = await connect(nats.url, name="catalog")
    yield client
    await client.close()


def test_every_service_package_is_in_the_catalog_as_it_declares_itself() -> None:
    packages = sorted(p.parent.name for p in SERVICES.glob("*/main.py"))
    assert sorted(catalog.SERVICES) == packages
    for name in packages:
        assert catalog.SERVICES[name] is importlib.import_module(f"services.{name}.main").SERVICE


@pytest.mark.parametrize("name", sorted(catalog.SERVICES))
def test_python_m_services_name_starts_the_catalogs_declaration(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Declared] = []
    monkeypatch.setattr(entry, "main", started.append)  # what the process would run: runtime/entry.py with this
    runpy.run_module(f"services.{name}", run_name="__main__")
    assert started == [catalog.SERVICES[name]] and started[0] is catalog.SERVICES[name]


async def test_jetway_ups_standalone_services_are_one_plain_runner_each_over_every_partition(nc: Client) -> None:
    """What `jetway up` starts through the catalog: no leases, no replica's shards, and nothing besides the runners
    (no server, readiness check or stop hook: up serves and stops only its own)."""
    context = Context(nc, None, tree.Settings(), replicated=False)
    started = await catalog.start(context, catalog.STANDALONE)
    assert catalog.STANDALONE == ("selector", "storage", "workload", "binding", "scaler")
    assert [r.name for r in started] == list(catalog.STANDALONE)
    assert all(isinstance(r, Runner) and r.partition is None for r in started)
    assert (context.after_ready, context.checks, context.before_stop) == ([], [], [])
    workload = catalog.runners(started)[2].service
    assert isinstance(workload, WorkloadService) and workload.resolver is None  # standalone: image resolution off
    scaler = catalog.runners(started)[4].service
    assert isinstance(scaler, ScalerService) and not scaler.applied, "standalone, the scaler only recommends"


async def test_the_scalers_timing_comes_from_its_settings(nc: Client) -> None:
    tuned = tree.Settings(scaler=tree.Scaler(tick=0.25, stale=30.0))
    (runner,) = catalog.runners(await catalog.start(Context(nc, None, tuned, replicated=False), ("scaler",)))
    assert isinstance(runner.service, ScalerService)
    assert (runner.service.tick, runner.service.stale_after) == (0.25, 30.0)


async def test_the_workload_takes_its_image_resolution_and_renderer_settings_from_what_up_read(
    nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `jetway up` passed them by hand before: JETWAY_IMAGE_RESOLUTION=registry (with its plain-HTTP hosts) and
    the renderers' AIRUNWAY_KAITO_* from the environment."""
    monkeypatch.setenv(kaito.GPU_INSTANCE_TYPE, "Standard_NC24ads_A100_v4")
    images = tree.Images(resolution="registry", plain_http=("registry.lab:5000",))
    context = Context(nc, None, tree.Settings(images=images), replicated=False)
    [runner] = catalog.runners(await catalog.start(context, ("workload",)))
    workload = runner.service
    assert isinstance(workload, WorkloadService)
    assert workload.resolver == RegistryResolver(named_plain=frozenset({"registry.lab:5000"}))
    assert workload.settings == {kaito.GPU_INSTANCE_TYPE: "Standard_NC24ads_A100_v4"}


async def test_a_process_start_is_a_leased_replica_named_by_its_settings(nc: Client) -> None:
    """The cluster path, unchanged: replicated by default, sharing the partitions through leases."""
    settings = tree.Settings(leases=tree.Leases(replica="selector-7", ttl=4.0))
    [replica] = await catalog.start(Context(nc, None, settings), ("selector",))
    assert isinstance(replica, Replica)
    assert (replica.name, replica.replica, replica.leases.settings.ttl) == ("selector", "selector-7", 4.0)
    assert set(replica.leases.partitions) == set(ALL_PARTITIONS)


async def test_a_cluster_only_service_is_refused_standalone_naming_who_runs_it(nc: Client) -> None:
    with pytest.raises(ValueError, match="watcher runs in a cluster only; standalone, `jetway up` composes it itself"):
        await catalog.start(Context(nc, None, replicated=False), ("watcher",))


async def test_a_replicated_start_is_not_taken_for_plain_runners(nc: Client) -> None:
    with pytest.raises(TypeError, match="replicated=False"):
        catalog.runners(await catalog.start(Context(nc, None), ("binding",)))
