"""The `oci` fixture: a real OCI registry on 127.0.0.1 with the image-resolution tests' images in it, built
once per machine from go-containerregistry's Go module and started for the module that uses it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.registry.build import REGISTRY
from testbed.registry.server import Registry, RegistryError

NO_GO = (
    "the test registry is built from Go modules (go-containerregistry) and this machine has no Go: "
    "install Go 1.26+ and run the suite again (docs/development.md)"
)
LABELS = {"org.opencontainers.image.created": "2026-05-01T00:00:00Z", "org.opencontainers.image.revision": "abc123"}


@pytest.fixture(scope="module")
def oci(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The registry, built once per machine (cached) and started for this module, with the test images in it."""
    bin_dir = REGISTRY.for_tests(request, NO_GO)
    server = Registry(bin_dir, tmp_path_factory.mktemp("registry"))
    try:
        server.start()
        server.push_labelled("acme/vllm:cuda12", LABELS)
        server.push_with_config(
            "acme/vllm:configured",
            {
                "architecture": "amd64",
                "os": "linux",
                "created": "2026-04-01T10:20:30.5Z",
                "config": {"Labels": {"org.opencontainers.image.revision": "def456"}},
            },
        )
        server.push_index("acme/vllm:multi", "acme/vllm:cuda12")
    except RegistryError as failure:
        server.stop()
        pytest.fail(str(failure), pytrace=False)
    yield server
    server.stop()
