"""A real single-node cluster for the tests: the control plane of controlplane.py with a node that runs pods.

The node is what a kubeadm or kind node runs, built from Go modules (build.py's NODE): kubelet,
kube-scheduler and kube-proxy (nftables mode) of the API server's release, containerd 2 with Debian's
runc, the CNI bridge, host-local, loopback and portmap plugins, and CoreDNS as a process serving
`cluster.local` on the node's address. Pods pull their images from a registry on 127.0.0.1.

What it does to this machine, and how each is kept or undone:

- **Network**: a bridge (`jetway0`, 10.244.0.1/16) that the pods sit on and the API server, the kubelet
  and CoreDNS listen on; Services are 10.96.0.0/16 (kube-proxy's nftables tables). Containment: the
  table `inet jetway-node` rejects forwarded traffic between the bridge and any other interface, so no
  pod reaches beyond this machine (or is reached from outside it). The bridge plugin turns `ip_forward`
  on; its first value is restored.
- **Mounts**: containerd, its shims and containers, and the kubelet run in a mount namespace of their
  own (a `sleep` holds it). Every mount they make (overlay snapshots, pod volumes, network namespaces,
  the kubelet's root) lives and dies with it. The fixed paths those programs write whatever their
  configuration says (`/var/lib/kubelet/device-plugins`, `/var/log/containers`, `/run/containerd/s`,
  `/var/lib/cni`, ...) are tmpfs there, and the kernel settings the kubelet would change
  (`vm.overcommit_memory`, `kernel.panic`, `kernel.panic_on_oops`, ...) are files bound over their
  `/proc/sys` entries there: the kubelet finds the values it wants and the kernel is never touched.
- **cgroups**: every pod under `/jetway-node` (the kubelet's `cgroupRoot`), removed at the end.
- **Files**: everything else under one folder (`/var/tmp/jetway-node`, or `$JETWAY_NODE_DIR`).

`clean_host()` undoes all of it, in order: pods' processes, the node's programs and shims, cgroups,
tables, the bridge, `ip_forward`, the folder. It runs at the end and again at the start, so a run that
was killed leaves nothing for the next one to trip on. By hand: `python -m testbed.cluster.node`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runtime.natsserver import free_port, nats_server_binary
from testbed.cluster.build import build_time
from testbed.cluster.controlplane import ControlPlane, ControlPlaneError, _die_with_parent
from testbed.cluster.images import ImageBuilder, ImageBuildFailed, NodeImages, build_all, missing_tools
from testbed.registry.server import Registry, RegistryError

NODE_NAME = "jetway-node"
BRIDGE = "jetway0"
POD_CIDR = "10.244.0.0/16"
NODE_IP = "10.244.0.1"  # the bridge's own address: the node's, the API server's and the cluster DNS's
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = "jetway-node"
NFT_TABLE = "jetway-node"
# tables the node's programs make: kube-proxy's, and the portmap plugin's (nftables backend)
NFT_TABLES = (("inet", NFT_TABLE), ("ip", "kube-proxy"), ("ip6", "kube-proxy"), ("inet", "cni_hostport"))
# paths the node's programs write whatever their configuration says: each a tmpfs in their mount namespace
PRIVATE_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd", "/run/nri", "/var/lib/cni", "/etc/cni")
# what the kubelet sets unless they already hold these values (container_manager_linux.go, setupKernelTunables)
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
REQUIRED_COMMANDS = {
    "runc": "Debian package runc",
    "nft": "Debian package nftables",
    "ip": "Debian package iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "util-linux",
}
# the node's own binaries, which clean_host() may stop wherever they were started from
NODE_PROGRAMS = ("kubelet", "kube-proxy", "kube-scheduler", "containerd", "containerd-shim-runc-v2", "coredns")


class NodeError(RuntimeError):
    pass


def run_dir() -> Path:
    return Path(os.environ.get("JETWAY_NODE_DIR", "/var/tmp/jetway-node"))


def missing_features() -> list[str]:
    """What this machine lacks to run the node, each named so a reader can fix it; empty when it can."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the node makes a bridge, nftables rules, mounts and cgroups)")
    missing += [f"{command} ({package})" for command, package in REQUIRED_COMMANDS.items() if shutil.which(command) is None]
    with contextlib.suppress(OSError):
        if "overlay" not in Path("/proc/filesystems").read_text():
            missing.append("the overlay filesystem (containerd's snapshotter)")
    if not Path("/sys/fs/cgroup").is_dir() or not any(Path("/sys/fs/cgroup").iterdir()):
        missing.append("cgroups mounted at /sys/fs/cgroup")
    if not Path("/proc/sys/net/ipv4/ip_forward").exists():
        missing.append("IPv4 forwarding (/proc/sys/net/ipv4/ip_forward)")
    return missing


