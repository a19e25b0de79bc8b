"""tilt/Tiltfile evaluated with stub Tilt built-ins (Tilt itself is not served by any registry here).

The stubs check what the real ones would reject (missing paths, unknown images, workloads and objects the
YAML does not contain, an object claimed twice) and record what Tilt would do: the image build (a
`docker_build`, or a `custom_build`'s command, working folder and dependencies), the YAML it applies, and
the live update's syncs. tests/deploy checks the record; tests/node carries it out on a real node.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import starlark as sl
import yaml

from tests.support.cli import ROOT

KUBECTL = Path(sys.executable).parent / "kubectl"
# Tilt's `os` module, as much of it as the Tiltfile uses
PRELUDE = "os = struct(getenv = _getenv)\n"


@dataclass
class Build:
    """An image build the Tiltfile declares."""

    ref: str
    command: str = ""  # custom_build's shell command ($EXPECTED_REF set by Tilt); empty for docker_build
    folder: Path = ROOT  # where the command runs
    deps: list[Path] = field(default_factory=list)
    syncs: list[tuple[Path, str]] = field(default_factory=list)  # live update: local folder -> container path
    pushes_itself: bool = False  # skips_local_docker: the command pushes $EXPECTED_REF


class Tilt:
    """The stub built-ins, and what the Tiltfile asked of them."""

    def __init__(self, folder: Path, env: Mapping[str, str] | None = None) -> None:
        self.folder = folder
        self.env = dict(env or {})
        self.builds: list[Build] = []
        self.registry = ""
        self.objects: list[dict[str, Any]] = []
        self.resources: dict[str, dict[str, Any]] = {}
        self.claimed: set[str] = set()

    @property
    def images(self) -> list[str]:
        return [build.ref for build in self.builds]

    def path(self, relative: str) -> Path:
        found = (self.folder / relative).resolve()
        assert found.exists(), f"{relative} does not exist (relative to {self.folder})"
        return found

    def _syncs(self, live_update: list[Any] | None) -> list[tuple[Path, str]]:
        return [(self.path(step[1]), step[2]) for step in live_update or [] if step[0] == "sync"]

    def builtins(self) -> dict[str, Callable[..., Any]]:
        def docker_build(
            ref: str,
            context: str,
            dockerfile: str = "Dockerfile",
            only: list[str] | None = None,
            live_update: list[Any] | None = None,
            **_: Any,
        ) -> None:
            root = self.path(context)
            self.path(dockerfile)
            for item in only or []:
                assert (root / item).exists(), f"docker_build only= names {item}, which is not in {root}"
            self.builds.append(Build(ref, folder=root, syncs=self._syncs(live_update)))

        def custom_build(
            ref: str,
            command: str,
            deps: list[str],
            dir: str = "",
            skips_local_docker: bool = False,
            live_update: list[Any] | None = None,
            **_: Any,
        ) -> None:
            assert "$EXPECTED_REF" in command, "a custom_build command must build (and tag) the ref Tilt expects"
            paths = [self.path(dep) for dep in deps]
            build = Build(ref, command, self.path(dir or "."), paths, self._syncs(live_update), skips_local_docker)
            self.builds.append(build)

        def default_registry(host: str, **_: Any) -> None:
            assert host and "/" not in host.split(":")[0], host
            self.registry = host

        def getenv(name: str, default: str = "") -> str:
            return self.env.get(name, default)

        def sync(local: str, remote: str) -> tuple[str, str, str]:
            self.path(local)
            assert remote.startswith("/app/"), remote
            return ("sync", local, remote)

        def fall_back_on(files: list[str]) -> tuple[str, list[str]]:
            for item in files:
                self.path(item)
            return ("fall_back_on", files)

        def kustomize(path: str) -> str:
            built = subprocess.run(
                [str(KUBECTL), "kustomize", str(self.path(path))], capture_output=True, text=True, timeout=60, check=False
            )
            assert built.returncode == 0, built.stderr
            return built.stdout

        def local(command: str, dir: str = "", quiet: bool = False, echo_off: bool = False, **_: Any) -> str:
            # the one command the Tiltfile runs: the NATS passwords' Secret, never echoed to Tilt's log
            assert command.startswith("jetway nats-users secret") and quiet and echo_off, command
            self.path(dir or ".")
            return subprocess.run(
                [sys.executable, "-m", "cli.main", "nats-users", "secret"], capture_output=True, text=True, timeout=60, check=True, cwd=ROOT
            ).stdout

        def k8s_yaml(text: str) -> None:
            self.objects += [d for d in yaml.safe_load_all(text) if d]

        def k8s_resource(
            workload: str = "",
            objects: list[str] | None = None,
            new_name: str = "",
            port_forwards: list[str] | None = None,
            resource_deps: list[str] | None = None,
            labels: list[str] | None = None,
            **_: Any,
        ) -> None:
            if workload:
                assert any(o["metadata"]["name"] == workload and o["kind"] in ("Deployment", "StatefulSet") for o in self.objects), workload
            for selector in objects or []:
                name, kind = selector.split(":")[:2]
                matches = [o for o in self.objects if o["metadata"]["name"] == name and o["kind"].lower() == kind]
                assert len(matches) == 1, f"{selector} selects {len(matches)} objects"
                assert selector not in self.claimed, f"{selector} claimed twice"
                self.claimed.add(selector)
            for dep in resource_deps or []:
                assert dep in self.resources, f"{workload or new_name} depends on {dep}, which is not defined before it"
            for forward in port_forwards or []:
                assert all(p.isdigit() for p in forward.split(":")), forward
            self.resources[new_name or workload] = {"labels": labels or [], "forwards": port_forwards or []}

        return {
            "docker_build": docker_build,
            "custom_build": custom_build,
            "default_registry": default_registry,
            "_getenv": getenv,
            "sync": sync,
            "fall_back_on": fall_back_on,
            "kustomize": kustomize,
            "k8s_yaml": k8s_yaml,
            "local": local,
            "k8s_resource": k8s_resource,
        }


def load(env: Mapping[str, str] | None = None, folder: Path = ROOT / "tilt") -> Tilt:
    """tilt/Tiltfile evaluated as `tilt up` would with this environment; what it declared."""
    tilt = Tilt(folder, env)
    dialect = sl.Dialect.extended()
    dialect.enable_top_level_stmt = True  # as Tilt's Starlark allows
    module = sl.Module()
    for name, builtin in tilt.builtins().items():
        module.add_callable(name, builtin)
    source = PRELUDE + (folder / "Tiltfile").read_text()
    sl.eval(module, sl.parse("Tiltfile", source, dialect=dialect), sl.Globals.extended_by([sl.LibraryExtension.StructType]))
    return tilt
