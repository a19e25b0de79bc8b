"""Build the test registry (go-containerregistry's OCI distribution server) and crane from Go modules.

As tests/cluster/build.py builds the control plane: the binaries go into a cache folder keyed by the
pinned version, the Go toolchain and a hash of gomod/'s files, so each machine builds them once
(`python -m tests.registry.build`); progress is printed; a lock keeps two test processes from
building at once. Nothing is downloaded but Go modules, through the Go module proxy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.cluster.build import BuildFailed, Target, _build_target, _go_version, _locked, go_binary

HERE = Path(__file__).resolve().parent
GOMOD = HERE / "gomod"
GGCR = "v0.22.1"  # github.com/google/go-containerregistry, as gomod/go.mod pins it
TARGET = Target(GOMOD, ("jetway.dev/testregistry/registry", "github.com/google/go-containerregistry/cmd/crane"))
BINARIES = ("registry", "crane")

__all__ = ["BINARIES", "BuildFailed", "build", "cached_bin_dir", "go_binary"]


def cache_root() -> Path:
    if os.environ.get("JETWAY_REGISTRY_CACHE"):
        return Path(os.environ["JETWAY_REGISTRY_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jetway" / "registry"


def cache_key(go_version: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(GOMOD.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(GOMOD)).encode() + b"\0" + path.read_bytes())
    return f"go-containerregistry-{GGCR}_{go_version}_{digest.hexdigest()[:12]}"


def cached_bin_dir() -> Path | None:
    go = go_binary()
    if go is None:
        return None
    folder = cache_root() / cache_key(_go_version(go)) / "bin"
    return folder if all((folder / name).is_file() for name in BINARIES) else None


def build(say: Callable[[str], None] | None = None) -> Path:
    """The folder holding `registry` and `crane`, building them if needed."""
    say = say or (lambda message: print(f"[test registry] {message}", file=sys.stderr, flush=True))
    go = go_binary()
    if go is None:
        raise BuildFailed("Go is not installed: the test registry is built from Go modules (install Go 1.26 or newer)")
    key = cache_key(_go_version(go))
    folder = cache_root() / key
    with _locked(cache_root() / f"{key}.lock"):
        found = cached_bin_dir()
        if found is not None:
            return found
        started = time.monotonic()
        say(f"building the test registry and crane (go-containerregistry {GGCR}) into {folder}; once per machine")
        staging = folder / "bin.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        _build_target(go, TARGET, staging, {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}, say)
        for name in BINARIES:
            if not (staging / name).is_file():
                raise BuildFailed(f"the build produced no {name} in {staging}")
        final = folder / "bin"
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        say(f"built in {time.monotonic() - started:.0f} s: {final}")
        return final


def main() -> int:
    try:
        print(build())
    except BuildFailed as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
