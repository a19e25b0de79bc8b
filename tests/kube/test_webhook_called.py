"""The admission webhook called by a real API server: validating and mutating configurations point at
the watcher's webhook on 127.0.0.1 (`url:` and its `caBundle`), and `kubectl apply` meets it.

The configurations select only this test's namespace, so nothing else on the server goes through them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from aiohttp import web

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.rules.provider import check_named_provider
from runtime.kube import Kube, KubeError
from runtime.natsserver import free_port
from services.watcher import certs, webhook
from services.watcher.handlers import WatcherService
from testbed.kubeapi import Cluster, RealServer, cluster_for_tests
from testbed.waiting import eventually
from tests.contracts.cases import IPC, MD, changed
from tests.kube.test_deploy_applied import KUBECTL

ADMISSION = "admissionregistration.k8s.io/v1"
MDV = "airunway.ai/v1alpha1"


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: value}


class Webhook:
    """The watcher's webhook app on a fixed port, so it can go down and come back where the API server calls it."""

    def __init__(self, lookup: webhook.Lookup | None = None) -> None:
        self.issued = certs.issue(["localhost"], ips=("127.0.0.1",), days=1)
        self.port = free_port()
        self.lookup = lookup
        self.runner: web.AppRunner | None = None

    async def up(self) -> None:
        self.runner = await webhook.serve(
            webhook.build_app(lookup=self.lookup),
            "127.0.0.1",
            self.port,
            self.issued.server_context(Path(tempfile.mkdtemp(prefix="jetway-webhook-"))),
        )

    async def down(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    def configuration(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        mutate = kind == "MutatingWebhookConfiguration"
        entry: dict[str, Any] = {
            "name": "default.airunway.ai" if mutate else "validate.airunway.ai",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore" if mutate else "Fail",  # as deploy/base/webhook.yaml and docs/cluster.md say
            "timeoutSeconds": 15,  # a loaded test machine: a slow call must not be ignored (the mutation's policy)
            "clientConfig": {
                "url": f"https://127.0.0.1:{self.port}/{'mutate' if mutate else 'validate'}",
                "caBundle": base64.b64encode(self.issued.ca_pem).decode(),
            },
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [
                {
                    "apiGroups": ["airunway.ai"],
                    "apiVersions": ["v1alpha1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["modeldeployments", "agentdeployments"],
                }
            ],
        }
        if mutate:
            entry["reinvocationPolicy"] = "Never"
        return {"apiVersion": ADMISSION, "kind": kind, "metadata": {"name": name}, "webhooks": [entry]}


@pytest.fixture
async def called(real_server: RealServer) -> AsyncIterator[tuple[Cluster, Webhook]]:
    if not real_server.owned:
        pytest.skip("writes cluster-wide webhook configurations: runs on the test control plane, not on a shared cluster")
    async with cluster_for_tests(real_server) as cluster:
        await cluster.install_crds()
        # an empty projection: every named provider is asked of the API server, as a just-started watcher does
        hook = Webhook(webhook.cluster_lookup(WatcherService(), cluster.kube))
        await hook.up()
        name = f"jetway-test-{cluster.namespace}"
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            await cluster.kube.create(hook.configuration(kind, name, cluster.namespace))

        async def in_force() -> bool:  # the API server reads the configurations from an informer: a moment later
            _, refusal = await dry_run(cluster, manifest(cluster, "probe", **{"spec.model.id": "PLACEHOLDER-model-id"}))
            stored, _ = await dry_run(cluster, manifest(cluster, "probe"))
            return "validate.airunway.ai" in (refusal or "") and stored is not None and defaulted_by_webhook(cluster, stored)

        await eventually(in_force, timeout=30, message="the webhook configurations in force")
        try:
            yield cluster, hook
        finally:
            await hook.down()
            for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
                await cluster.kube.delete(ADMISSION, kind, name)


class Applied(NamedTuple):
    returncode: int
    stderr: str


async def apply(cluster: Cluster, obj: dict[str, Any]) -> Applied:
    """`kubectl apply`, run without blocking the event loop: the webhook it meets is served from this loop."""
    assert cluster.server is not None
    proc = await asyncio.create_subprocess_exec(
        str(KUBECTL),
        "apply",
        "-f",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": cluster.server.kubeconfig},
    )
    _, err = await asyncio.wait_for(proc.communicate(yaml.safe_dump(obj).encode()), timeout=60)
    return Applied(proc.returncode or 0, err.decode())


def manifest(cluster: Cluster, name: str, **changes: Any) -> dict[str, Any]:
    return changed(MD, {"metadata.name": name, "metadata.namespace": cluster.namespace, **changes})


async def dry_run(cluster: Cluster, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A ModelDeployment created with dryRun=All: what would be stored, or the refusal."""
    resource = await cluster.kube.served(MDV, "ModelDeployment")
    try:
        return dict(await cluster.kube.request("POST", resource.path(cluster.namespace), query=[("dryRun", "All")], body=obj)), None
    except KubeError as exc:
        return None, str(exc)


def webhook_defaults(cluster: Cluster, name: str) -> dict[str, Any]:
    """The spec's leaves as the mutating webhook writes them for `manifest(cluster, name)`."""
    obj = manifest(cluster, name)
    kind = {"group": "airunway.ai", "version": "v1alpha1", "kind": "ModelDeployment"}
    answer = webhook.review({"uid": "x", "kind": kind, "operation": "CREATE", "object": obj}, mutate=True)
    return _leaves(next(op["value"] for op in json.loads(base64.b64decode(answer["patch"])) if op["path"] == "/spec"))


def defaulted_by_webhook(cluster: Cluster, stored: dict[str, Any]) -> bool:
    expected = webhook_defaults(cluster, stored["metadata"]["name"])
    return {path: _leaves(stored["spec"]).get(path) for path in expected} == expected


async def test_kubectl_apply_meets_the_webhook_refusals_defaults_and_its_failure_policy(called: tuple[Cluster, Webhook]) -> None:
    cluster, hook = called

    # refused with the webhook's own message: a rule the CRD's CEL rules do not hold
    bad = manifest(cluster, "bad", **{"spec.model.id": "PLACEHOLDER-model-id"})
    refused = await apply(cluster, bad)
    assert refused.returncode != 0
    # kubectl prints an Invalid status by its causes: the field path and the rule
    assert 'The modeldeployments "bad" is invalid: spec.model.id:' in refused.stderr and "placeholder" in refused.stderr
    with pytest.raises(KubeError) as denied:  # the API's own answer names the webhook that refused it
        await cluster.kube.create(bad)
    assert denied.value.status == 422 and 'admission webhook "validate.airunway.ai" denied the request' in str(denied.value)
    assert await cluster.kube.get_or_none(MDV, "ModelDeployment", "bad", cluster.namespace) is None

    # admitted, and the mutating webhook wrote the spec's defaults
    created = await apply(cluster, manifest(cluster, "qwen"))
    assert created.returncode == 0, created.stderr
    stored = await cluster.kube.get(MDV, "ModelDeployment", "qwen", cluster.namespace)
    assert defaulted_by_webhook(cluster, stored)

    # webhook down: validation is closed (failurePolicy Fail) ...
    await hook.down()
    closed = await apply(cluster, manifest(cluster, "while-down"))
    assert closed.returncode != 0 and 'failed calling webhook "validate.airunway.ai"' in closed.stderr
    assert await cluster.kube.get_or_none(MDV, "ModelDeployment", "while-down", cluster.namespace) is None

    # ... and mutation open (failurePolicy Ignore): without the validating webhook the object is stored as
    # written, and the watcher applies the defaults again at ingest
    await cluster.kube.delete(ADMISSION, "ValidatingWebhookConfiguration", f"jetway-test-{cluster.namespace}")

    async def validation_gone() -> bool:  # the API server's informer drops the configuration a moment later
        return (await dry_run(cluster, manifest(cluster, "unmutated")))[0] is not None

    await eventually(validation_gone, timeout=30, message="the validating configuration out of force")
    opened = await apply(cluster, manifest(cluster, "unmutated"))
    assert opened.returncode == 0, opened.stderr
    plain = await cluster.kube.get(MDV, "ModelDeployment", "unmutated", cluster.namespace)
    added_by_webhook = set(webhook_defaults(cluster, "qwen")) - set(_leaves(plain["spec"]))
    assert added_by_webhook, "the mutating webhook added nothing the CRD's own defaults do not"


async def test_the_webhook_looks_the_named_provider_up_as_ai_runway_does(called: tuple[Cluster, Webhook]) -> None:
    """upstream: modeldeployment_webhook_test "Should reject when provider not found in cluster", and the
    compatibility cases ("does not support engine sglang"), through kubectl and the real API server."""
    cluster, _ = called
    missing = await apply(cluster, manifest(cluster, "lost", **{"spec.provider": {"name": "nonexistent"}}))
    assert missing.returncode != 0, missing.stderr
    assert 'spec.provider.name: InferenceProviderConfig "nonexistent" not found' in missing.stderr
    assert await cluster.kube.get_or_none(MDV, "ModelDeployment", "lost", cluster.namespace) is None

    acme = f"acme-{cluster.namespace}"
    provider = changed(IPC, {"metadata.name": acme})
    await cluster.kube.create(provider)
    try:
        wrong = await apply(cluster, manifest(cluster, "wrong", **{"spec.provider": {"name": acme}, "spec.engine.type": "sglang"}))
        assert wrong.returncode != 0 and f"provider {acme} does not support engine sglang" in wrong.stderr
        right = await apply(cluster, manifest(cluster, "right", **{"spec.provider": {"name": acme}}))
        assert right.returncode == 0, right.stderr
    finally:
        await cluster.kube.delete(MDV, "InferenceProviderConfig", acme)


async def test_a_webhook_that_cannot_read_providers_refuses_rather_than_skipping(real_server: RealServer) -> None:
    """upstream: "Should reject admission when provider lookup is Forbidden (webhook RBAC misconfigured)": skipping
    would switch the check off cluster-wide unnoticed."""
    if not real_server.owned:
        pytest.skip("makes a cluster-wide identity: runs on the test control plane, not on a shared cluster")
    async with cluster_for_tests(real_server) as cluster:
        await cluster.install_crds()
        kubeconfig = await cluster.identity("jetway-no-providers", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}])
        kube = await Kube.connect(kubeconfig)
        try:
            found = await webhook.cluster_lookup(WatcherService(), kube)("dynamo")
        finally:
            await kube.close()
    assert found.outcome == "forbidden" and found.reason.startswith("403")
    md = admit(changed(MD, {"spec.provider": {"name": "dynamo"}})).obj
    assert isinstance(md, ModelDeployment)
    problems, _ = check_named_provider(md, found)
    assert [str(p) for p in problems] == ['spec.provider.name: cannot verify provider "dynamo": 403 Forbidden']