# -- the host: what the node changes, and undoing it -------------------------------------------------------


def _run(*command: str, check: bool = True, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, input=input, check=False)
    if check and done.returncode != 0:
        raise NodeError(f"{' '.join(command)} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers and the v2 tree alike)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def _processes_of(program_dir: Path | None, names: tuple[str, ...]) -> list[int]:
    """Pids of the node's programs: an executable of one of these names (in program_dir when given)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = Path(os.readlink(entry / "exe"))
        except OSError:
            continue
        if exe.name in names and (program_dir is None or exe.parent == program_dir):
            pids.append(int(entry.name))
    return pids


def _kill(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _cgroup_tree(hierarchy: Path) -> list[Path]:
    root = hierarchy / CGROUP_ROOT
    if not root.is_dir():
        return []
    # deepest first: a cgroup is removed only once its children are
    return [*sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True), root]


def _kill_cgroup_members() -> None:
    """SIGKILL every process in the node's cgroups (the pods' containers), until none is left."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = set()
        for hierarchy in _cgroup_hierarchies():
            for group in _cgroup_tree(hierarchy):
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in (group / "cgroup.procs").read_text().split()}
        if not pids:
            return
        for group in (g for h in _cgroup_hierarchies() for g in _cgroup_tree(h) if h.name == "freezer"):
            with contextlib.suppress(OSError):
                (group / "freezer.state").write_text("THAWED")  # a frozen task cannot die
        _kill(sorted(pids))
        time.sleep(0.1)
    raise NodeError("the node's containers did not die within 30 s of SIGKILL")


def _remove_cgroups() -> None:
    deadline = time.monotonic() + 30
    while True:
        left = []
        for hierarchy in _cgroup_hierarchies():
            for group in _cgroup_tree(hierarchy):
                try:
                    group.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(group)
        if not left:
            return
        if time.monotonic() > deadline:
            raise NodeError(f"cgroups left behind: {', '.join(map(str, left[:5]))}")
        time.sleep(0.1)  # a cgroup whose last task just died is freed a moment later


def _host_state_path(folder: Path) -> Path:
    return folder / "host.json"


def clean_host(folder: Path | None = None, say: Callable[[str], None] = lambda _: None) -> None:
    """Undo everything a node did to this machine, whether it stopped or was killed. Idempotent."""
    folder = folder or run_dir()
    state: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(_host_state_path(folder).read_text())
    # 1. the node's programs first (the kubelet would restart what 2. kills), then the pods' processes and shims
    pid_files = list((folder / "pids").glob("*")) if (folder / "pids").is_dir() else []
    recorded = [int(text) for text in (p.read_text().strip() for p in pid_files) if text.isdigit()]
    programs = Path(state["bin_dir"]) if state.get("bin_dir") else None
    _kill([pid for pid in recorded if _alive(pid)] + (_processes_of(programs, NODE_PROGRAMS) if programs else []))
    if Path("/sys/fs/cgroup").is_dir():
        _kill_cgroup_members()
    _kill(_processes_of(programs, ("containerd-shim-runc-v2",)) if programs else [])
    # 2. cgroups, once their tasks are gone
    if Path("/sys/fs/cgroup").is_dir():
        _remove_cgroups()
    # 3. tables, veths, the bridge
    if shutil.which("nft"):
        for family, table in NFT_TABLES:
            _run("nft", "delete", "table", family, table, check=False)
    if shutil.which("ip") and Path(f"/sys/class/net/{BRIDGE}").exists():
        for port in Path(f"/sys/class/net/{BRIDGE}/brif").iterdir():
            _run("ip", "link", "delete", port.name, check=False)
        _run("ip", "link", "delete", BRIDGE, check=False)
    # 4. what the node switched on, back to what it was
    if "ip_forward" in state:
        Path("/proc/sys/net/ipv4/ip_forward").write_text(state["ip_forward"])
    # 5. mounts in this namespace (none by design; a lazy unmount in case), then the folder and the paths made
    for mount in _mounts_under(folder):
        _run("umount", "-l", str(mount), check=False)
    for made in reversed(state.get("made", [])):
        with contextlib.suppress(OSError):
            Path(made).rmdir()
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            raise NodeError(f"{folder} could not be removed")
    say("host clean")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _mounts_under(folder: Path) -> list[Path]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(line.split()[4].encode().decode("unicode_escape"))
        if point == folder or folder in point.parents:
            points.append(point)
    return sorted(points, key=lambda p: len(p.parts), reverse=True)


