"""Build the real control plane (kube-apiserver, kube-controller-manager, etcd) from Go modules.

The binaries go into a cache folder keyed by the pinned versions, the Go toolchain and a hash of
the go.mod/go.sum files, so each machine builds them once: `python -m testbed.cluster.build`.
A cold build takes many minutes on 2 cores; progress is printed as packages compile. A lock
file keeps two test processes from building at once.

Nothing is downloaded but Go modules, through the Go module proxy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GOMOD = HERE / "gomod"
KUBERNETES = "v1.37.2"
ETCD = "v3.6.16"


@dataclass(frozen=True)
class Target:
    module_dir: Path
    packages: tuple[str, ...]
    stamps: tuple[str, ...] = ()  # -X settings: what the binary reports as its version
    tags: tuple[str, ...] = ()  # build tags: the features left out (containerd's storage drivers, say)


_VERSION = "k8s.io/component-base/version"
TARGETS = (
    Target(
        GOMOD / "kube",
        ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager"),
        (f"{_VERSION}.gitVersion={KUBERNETES}", f"{_VERSION}.gitMajor=1", f"{_VERSION}.gitMinor={KUBERNETES.split('.')[1]}"),
    ),
    Target(GOMOD / "etcd", ("go.etcd.io/etcd/server/v3",)),
)
BINARIES = ("kube-apiserver", "kube-controller-manager", "etcd")


class BuildFailed(RuntimeError):
    pass


def go_binary() -> str | None:
    return shutil.which("go")


def _go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Held by one process of the machine at a time (a build's cache entry: another pytest may build it too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# How long a fixture may spend on cold builds (the control plane, the node, the images), waits for another
# process's build of the same included: a cold machine's first run builds them all once (about 20 minutes on 2
# cores), and CI's 90 minutes hold that and the suite.
BUILD_LIMIT = 2700.0


@contextlib.contextmanager
def build_time() -> Iterator[None]:
    """A cold build is not a test's time: pytest-timeout's alarm for the test (its `signal` method, the real-time
    interval timer) is set to BUILD_LIMIT while the build runs, then to what the test had left. A cached build
    takes a moment either way. (A node fixture that waited for the control plane's cold build, then built the node
    and its images, failed every node test on pytest's 900 s on a fresh machine.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    left, interval = signal.setitimer(signal.ITIMER_REAL, BUILD_LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, left, interval)  # 0 (none was set): stays off


def _count_packages(go: str, target: Target, env: dict[str, str]) -> int:
    """How many packages `go build` may compile (the non-standard dependencies): the progress bar's total."""
    listed = subprocess.run(
        [
            go,
            "list",
            "-deps",
            *([f"-tags={','.join(target.tags)}"] if target.tags else []),
            "-f",
            "{{if not .Standard}}{{.ImportPath}}{{end}}",
            *target.packages,
        ],
        cwd=target.module_dir,
        capture_output=True,
        text=True,
        env=env,
    )
    if listed.returncode != 0:
        raise BuildFailed(f"go list failed in {target.module_dir}:\n{listed.stderr.strip()}")
    return sum(1 for line in listed.stdout.splitlines() if line.strip())


def _build_target(go: str, target: Target, out: Path, env: dict[str, str], say: Callable[[str], None]) -> None:
    total = _count_packages(go, target, env)
    names = ", ".join(p.rsplit("/", 1)[-1] for p in target.packages)
    say(f"building {names}: up to {total} packages")
    ldflags = " ".join(["-s", "-w", *(f"-X {stamp}" for stamp in target.stamps)])
    tags = [f"-tags={','.join(target.tags)}"] if target.tags else []
    command = [go, "build", "-v", "-trimpath", "-buildvcs=false", *tags, f"-ldflags={ldflags}", "-o", str(out) + "/", *target.packages]
    process = subprocess.Popen(command, cwd=target.module_dir, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert process.stderr is not None
    compiled, errors, last_report = 0, [], time.monotonic()
    for line in process.stderr:
        line = line.rstrip()
        # `go build -v` names each package as it compiles it; anything else is an error's text
        if line and " " not in line and not line.startswith("#"):
            compiled += 1
        elif line:
            errors.append(line)
        if time.monotonic() - last_report >= 15:
            say(f"  {names}: {compiled}/{total} packages compiled")
            last_report = time.monotonic()
    if process.wait() != 0:
        raise BuildFailed(f"go build of {names} failed (exit {process.returncode}):\n" + "\n".join(errors[-40:]))
    say(f"  {names}: done ({compiled} packages compiled, the rest from Go's build cache)")


@dataclass(frozen=True)
class GoBuild:
    """Go packages built into a per-machine cache folder keyed by the pinned versions, the Go toolchain and
    a hash of the module files, under a lock so two test processes never build at once. The control plane
    and the test registry are two of these."""

    what: str  # what progress lines and errors call it
    cache_env: str  # the environment variable that moves the cache
    cache_folder: str  # under ~/.cache/jetway
    versions: str  # the cache key's pinned-versions part
    targets: tuple[Target, ...]
    binaries: tuple[str, ...]
    key_files: Callable[[], list[Path]]  # the files whose bytes key the cache
    built_as: tuple[tuple[str, str], ...] = ()  # go's name for a binary → ours

    def cache_root(self) -> Path:
        if os.environ.get(self.cache_env):
            return Path(os.environ[self.cache_env])
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jetway" / self.cache_folder

    def cache_key(self, go_version: str) -> str:
        digest = hashlib.sha256()
        for path in self.key_files():
            digest.update(path.read_bytes())
        return f"{self.versions}_{go_version}_{digest.hexdigest()[:12]}"

    def cached_bin_dir(self) -> Path | None:
        """The folder of built binaries when a build for these versions is cached, else None."""
        go = go_binary()
        if go is None:
            return None
        folder = self.cache_root() / self.cache_key(_go_version(go)) / "bin"
        return folder if all((folder / name).is_file() for name in self.binaries) else None

    def build(self, say: Callable[[str], None] | None = None) -> Path:
        """The folder holding the binaries, building them if needed."""
        say = say or (lambda message: print(f"[{self.what}] {message}", file=sys.stderr, flush=True))
        go = go_binary()
        if go is None:
            raise BuildFailed(f"Go is not installed: the {self.what} is built from Go modules (install Go 1.26 or newer)")
        key = self.cache_key(_go_version(go))
        folder = self.cache_root() / key
        with locked(self.cache_root() / f"{key}.lock"):
            found = self.cached_bin_dir()
            if found is not None:
                return found
            started = time.monotonic()
            say(f"building the {self.what} ({self.versions}) into {folder}; once per machine")
            staging = folder / "bin.partial"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
            for target in self.targets:
                _build_target(go, target, staging, env, say)
            for built, name in self.built_as:
                (staging / built).rename(staging / name)
            for name in self.binaries:
                if not (staging / name).is_file():
                    raise BuildFailed(f"the build produced no {name} in {staging}")
            final = folder / "bin"
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)
            elapsed = time.monotonic() - started
            (folder / "build-seconds").write_text(f"{elapsed:.0f}\n")
            say(f"built in {f'{elapsed:.0f} s' if elapsed < 120 else f'{elapsed / 60:.1f} min'}: {final}")
            return final

    def for_tests(self, request: pytest.FixtureRequest, no_go: str) -> Path:
        """The binaries for a fixture: without Go the tests skip saying `no_go` (fail under CI=true, where they
        are required); a failed build fails them; the build's progress reaches the terminal."""
        if go_binary() is None:
            if os.environ.get("CI") == "true":
                pytest.fail(no_go)
            pytest.skip(no_go)
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext(), build_time():
            try:
                return self.build()
            except BuildFailed as failure:
                pytest.fail(f"the {self.what} could not be built: {failure}", pytrace=False)

    def main(self) -> int:
        try:
            print(self.build())
        except BuildFailed as failure:
            print(f"error: {failure}", file=sys.stderr)
            return 1
        return 0


CONTROL_PLANE = GoBuild(
    what="test control plane",
    cache_env="JETWAY_KUBE_CACHE",
    cache_folder="kube",
    versions=f"kubernetes-{KUBERNETES}_etcd-{ETCD}",
    targets=TARGETS,
    binaries=BINARIES,
    key_files=lambda: [target.module_dir / name for target in TARGETS for name in ("go.mod", "go.sum")],
    built_as=(("server", "etcd"),),  # go names a binary for its package path's last element
)
build = CONTROL_PLANE.build
cached_bin_dir = CONTROL_PLANE.cached_bin_dir

CONTAINERD = "v2.4.2"
CNI_PLUGINS = "v1.10.0"
COREDNS = "v1.15.0"
_CONTAINERD_VERSION = f"github.com/containerd/containerd/v2/version.Version={CONTAINERD}"
# A node for the control plane (testbed/cluster/node.py): the kubelet, scheduler and kube-proxy of the
# same Kubernetes release as the API server (gomod/node: kube's go.mod and what they add), containerd 2 with its
# runc shim (runc itself is Debian's), the CNI plugins, CoreDNS and the sandbox's pause process.
NODE = GoBuild(
    what="test node",
    cache_env="JETWAY_NODE_CACHE",
    cache_folder="node",
    versions=f"kubernetes-{KUBERNETES}_containerd-{CONTAINERD}_cni-{CNI_PLUGINS}_coredns-{COREDNS}",
    targets=(
        Target(
            GOMOD / "node",
            ("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kube-proxy"),
            TARGETS[0].stamps,
        ),
        # the storage drivers the node does not use left out (btrfs, devmapper and zfs need cgo)
        Target(
            GOMOD / "containerd",
            ("github.com/containerd/containerd/v2/cmd/containerd", "github.com/containerd/containerd/v2/cmd/ctr"),
            (_CONTAINERD_VERSION,),
            ("no_btrfs", "no_devmapper", "no_zfs", "urfave_cli_no_docs"),
        ),
        Target(
            GOMOD / "containerd", ("github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",), (_CONTAINERD_VERSION,), ("no_grpc",)
        ),
        Target(
            GOMOD / "nodeparts",
            (
                "github.com/containernetworking/plugins/plugins/main/bridge",
                "github.com/containernetworking/plugins/plugins/main/loopback",
                "github.com/containernetworking/plugins/plugins/ipam/host-local",
                "github.com/containernetworking/plugins/plugins/meta/portmap",
                "jetway.dev/testcluster/nodeparts/coredns",
                "jetway.dev/testcluster/nodeparts/pause",
            ),
        ),
    ),
    binaries=(
        "kubelet",
        "kube-scheduler",
        "kube-proxy",
        "containerd",
        "ctr",
        "containerd-shim-runc-v2",
        "bridge",
        "loopback",
        "host-local",
        "portmap",
        "coredns",
        "pause",
    ),
    key_files=lambda: sorted(path for name in ("node", "containerd", "nodeparts") for path in (GOMOD / name).rglob("*") if path.is_file()),
)


if __name__ == "__main__":
    sys.exit((NODE if sys.argv[1:] == ["node"] else CONTROL_PLANE).main())
