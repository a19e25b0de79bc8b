"""Direct vLLM image resolution against a real OCI registry on 127.0.0.1: go-containerregistry's registry
server, built from its Go module (testbed/registry/build.py), with images pushed by crane. No mock of the
client: Jetway's registry edge (services/workload/registry.py, python-dxf) talks HTTP to the registry, and
the digest it resolves is compared with the one the registry gives (`crane digest`).

Without Go these tests skip with the reason, except under CI=true, where they are required (as the real
control plane's are, tests/conftest.py); a failed build or start is a failure, never a skip.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contracts.events import Envelope
from contracts.subjects import Key
from runtime.bus import connect
from runtime.eventstore import EventStore
from runtime.service import Runner
from runtime.settings import Images, Settings
from services import catalog
from services.workload import registry
from services.workload.handlers import WorkloadService
from testbed.registry.fixtures import oci
from testbed.registry.server import Registry
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, running_stack, started

__all__ = ["oci"]  # the registry fixture (testbed/registry/fixtures.py)

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
RESOLVING = Settings(images=Images(resolution="registry"))  # JETWAY_IMAGE_RESOLUTION=registry: standalone, it is off


def test_a_tag_resolves_to_the_digest_the_registry_gives_it(oci: Registry) -> None:
    answer = registry.lookup(oci.ref("acme/vllm:cuda12"), now=NOW)
    assert answer.error == ""
    assert answer.digest == oci.digest("acme/vllm:cuda12")
    assert answer.resolved == f"{oci.host}/acme/vllm@{answer.digest}"
    # crane leaves the config's created unset (the zero time): the OCI label says when it was built
    assert oci.config("acme/vllm:cuda12")["created"] == "0001-01-01T00:00:00Z"
    assert (answer.created_at, answer.revision, answer.age) == ("2026-05-01T00:00:00Z", "abc123", "3d")


def test_the_creation_time_comes_from_the_image_config_when_it_has_one(oci: Registry) -> None:
    answer = registry.lookup(oci.ref("acme/vllm:configured"), now=NOW)
    assert answer.digest == oci.digest("acme/vllm:configured")
    assert (answer.created_at, answer.revision, answer.age) == ("2026-04-01T10:20:30Z", "def456", "33d")


def test_an_index_resolves_to_its_own_digest_and_its_linux_amd64_image_gives_the_provenance(oci: Registry) -> None:
    answer = registry.lookup(oci.ref("acme/vllm:multi"), now=NOW)
    assert answer.digest == oci.digest("acme/vllm:multi") != oci.digest("acme/vllm:cuda12")
    assert (answer.created_at, answer.revision) == ("2026-05-01T00:00:00Z", "abc123")


def test_an_unknown_tag_is_the_registrys_answer_in_jetways_words(oci: Registry) -> None:
    answer = registry.lookup(oci.ref("acme/vllm:missing"))
    assert not answer.digest and not answer.resolved
    assert answer.error.startswith(f"registry {oci.host} answered HTTP 404")
    assert "MANIFEST_UNKNOWN" in answer.error


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_registry_is_said_so_and_no_credential_leaks(oci: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    # the HTTP client goes through a proxy whose URL carries credentials, and the proxy is not there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, f"http://jetway:s3cret-proxy-password@127.0.0.1:{_closed_port()}")
    answer = registry.lookup(oci.ref("acme/vllm:cuda12"))
    assert answer.error == f"cannot reach registry {oci.host}"
    assert "s3cret" not in repr(answer)


async def test_a_registry_that_never_answers_is_given_up_on_in_time() -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepts, reads nothing, answers nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        answer = await registry.RegistryResolver(timeout=1.0).resolve(f"127.0.0.1:{port}/acme/vllm:cuda12")
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert not answer.digest
    assert answer.error in (f"registry 127.0.0.1:{port} did not answer in time", f"registry 127.0.0.1:{port} did not answer within 1 s")


# --- through the services: the resolution recorded as an event, shown in status, reused ---------------------------


@pytest.fixture
async def stack(nats: NatsEndpoint, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats.url, tmp_path) as running:
        yield running


class Pipeline:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.runners: list[Runner] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self, runners: list[Runner]) -> None:
        tasks = [asyncio.create_task(r.run()) for r in runners]
        self.runners += runners
        self.tasks += tasks
        await asyncio.wait_for(asyncio.gather(*(r.ready.wait() for r in runners)), 20)

    async def stop(self, runner: Runner) -> None:
        index = self.runners.index(runner)
        runner.stop()
        await asyncio.wait_for(asyncio.gather(self.tasks.pop(index), return_exceptions=True), 20)
        self.runners.pop(index)


@pytest.fixture
async def services(stack: Stack) -> AsyncIterator[Pipeline]:
    nc = await connect(stack.nats_url, name="pipeline")
    running = Pipeline(stack)
    await running.start(await started(nc, catalog.PIPELINE, RESOLVING))
    yield running
    for runner in list(running.runners):
        await running.stop(runner)
    await nc.close()


async def workload_history(stack: Stack, name: str) -> list[str]:
    nc = await connect(stack.nats_url, name="read")
    try:
        items = await EventStore(nc, producer="t").read(Key("ModelDeployment", "default", name).subject("workload"))
        return [i.type for i in items if isinstance(i, Envelope)]
    finally:
        await nc.close()


async def status_when(stack: Stack, name: str, check: Any, message: str) -> dict[str, Any]:
    async def current() -> dict[str, Any] | None:
        code, view = await stack.get(f"/v1/kinds/md/{name}")
        return view["status"] if code == 200 and check(view["status"]) else None

    found: dict[str, Any] = await eventually(current, timeout=20, message=message)
    return found


def reasons(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions", [])}


async def test_the_workload_records_the_resolution_shows_it_and_reuses_it_while_requested_is_unchanged(
    oci: Registry, stack: Stack, services: Pipeline
) -> None:
    image = oci.ref("acme/vllm:cuda12")
    manifest = changed(MD, {"metadata.name": "custom", "spec.provider": {"name": "vllm"}, "spec.engine.image": image})
    assert (await stack.apply(manifest))[0] == 201
    status = await status_when(stack, "custom", lambda s: "ImageResolved" in reasons(s), "the image resolved")
    digest = oci.digest("acme/vllm:cuda12")
    assert status["image"] == {
        "requested": image,
        "resolved": f"{oci.host}/acme/vllm@{digest}",
        "repository": f"{oci.host}/acme/vllm",
        "tag": "cuda12",
        "digest": digest,
        "source": "custom",
        "createdAt": "2026-05-01T00:00:00Z",
        "revision": "abc123",
        "age": status["image"]["age"],
        "verificationMessage": "Image attestation/signature verification is not implemented by this controller",
        "message": f'Resolved Direct vLLM image "{image}" to "{oci.host}/acme/vllm@{digest}" from custom selection.',
    }
    assert reasons(status)["ImageResolved"] == ("True", "ImageResolved")
    assert reasons(status)["UnsupportedImage"] == ("True", "CustomImage")
    assert reasons(status)["ImageVerified"] == ("Unknown", "VerificationNotImplemented")
    assert reasons(status)["ProviderCompatible"] == ("True", "CompatibilityVerified")
    _, objects = await stack.get("/v1/kinds/md/custom/objects")
    assert objects["objects"]["workload"][0]["spec"]["template"]["spec"]["containers"][0]["image"] == image  # the user's tag runs

    # a restart of the workload service decides the same from the recorded resolution: nothing new is recorded
    recorded = await workload_history(stack, "custom")
    assert recorded == ["WorkloadRendered.v1"]
    workload = next(r for r in services.runners if isinstance(r.service, WorkloadService))
    await services.stop(workload)
    nc = await connect(stack.nats_url, name="workload-again")
    try:
        await services.start(await started(nc, ("workload",), RESOLVING))
        assert await workload_history(stack, "custom") == recorded

        # the registry forgets the tag; a new generation with the same image reuses the resolution, asking nothing
        oci.crane("delete", f"{oci.host}/acme/vllm@{digest}")
        assert (await stack.apply(changed(manifest, {"spec.scaling": {"replicas": 2}})))[0] == 200
        status = await status_when(stack, "custom", lambda s: s.get("observedGeneration") == 2, "generation 2 decided")
        assert reasons(status)["ImageResolved"] == ("True", "ImageResolutionReused")
        assert status["image"]["digest"] == digest
        assert status["image"]["message"].startswith(f'Reused resolved Direct vLLM image "{image}"')

        # a user image the registry does not know is reported, not fatal: the pods run the tag as written
        missing = oci.ref("acme/vllm:missing")
        assert (await stack.apply(changed(manifest, {"spec.engine.image": missing})))[0] == 200
        status = await status_when(stack, "custom", lambda s: s.get("observedGeneration") == 3, "generation 3 decided")
        assert reasons(status)["ImageResolved"] == ("False", "ImageResolutionFailed")
        assert status["phase"] == "Pending" and reasons(status)["ResourceCreated"] == ("True", "ResourceCreated")
        assert status["image"]["message"] == (
            f'Failed to resolve Direct vLLM image "{missing}" from custom selection: registry {oci.host} answered HTTP 404 '
            "(MANIFEST_UNKNOWN: Unknown manifest). Continuing with the user-specified image reference."
        )
        _, objects = await stack.get("/v1/kinds/md/custom/objects")
        assert objects["objects"]["workload"][0]["spec"]["template"]["spec"]["containers"][0]["image"] == missing
    finally:
        for runner in [r for r in services.runners if isinstance(r.service, WorkloadService)]:
            await services.stop(runner)
        await nc.close()
