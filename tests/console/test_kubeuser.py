"""The cluster console's pure parts: where the API server is (never a credential of the console's own), the API
server's refusals in the API's words, and what an apply did. The console itself, on a real API server:
tests/kube/test_console_cluster.py."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from services.console.kubeuser import Endpoint, refusal
from services.console.main import action


def kubeconfig(path: Path, cluster: dict[str, object]) -> str:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "here",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "admin", "user": {"token": "admin-secret", "client-certificate-data": "eA=="}}],
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "admin"}}],
    }
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_in_a_pod_the_api_server_is_the_service_host_with_the_mounted_ca() -> None:
    found = Endpoint.from_environment({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, None)
    assert found == Endpoint("https://10.0.0.1:443", "/var/run/jetway/kube-root-ca/ca.crt")
    ipv6 = Endpoint.from_environment({"KUBERNETES_SERVICE_HOST": "fd00::1"}, None, "/ca.crt")
    assert ipv6.server == "https://[fd00::1]:443" and ipv6.ca_file == "/ca.crt"


def test_outside_a_pod_only_the_kubeconfigs_cluster_is_read_never_its_user(tmp_path: Path) -> None:
    relative = Endpoint.from_environment(
        {}, kubeconfig(tmp_path / "config", {"server": "https://api:6443/", "certificate-authority": "ca.crt"})
    )
    assert relative == Endpoint("https://api:6443", str(tmp_path / "ca.crt"))  # relative to the kubeconfig, as kubectl reads it
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    inline = Endpoint.from_environment(
        {},
        kubeconfig(tmp_path / "inline", {"server": "https://api", "certificate-authority-data": base64.b64encode(pem.encode()).decode()}),
    )
    assert inline.ca_data == pem and inline.ca_file is None
    assert "admin-secret" not in repr(inline) and "eA==" not in repr(inline)  # the admin's credential is not even read


def test_a_kubeconfig_without_a_server_or_outside_a_pod_without_one_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no cluster with a server"):
        Endpoint.from_environment({}, kubeconfig(tmp_path / "config", {"certificate-authority": "ca.crt"}))
    with pytest.raises(ValueError, match="KUBECONFIG must name a kubeconfig"):
        Endpoint.from_environment({}, None)


def test_the_api_servers_refusal_keeps_its_message_and_the_fields_it_names() -> None:
    invalid = refusal(
        422,
        {
            "message": 'ModelDeployment.airunway.ai "x" is invalid: spec.scaling.replicas: Invalid value: -1',
            "details": {"causes": [{"field": "spec.scaling.replicas", "message": "Invalid value: -1"}, "junk"]},
        },
    )
    assert invalid.status == 422 and invalid.causes == [("spec.scaling.replicas", "Invalid value: -1")]
    assert refusal(403, {}).message == "the Kubernetes API server answered 403"


def test_an_apply_is_named_as_the_apply_api_names_it() -> None:
    old = {"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1}}
    assert action(None, old, dry_run=False) == "created" and action(None, old, dry_run=True) == "would_create"
    assert action(old, {**old, "status": {"phase": "Running"}}, dry_run=False) == "unchanged"
    changed = {**old, "spec": {"replicas": 2}}
    assert action(old, changed, dry_run=False) == "configured" and action(old, changed, dry_run=True) == "would_update"
    relabelled = {"metadata": {"labels": {"a": "2"}}, "spec": {"replicas": 1}}
    assert action(old, relabelled, dry_run=False) == "configured"
