"""Build the test registry (go-containerregistry's OCI distribution server) and crane from Go modules,
as testbed/cluster/build.py builds the control plane: once per machine into a cache folder
(`python -m testbed.registry.build`), with progress printed and a lock. Nothing is downloaded but Go
modules, through the Go module proxy.
"""

from __future__ import annotations

import sys
from pathlib import Path

from testbed.cluster.build import BuildFailed, GoBuild, Target, go_binary

HERE = Path(__file__).resolve().parent
GOMOD = HERE / "gomod"
GGCR = "v0.22.1"  # github.com/google/go-containerregistry, as gomod/go.mod pins it

REGISTRY = GoBuild(
    what="test registry",
    cache_env="JETWAY_REGISTRY_CACHE",
    cache_folder="registry",
    versions=f"go-containerregistry-{GGCR}",
    targets=(Target(GOMOD, ("jetway.dev/testregistry/registry", "github.com/google/go-containerregistry/cmd/crane")),),
    binaries=("registry", "crane"),
    key_files=lambda: sorted(path for path in GOMOD.rglob("*") if path.is_file()),
)
build = REGISTRY.build

__all__ = ["REGISTRY", "BuildFailed", "build", "go_binary"]


if __name__ == "__main__":
    sys.exit(REGISTRY.main())