def host_leftovers(folder: Path | None = None) -> list[str]:
    """What of a node is still on this machine (empty after clean_host): for the tests of the cleanup."""
    folder = folder or run_dir()
    found = []
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"link {BRIDGE}")
    if shutil.which("nft"):
        tables = _run("nft", "list", "tables", check=False).stdout.split("\n")
        found += [f"nft table {f} {t}" for f, t in NFT_TABLES if f"table {f} {t}" in tables]
    found += [f"cgroup {g}" for h in _cgroup_hierarchies() for g in _cgroup_tree(h)]
    found += [f"process {pid}" for pid in _processes_of(None, NODE_PROGRAMS) if _node_program(pid, folder)]
    found += [f"mount {m}" for m in _mounts_under(folder)]
    if folder.exists():
        found.append(f"folder {folder}")
    return found


def _node_program(pid: int, folder: Path) -> bool:
    """Whether this process is one of a node's (its command line names the node's folder)."""
    with contextlib.suppress(OSError):
        return str(folder) in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return False


# -- the node ---------------------------------------------------------------------------------------------


@dataclass
class Node:
    """A control plane and one node; `start()` brings up both, `stop()` takes everything down again."""

    control_plane_bin: Path
    node_bin: Path
    registry: str  # 127.0.0.1:PORT, the plain-HTTP registry pods pull from
    sandbox_image: str  # the pause image's reference in that registry
    logs: Path  # configurations and logs (kept after stop, for a failure's reader)
    folder: Path = field(default_factory=run_dir)
    say: Callable[[str], None] = lambda message: print(f"[test node] {message}", file=sys.stderr, flush=True)
    plane: ControlPlane | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    holder: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    @property
    def kubeconfig(self) -> Path:
        assert self.plane is not None
        return self.plane.kubeconfig

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kubectl = Path(sys.executable).parent / "kubectl"
        return _run(str(kubectl), f"--kubeconfig={self.kubeconfig}", *args, input=input, check=check, timeout=timeout)

    def start(self, timeout: float = 180) -> Node:
        self.started = time.monotonic()
        clean_host(self.folder, self.say)
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            self._record_host()
            self._network()
            self.plane = ControlPlane(self.control_plane_bin, self.logs / "control-plane", address=NODE_IP, with_nodes=True).start()
            self._namespace()
            self._containerd()
            self._kubelet()
            self._scheduler()
            self._proxy()
            self._dns()
            self._wait_ready(timeout)
        except (NodeError, ControlPlaneError, OSError, subprocess.SubprocessError, AssertionError) as failure:
            self.stop()
            raise NodeError(f"the test node did not start: {failure}") from failure
        self.say(f"node Ready in {time.monotonic() - self.started:.1f} s; logs in {self.logs}")
        return self

    def stop(self) -> None:
        for name in ("coredns", "kube-proxy", "kube-scheduler", "kubelet", "containerd"):
            process = self.processes.pop(name, None)
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
            self.holder = None
        clean_host(self.folder, self.say)
        if self.plane is not None:
            self.plane.stop()
            self.plane = None

    # -- steps --

    def _record_host(self) -> None:
        """What clean_host() restores, written before anything changes."""
        self.folder.mkdir(parents=True)
        (self.folder / "pids").mkdir()
        made = [path for path in PRIVATE_PATHS if not Path(path).exists()]
        state = {"ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(), "made": made, "bin_dir": str(self.node_bin)}
        _host_state_path(self.folder).write_text(json.dumps(state))
        for path in made:
            Path(path).mkdir(parents=True)

    def _network(self) -> None:
        rules = f"""
table inet {NFT_TABLE} {{
  chain forward {{
    type filter hook forward priority -150; policy accept;
    iifname "{BRIDGE}" oifname != "{BRIDGE}" counter reject with icmpx type admin-prohibited comment "no pod reaches beyond this machine"
    iifname != "{BRIDGE}" oifname "{BRIDGE}" counter drop comment "nothing beyond this machine reaches a pod"
  }}
}}
"""
        _run("nft", "-f", "-", input=rules)
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{NODE_IP}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")

    def _spawn(self, name: str, command: list[str], *, in_namespace: bool, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        if in_namespace:
            assert self.holder is not None
            command = ["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *command]
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PATH": f"{self.node_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}", **(env or {})},
                preexec_fn=_die_with_parent,
            )
        (self.folder / "pids" / name).write_text(str(process.pid))
        self.processes[name] = process
        return process

    def _in_namespace(self, *command: str) -> None:
        assert self.holder is not None
        _run("nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *command)

    def _namespace(self) -> None:
        """The mount namespace the runtime and the kubelet share; its tmpfs paths and its kernel settings."""
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sleep", "infinity"], stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        (self.folder / "pids" / "namespace").write_text(str(self.holder.pid))
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{self.holder.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            if time.monotonic() > deadline or self.holder.poll() is not None:
                raise NodeError("the node's mount namespace did not come up")
            time.sleep(0.01)
        for path in PRIVATE_PATHS:
            self._in_namespace("mount", "-t", "tmpfs", "-o", "mode=0755,size=256m", f"jetway-node{path.replace('/', '-')}", path)
        sysctls = self.folder / "sysctl"
        for key, value in KUBELET_SYSCTLS.items():
            stand_in = sysctls / key.replace("/", ".")
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text(value + "\n")
            self._in_namespace("mount", "--bind", str(stand_in), f"/proc/sys/{key}")

    def _containerd(self) -> None:
        root = self.folder / "containerd"
        registry_hosts = root / "certs.d" / self.registry
        registry_hosts.mkdir(parents=True)
        (registry_hosts / "hosts.toml").write_text(
            f'server = "http://{self.registry}"\n\n[host."http://{self.registry}"]\n  capabilities = ["pull", "resolve"]\n'
        )
        cni = self.folder / "cni"
        (cni / "net.d").mkdir(parents=True)
        (cni / "net.d" / "10-jetway.conflist").write_text(json.dumps(self._cni_config(cni), indent=2))
        runc = shutil.which("runc")
        config = f"""version = 3
root = "{root / "root"}"
state = "{root / "state"}"

[grpc]
  address = "{self.socket}"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{root / "opt"}"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{self.sandbox_image}'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{root / "certs.d"}'
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails ("can't get final child's PID from pipe")
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{runc}'
          Root = '{self.folder / "runc"}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{self.node_bin}']
      conf_dir = '{cni / "net.d"}'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
"""
        (self.logs / "containerd.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(self.logs / "containerd.toml")], in_namespace=True)
        ctr = str(self.node_bin / "ctr")
        self._wait(
            "containerd", lambda: self.socket.exists() and _run(ctr, f"--address={self.socket}", "version", check=False).returncode == 0, 30
        )

    @property
    def socket(self) -> Path:
        return self.folder / "run" / "containerd.sock"

    def _cni_config(self, cni: Path) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "jetway-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,  # nothing leaves the machine: no address to hide
                    "hairpinMode": True,  # a pod reaches itself through its own Service
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                        # a default route, as any CNI gives: the containment table, not a missing route, is what stops
                        # a pod reaching out
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(cni / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}, "backend": "nftables"},
            ],
        }

    def _kubelet(self) -> None:
        assert self.plane is not None and self.plane.ca is not None
        kubelet = self.folder / "kubelet"
        pki_dir = kubelet / "pki"
        pki_dir.mkdir(parents=True)
        serving = self.plane.ca.issue(NODE_NAME, dns=(NODE_NAME,), ips=(NODE_IP,), server=True)
        (pki_dir / "serving.crt").write_bytes(serving.cert_pem)
        (pki_dir / "serving.key").write_bytes(serving.key_pem)
        (pki_dir / "ca.crt").write_bytes(self.plane.ca_pem)
        for hierarchy in _cgroup_hierarchies():
            group = hierarchy / CGROUP_ROOT
            group.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset child starts empty, and an empty one takes no task
                if (hierarchy / name).exists() and not (group / name).read_text().strip():
                    (group / name).write_text((hierarchy / name).read_text())
        self.kubelet_port = free_port(NODE_IP)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # this machine's cgroups are v1; 1.35+ refuses them unless told
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "failSwapOn": False,
            "address": NODE_IP,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "tlsCertFile": str(pki_dir / "serving.crt"),
            "tlsPrivateKeyFile": str(pki_dir / "serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki_dir / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [NODE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "",  # pods get the cluster DNS only, never this machine's resolvers
            "podLogsDir": str(self.folder / "pod-logs"),
            "volumePluginDir": str(kubelet / "volume-plugins"),
            "makeIPTablesUtilChains": False,
            "registerNode": True,
            "serializeImagePulls": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "shutdownGracePeriod": "0s",
            "maxPods": 250,
            "nodeStatusUpdateFrequency": "5s",
        }
        (self.logs / "kubelet.yaml").write_text(yaml.safe_dump(config))
        kubeconfig = self.plane.client_kubeconfig("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
        self._spawn(
            "kubelet",
            [
                "kubelet",
                f"--config={self.logs / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={kubelet / 'root'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
            in_namespace=True,
        )

    def _scheduler(self) -> None:
        assert self.plane is not None
        kubeconfig = self.plane.client_kubeconfig("scheduler", "system:kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                "kube-scheduler",
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
            in_namespace=False,
        )

    def _proxy(self) -> None:
        assert self.plane is not None
        kubeconfig = self.plane.client_kubeconfig("kube-proxy", "system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "bindAddress": NODE_IP,
            "clusterCIDR": POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "nodePortAddresses": [f"{NODE_IP}/32"],
            # zero: leave the machine's conntrack settings alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        (self.logs / "kube-proxy.yaml").write_text(yaml.safe_dump(config))
        self._spawn("kube-proxy", ["kube-proxy", f"--config={self.logs / 'kube-proxy.yaml'}"], in_namespace=False)

    def _dns(self) -> None:
        """CoreDNS as a process on the node's address, as the cluster DNS every pod's resolv.conf names, reading
        the API server as its own user with the rights a cluster's CoreDNS has."""
        assert self.plane is not None
        self.kubectl("apply", "-f", "-", input=DNS_RBAC)
        kubeconfig = self.plane.client_kubeconfig("coredns", "jetway-node:coredns")
        self.dns_health = free_port()
        self.dns_ready = free_port()
        corefile = f""".:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{self.dns_health}
    ready 127.0.0.1:{self.dns_ready}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"""
        (self.logs / "Corefile").write_text(corefile)
        self._spawn("coredns", ["coredns", "-conf", str(self.logs / "Corefile")], in_namespace=False)

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            process = self.processes.get(name)
            if process is not None and process.poll() is not None:
                raise NodeError(f"{name} exited with {process.returncode}:\n{self.tail(name)}")
            if time.monotonic() > deadline:
                raise NodeError(f"{name} not ready within {timeout:.0f} s:\n{self.tail(name)}")
            time.sleep(0.2)

    def tail(self, name: str, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _node_ready(self) -> bool:
        found = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if found.returncode != 0:
            return False
        conditions = {c["type"]: c["status"] for c in json.loads(found.stdout)["status"].get("conditions", [])}
        return conditions.get("Ready") == "True"

    def _dns_ready(self) -> bool:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{self.dns_ready}/ready", timeout=2) as answer:
            return bool(answer.status == 200)
        return False

    def _wait_ready(self, timeout: float) -> None:
        self._wait("kubelet", self._node_ready, timeout)
        self._wait("coredns", self._dns_ready, 60)
        for name in ("kube-scheduler", "kube-proxy"):
            if self.processes[name].poll() is not None:
                raise NodeError(f"{name} exited:\n{self.tail(name)}")

    # -- what tests add --

    def offer_volumes(self, count: int, size: str = "10Gi") -> list[str]:
        """Static volumes (a folder each, any user may write) that claims with no storage class bind to, as a
        cluster's provisioner would make them; their names."""
        names = []
        documents = []
        for index in range(count):
            name = f"jetway-node-volume-{index}"
            path = self.folder / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            names.append(name)
            documents.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": name, "labels": {"jetway.dev/test-node": "volume"}},
                    "spec": {
                        "capacity": {"storage": size},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "",
                        "hostPath": {"path": str(path), "type": "Directory"},
                    },
                }
            )
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))
        return names

    def advertise(self, resource: str, count: int) -> None:
        """An extended resource on the node (`nvidia.com/gpu`, say), as a device plugin would report it; the
        scheduler places pods that ask for it here."""
        path = "/status/capacity/" + resource.replace("~", "~0").replace("/", "~1")
        patch = json.dumps([{"op": "add", "path": path, "value": str(count)}])
        self.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", patch)


DNS_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: jetway-node:coredns
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: jetway-node:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: jetway-node:coredns
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: jetway-node:coredns
"""


@dataclass
class NodeCluster:
    """A started node, the registry its pods pull from and where each image is in it."""

    node: Node
    registry: Registry
    images: dict[str, str]  # image name ("jetway", "nats", "vllm-sim", "base", "pause") -> its reference in the registry
    built: NodeImages

    @property
    def kubeconfig(self) -> Path:
        return self.node.kubeconfig

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.node.kubectl(*args, input=input, check=check, timeout=timeout)


@contextlib.contextmanager
def node_cluster(
    control_plane_bin: Path, node_bin: Path, registry_bin: Path, logs: Path, say: Callable[[str], None] | None = None
) -> Iterator[NodeCluster]:
    """Build the images (cached by key), start the registry and push them, start the node; stop it all after."""
    builder = ImageBuilder(say) if say else ImageBuilder()
    with build_time():
        built = build_all(builder, Path(nats_server_binary()), node_bin / "pause")
    registry = Registry(registry_bin, logs / "registry").start()
    try:
        started = time.monotonic()
        images = {image.name: builder.push(image, registry.host) for image in built.all()}
        builder.say(f"images pushed to {registry.host} in {time.monotonic() - started:.1f} s")
        node = Node(control_plane_bin, node_bin, registry.host, images["pause"], logs)
        if say:
            node.say = say
        node.start()
        try:
            yield NodeCluster(node, registry, images, built)
        finally:
            node.stop()
    finally:
        registry.stop()


def main() -> int:
    """`python -m testbed.cluster.node`: build (cached) and start the node, print how to use it, run until Ctrl-C."""
    from testbed.cluster.build import CONTROL_PLANE, NODE, BuildFailed
    from testbed.registry.build import REGISTRY

    missing = missing_features() + [f"{tool} (Debian package {tool})" for tool in missing_tools()]
    if missing:
        print(f"error: this machine lacks {'; '.join(missing)}", file=sys.stderr)
        return 1
    logs = Path(tempfile.mkdtemp(prefix="jetway-node-"))
    try:
        bins = CONTROL_PLANE.build(), NODE.build(), REGISTRY.build()
        with node_cluster(*bins, logs) as cluster:
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            print(f"images: {json.dumps(cluster.images, indent=2)}")
            print("Ctrl-C stops it and cleans up", flush=True)
            signals = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, signals)
            signal.sigwait(signals)
    except (BuildFailed, ImageBuildFailed, NodeError, RegistryError) as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
