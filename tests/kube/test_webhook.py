"""The admission webhook: the rules of `jetway validate`, the spec's defaults and the update rules,
served over TLS as the API server calls it; its certificate issued and its CA injected."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
from typing import Any

import aiohttp
import pytest

from contracts.admission import admit
from services.watcher import certs, webhook
from services.watcher.main import ensure_certificate
from testbed.kubeapi import Cluster
from tests.contracts.cases import MD, MEMBER, changed


def request(obj: dict[str, Any], *, old: dict[str, Any] | None = None, operation: str | None = None) -> dict[str, Any]:
    return {
        "uid": "4f1c",
        "kind": {"group": "airunway.ai", "version": "v1alpha1", "kind": obj["kind"]},
        "operation": operation or ("UPDATE" if old else "CREATE"),
        "object": obj,
        "oldObject": old,
    }


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add" and op["path"] == "/spec"
        out["spec"] = op["value"]
    return out


def test_mutation_writes_the_defaults_into_the_spec() -> None:
    response = webhook.review(request(MD), mutate=True)
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    result = patched(MD, response)
    assert result["spec"]["model"]["source"] == "huggingface"
    assert result["spec"]["serving"]["mode"] == "aggregated"
    assert admit(result).ok
    again = webhook.review(request(result), mutate=True)  # defaults already there: no patch
    assert again["allowed"] and "patch" not in again


def test_an_invalid_object_is_denied_with_each_field_path_and_rule() -> None:
    bad = changed(MD, {"spec.model.id": "PLACEHOLDER-model", "spec.model.storage.volumes": [{"name": "x", "mountPath": "rel"}]})
    response = webhook.review(request(bad), mutate=False)
    assert response["allowed"] is False and response["uid"] == "4f1c"
    status = response["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith('ModelDeployment "qwen" is invalid: ')
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"spec.model.id", "spec.model.storage.volumes[0].mountPath"} <= fields
    assert webhook.review(request(bad), mutate=True) == {"uid": "4f1c", "allowed": True}  # mutation leaves refusals to validation


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"spec.model.id": "Qwen/Qwen3-8B"}, "spec.model.id"),
        ({"spec.model.source": "custom"}, "spec.model.source"),
        ({"spec.engine.type": "sglang"}, "spec.engine.type"),
        ({"spec.serving": {"mode": "disaggregated"}}, "spec.serving.mode"),
    ],
)
def test_identity_fields_are_immutable(change: dict[str, Any], path: str) -> None:
    response = webhook.review(request(changed(MD, change), old=MD), mutate=False)
    assert response["allowed"] is False
    assert path in {c["field"] for c in response["status"]["details"]["causes"]}


def test_sized_volumes_are_immutable_and_the_selected_provider_sticks() -> None:
    sized = changed(MD, {"spec.model.storage.volumes": [{"name": "cache", "purpose": "modelCache", "size": "20Gi"}]})
    resized = changed(sized, {"spec.model.storage.volumes[0].size": "40Gi"})
    assert not webhook.review(request(resized, old=sized), mutate=False)["allowed"]
    same = changed(sized, {"spec.model.storage.volumes[0].size": "20480Mi"})  # the same quantity, written differently
    assert webhook.review(request(same, old=sized), mutate=False)["allowed"]

    selected = {**changed(MD, {"spec.provider": {"name": "kaito"}}), "status": {"provider": {"name": "kaito"}}}
    moved = changed(MD, {"spec.provider": {"name": "dynamo"}})
    denied = webhook.review(request(moved, old=selected), mutate=False)
    assert (
        not denied["allowed"]
        and "spec.provider.name: provider.name is immutable (changing it requires delete and recreate)" in denied["status"]["message"]
    )
    kept = changed(MD, {"spec.provider": {"name": "kaito"}, "spec.scaling": {"replicas": 2}})
    assert webhook.review(request(kept, old=selected), mutate=False)["allowed"]


def test_deletes_and_non_objects_are_let_through() -> None:
    assert webhook.review(request(MD, operation="DELETE"), mutate=False)["allowed"]
    assert webhook.review({"uid": "x", "operation": "CREATE", "object": "nope"}, mutate=False)["allowed"]


def test_members_on_link_local_addresses_are_refused_unless_allowed() -> None:
    member = changed(MEMBER, {"spec.url": "http://169.254.169.254:8000"})
    denied = webhook.review(request(member), mutate=False)
    assert not denied["allowed"] and denied["status"]["details"]["causes"][0]["field"] == "spec.url"
    assert webhook.review(request(member), mutate=False, allow_link_local=True)["allowed"]


def test_a_certificate_is_renewed_before_it_expires_or_when_a_name_is_missing() -> None:
    issued = certs.issue(["jetway-webhook.jetway-system.svc"], days=365)
    assert not certs.needs_renewal(issued.cert_pem, ["jetway-webhook.jetway-system.svc"])
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=340)
    assert certs.needs_renewal(issued.cert_pem, ["jetway-webhook.jetway-system.svc"], now=later)
    assert certs.needs_renewal(issued.cert_pem, ["jetway-webhook.other.svc"])
    assert certs.needs_renewal(b"not a certificate", ["x"])


async def test_the_server_answers_over_tls_and_turns_bad_requests_into_400(tmp_path: Any) -> None:
    issued = certs.issue(["localhost"], ips=("127.0.0.1",), days=1)
    runner = await webhook.serve(webhook.build_app(), "127.0.0.1", 0, issued.server_context(tmp_path / "tls"))
    port = runner.addresses[0][1]
    trust = ssl.create_default_context(cadata=issued.ca_pem.decode())
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as http:
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request(MD)}
            async with http.post(f"https://localhost:{port}/mutate", json=review) as answer:
                body = await answer.json()
                assert answer.status == 200 and body["kind"] == "AdmissionReview" and body["response"]["uid"] == "4f1c"
                assert body["response"]["allowed"] and body["response"]["patch"]
            async with http.post(f"https://localhost:{port}/validate", data=b"{not json") as answer:
                assert answer.status == 400 and "AdmissionReview" in (await answer.json())["error"]
            async with http.post(f"https://localhost:{port}/validate", json={"kind": "Pod"}) as answer:
                assert answer.status == 400
    finally:
        await runner.cleanup()


WEBHOOK_CONFIG = {
    "webhooks": [
        {
            "name": "validate.airunway.ai",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "jetway-webhook", "namespace": "jetway-system", "path": "/validate"}},
        }
    ],
}


async def test_the_certificate_is_issued_into_a_secret_and_its_ca_injected(cluster: Cluster) -> None:
    cluster.need_emulator()  # writes cluster-wide webhook configurations: not on a shared cluster
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        await cluster.kube.create(
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "jetway"}, **WEBHOOK_CONFIG}
        )
    namespace = cluster.namespace
    first = await ensure_certificate(cluster.kube, namespace, "jetway-webhook-tls", "jetway-webhook", "jetway")
    secret = await cluster.kube.get("v1", "Secret", "jetway-webhook-tls", namespace)
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        config = await cluster.kube.get("admissionregistration.k8s.io/v1", kind, "jetway")
        assert base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]) == first.ca_pem
        assert config["webhooks"][0]["clientConfig"]["service"]["path"] == "/validate"  # the rest left as it was
    second = await ensure_certificate(cluster.kube, namespace, "jetway-webhook-tls", "jetway-webhook", "jetway")
    assert second == first  # kept while valid: a restart does not rotate it
