"""The services as the cluster runs them: one process each (`python -m services.<name>`), in
cluster mode, configured by environment only, with health and readiness endpoints."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from runtime.natsserver import free_port
from services.workload.providers import builtin_configs
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.cli import ROOT
from tests.support.nats import NatsEndpoint

SERVICES = ("watcher", "selector", "storage", "workload", "gateway", "router", "binding")


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "emulator",
                "clusters": [{"name": "emulator", "cluster": {"server": server}}],
                "users": [{"name": "tests", "user": {"token": "test-token"}}],
                "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tests"}}],
            }
        )
    )
    return path


@contextlib.contextmanager
def processes(
    env: dict[str, str],
    ports: dict[str, int],
    logs: Path,
    *,
    per_service: dict[str, dict[str, str]] | None = None,
    names: tuple[str, ...] = SERVICES,
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Every service (or those `names`) as its own process; `per_service` adds to one service's environment."""
    running: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in names:
            log = (logs / f"{name}.log").open("wb")
            running[name] = subprocess.Popen(
                [sys.executable, "-m", f"services.{name}"],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    **env,
                    **(per_service or {}).get(name, {}),
                    "JETWAY_HEALTH_PORT": str(ports[name]),
                    "JETWAY_HEALTH_HOST": "127.0.0.1",
                },
            )
        yield running
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)


def cluster_env(kubeconfig_path: Path, nats: NatsEndpoint, tmp_path: Path, webhook_port: int) -> dict[str, str]:
    return {
        "JETWAY_MODE": "cluster",
        "KUBECONFIG": str(kubeconfig_path),
        "JETWAY_NATS_URL": nats.url,
        "JETWAY_RESYNC_SECONDS": "2",
        "JETWAY_IMAGE_RESOLUTION": "off",  # no registry here: the default vLLM image is used by its tag
        "JETWAY_NAMESPACE": "jetway-system",
        "JETWAY_WEBHOOK_PORT": str(webhook_port),
        "JETWAY_ROUTER_PORT": str(free_port()),
        "JETWAY_ROUTER_HOST": "127.0.0.1",
        "JETWAY_SECRETS_DIR": str(tmp_path / "secrets"),
    }


async def readiness(http: aiohttp.ClientSession, port: int) -> int | None:
    with contextlib.suppress(aiohttp.ClientError):
        async with http.get(f"http://127.0.0.1:{port}/readyz") as answer:
            return answer.status
    return None


async def test_each_service_runs_as_its_own_process_in_cluster_mode(cluster: Cluster, nats: NatsEndpoint, tmp_path: Path) -> None:
    emulator = cluster.need_emulator()
    await cluster.install_crds()
    ports = {name: free_port() for name in SERVICES}
    webhook_port = free_port()
    env = cluster_env(kubeconfig(tmp_path / "kubeconfig", emulator.url), nats, tmp_path, webhook_port)
    with processes(env, ports, tmp_path) as running:
        async with aiohttp.ClientSession() as http:

            async def ready(name: str) -> bool:
                assert running[name].poll() is None, (tmp_path / f"{name}.log").read_text()[-2000:]
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{ports[name]}/readyz") as answer:
                        return answer.status == 200
                return False

            for name in SERVICES:
                await eventually(lambda n=name: ready(n), timeout=60, interval=0.2, message=f"{name} ready")
            async with http.get(f"http://127.0.0.1:{ports['watcher']}/healthz") as answer:
                assert answer.status == 200

            await cluster.kube.create(changed(MD, {"spec.provider": {"name": "vllm"}}))

            async def deploying() -> dict[str, Any] | None:
                md = await cluster.kube.get_or_none("airunway.ai/v1alpha1", "ModelDeployment", "qwen", "default")
                return md if md and (md.get("status") or {}).get("phase") == "Deploying" else None

            await eventually(deploying, timeout=60, interval=0.2, message="the deployment rendered into the cluster")
            assert await cluster.kube.get("apps/v1", "Deployment", "qwen", "default")

            # the webhook serves TLS with the certificate it issued into its Secret
            secret = await cluster.kube.get("v1", "Secret", "jetway-webhook-tls", "jetway-system")
            trust = ssl.create_default_context(cadata=base64.b64decode(secret["data"]["ca.crt"]).decode())
            trust.check_hostname = False  # the certificate names the Service's DNS name, the test dials 127.0.0.1
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "1", "operation": "CREATE", "object": changed(MD, {"spec.model.id": "PLACEHOLDER-x"})},
            }
            async with http.post(f"https://127.0.0.1:{webhook_port}/validate", json=review, ssl=trust) as answer:
                assert (await answer.json())["response"]["allowed"] is False

        for process in running.values():
            process.send_signal(signal.SIGTERM)
        codes = {name: await asyncio.to_thread(process.wait, 15) for name, process in running.items()}
        assert codes == dict.fromkeys(SERVICES, 0)
    key = base64.b64decode(secret["data"]["tls.key"]).decode()
    for name in SERVICES:
        text = (tmp_path / f"{name}.log").read_text()
        assert "PRIVATE KEY" not in text and key.splitlines()[1] not in text  # the webhook's key never reaches a log
        assert "Traceback" not in text, text[-3000:]


async def test_the_workload_is_ready_only_once_the_built_in_providers_are_registered(
    cluster: Cluster, nats: NatsEndpoint, tmp_path: Path
) -> None:
    """A ModelDeployment naming a built-in provider is refused by admission until that provider's config exists; a
    fresh install's `kubectl wait ... Available` once returned before the configs did (the first real node). Here
    no watcher runs, so nothing registers them until the test creates them as the workload would."""
    emulator = cluster.need_emulator()
    await cluster.install_crds()
    names = ("selector", "workload")
    ports = {name: free_port() for name in names}
    env = cluster_env(kubeconfig(tmp_path / "kubeconfig", emulator.url), nats, tmp_path, free_port())
    with processes(env, ports, tmp_path, names=names):
        async with aiohttp.ClientSession() as http:
            # the selector ready shows the processes are up and have rebuilt; the workload's own state is rebuilt
            # too (its log says so), yet it is not ready: the providers are missing

            async def ready(name: str) -> bool:
                return await readiness(http, ports[name]) == 200

            await eventually(lambda: ready("selector"), timeout=60, interval=0.2, message="selector ready")
            await eventually(lambda: "service running" in (tmp_path / "workload.log").read_text(), timeout=60, message="workload running")
            assert await readiness(http, ports["workload"]) == 503
            for config in builtin_configs():
                await cluster.kube.create(config)
            await eventually(lambda: ready("workload"), timeout=30, interval=0.2, message="workload ready")
