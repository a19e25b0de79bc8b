"""deploy/ builds with kustomize, every object passes kubernetes-validate, and the manifests give
each service what its code needs and no more; the Tiltfile loads with stub Tilt built-ins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cli.render import objects_for
from contracts import natsauth, scaling
from contracts.admission import admit
from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.gatewayapi import GatewayView
from contracts.kinds import KINDS
from contracts.modeldeployment import ModelDeployment
from contracts.natsauth import SECRET_NAME, new_password, render_authorization
from contracts.natsauth import SERVICES as NATS_USERS
from contracts.providerconfig import InferenceProviderConfigSpec
from contracts.subjects import Key
from runtime import settings
from runtime.natsserver import nats_server_binary
from services.binding import render as agent_render
from services.gateway import decide
from services.router import keys
from services.selector.decide import Provider
from services.watcher.webhook import build_app
from services.workload.providers import builtin_configs
from tests.contracts.cases import MD, changed
from tests.support import tiltfile
from tests.support.cli import ROOT

KUBECTL = Path(sys.executable).parent / "kubectl"


def kustomize(path: Path) -> list[dict[str, Any]]:
    built = subprocess.run([str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return kustomize(ROOT / "deploy")


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.mark.parametrize("folder", ["deploy", "tilt"])
def test_every_object_passes_kubernetes_validate(folder: str) -> None:
    found = kustomize(ROOT / folder)
    failures = []
    for obj in found:
        try:
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert not failures
    assert {o["metadata"].get("namespace") for o in found if o["kind"] in ("Deployment", "StatefulSet", "Service")} == {"jetway-system"}


def test_each_service_runs_locked_down_with_probes_and_resources(objects: list[dict[str, Any]]) -> None:
    deployments = of_kind(objects, "Deployment")
    services = ("watcher", "selector", "storage", "workload", "gateway", "router", "binding", "console", "scaler")
    assert set(deployments) == {f"jetway-{s}" for s in services}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        module = container["command"][-1]
        assert container["command"][:2] == ["python", "-m"] and (ROOT / module.replace(".", "/") / "__main__.py").exists(), name
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz" and container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"] and not security["allowPrivilegeEscalation"]
        assert security["capabilities"]["drop"] == ["ALL"] and pod["securityContext"]["runAsUser"] != 0
        assert pod["serviceAccountName"] == name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["JETWAY_MODE"] == "cluster" and env["JETWAY_NATS_URL"] == "nats://jetway-nats:4222"
    for nats_only in ("jetway-selector", "jetway-router", "jetway-console", "jetway-scaler"):  # no token of their own in the pod
        assert not deployments[nats_only]["spec"]["template"]["spec"]["automountServiceAccountToken"], nats_only
    # the internet-facing router: its own ServiceAccount, members' credentials from a mounted Secret only
    router = deployments["jetway-router"]["spec"]["template"]["spec"]
    assert {v["secret"]["secretName"] for v in router["volumes"] if "secret" in v} == {"jetway-member-secrets", "jetway-client-keys"}
    # client keys (hashes) from their own optional Secret, required: no key, no request (docs/router.md)
    (keys_volume,) = (v for v in router["volumes"] if v.get("secret", {}).get("secretName") == "jetway-client-keys")
    assert keys_volume["secret"]["optional"] is True
    (container,) = router["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == keys_volume["name"])
    assert mount["readOnly"] and mount["mountPath"] == "/var/run/jetway/client-keys"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JETWAY_ROUTER_CLIENT_KEYS"] == "required"
    assert env["JETWAY_CLIENT_KEYS_FILE"] == "/var/run/jetway/client-keys/client-keys" == keys.MOUNTED_FILE
    assert "member-secrets" not in str(deployments["jetway-gateway"])


def test_no_service_link_variable_can_pass_for_a_jetway_setting(objects: list[dict[str, Any]]) -> None:
    """Kubernetes gives a pod `<SERVICE>_PORT=tcp://IP:PORT` (and more) for every Service of its namespace unless
    `enableServiceLinks: false`. A Service named jetway-router makes JETWAY_ROUTER_PORT, which runtime/settings.py
    reads as the router's port: every pod crash-looped on the first real node with the settings tree. So no pod of
    Jetway's takes service links while any such variable is a declared setting."""
    declared = {leaf.env for _, leaf in settings.declared()}
    links = set()
    for name, service in of_kind(objects, "Service").items():
        prefix = name.upper().replace("-", "_")
        links |= {f"{prefix}_PORT", f"{prefix}_SERVICE_HOST", f"{prefix}_SERVICE_PORT"}
        for port in service["spec"]["ports"]:
            links.add(f"{prefix}_PORT_{port['port']}_{port.get('protocol', 'TCP')}")
    assert links & declared >= {"JETWAY_ROUTER_PORT", "JETWAY_WEBHOOK_PORT"}, "the collision this guards against"
    for name, deployment in of_kind(objects, "Deployment").items():
        assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False, name


def test_nats_keeps_its_events_on_a_volume_and_syncs_every_write(objects: list[dict[str, Any]]) -> None:
    nats = of_kind(objects, "StatefulSet")["jetway-nats"]
    assert nats["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    config = of_kind(objects, "ConfigMap")["jetway-nats"]["data"]["nats.conf"]
    assert "sync_interval: always" in config and "store_dir: /data/jetstream" in config
    mounts = {m["mountPath"] for m in nats["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert "/data" in mounts


def test_nats_runs_as_a_three_node_cluster_the_real_server_accepts(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    nats = of_kind(objects, "StatefulSet")["jetway-nats"]
    spec = nats["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    headless = of_kind(objects, "Service")[spec["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]} == {"client": 4222, "cluster": 6222}
    config = of_kind(objects, "ConfigMap")["jetway-nats"]["data"]["nats.conf"]
    routes = [f"nats://jetway-nats-{i}.{spec['serviceName']}:6222" for i in range(spec["replicas"])]
    assert all(route in config for route in routes)  # one route per pod, by its stable name
    assert of_kind(objects, "PodDisruptionBudget")["jetway-nats"]["spec"]["maxUnavailable"] == 1

    # the server itself parses the configuration, with the environment the pod gives it
    (tmp_path / "nats.conf").write_text(config)
    (tmp_path / "auth.conf").write_text(of_kind(objects, "ConfigMap")["jetway-nats-auth"]["data"]["auth.conf"])
    environ = {"SERVER_NAME": "jetway-nats-0", **{s.password_env: new_password() for s in NATS_USERS}}
    command = [nats_server_binary(), "-c", str(tmp_path / "nats.conf"), "-t"]
    checked = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=30, check=False)
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_every_service_talks_to_nats_as_its_own_user(objects: list[dict[str, Any]]) -> None:
    """The server knows each service's user (auth.conf, from contracts/natsauth.py) with the password
    from the Secret, and each service connects as that user, never with another's password."""
    nats = of_kind(objects, "StatefulSet")["jetway-nats"]
    auth = of_kind(objects, "ConfigMap")["jetway-nats-auth"]["data"]["auth.conf"]
    assert auth == render_authorization()
    assert "include ./auth.conf" in of_kind(objects, "ConfigMap")["jetway-nats"]["data"]["nats.conf"]
    projected = next(v for v in nats["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")["projected"]["sources"]
    assert [source["configMap"]["name"] for source in projected] == ["jetway-nats", "jetway-nats-auth"]  # side by side
    container_env = nats["spec"]["template"]["spec"]["containers"][0]["env"]
    server_env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container_env if "secretKeyRef" in e.get("valueFrom", {})}
    assert server_env == {s.password_env: {"name": SECRET_NAME, "key": s.user} for s in NATS_USERS}

    deployments = of_kind(objects, "Deployment")
    for service in NATS_USERS:
        env = {e["name"]: e for e in deployments[f"jetway-{service.user}"]["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["JETWAY_NATS_USER"]["value"] == service.user
        assert env["JETWAY_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": SECRET_NAME, "key": service.user}


def test_the_router_may_publish_the_scaling_signals_and_only_the_scaler_decides_counts() -> None:
    """contracts/natsauth.py as the server enforces it: the router publishes each member's load and the demand it
    holds (contracts/scaling.py), the scaler hears them and writes its own facet, and nobody else writes that."""
    assert (natsauth.LOAD_SIGNALS, natsauth.DEMAND_SIGNALS) == (scaling.LOAD_SIGNALS, scaling.DEMAND_SIGNALS)
    scaler = natsauth.permissions(natsauth.service_user("scaler"))
    assert {scaling.LOAD_SIGNALS, scaling.DEMAND_SIGNALS} <= set(scaler["subscribe"])
    facet = "jetway.evt.*.modeldeployment.*.*.scaler"
    assert [s for s in scaler["publish"] if s.startswith("jetway.evt.")] == [facet]
    assert {scaling.LOAD_SIGNALS, scaling.DEMAND_SIGNALS} <= set(natsauth.permissions(natsauth.service_user("router"))["publish"])
    assert [u.user for u in NATS_USERS if facet in natsauth.permissions(u)["publish"]] == ["scaler"]


def _rules(objects: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """Every rule granted to one ServiceAccount, through its (Cluster)RoleBindings."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    granted = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if any(s["name"] == account for s in binding["subjects"]):
            granted += roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]["rules"]
    return granted


def _allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] and not r.get("resourceNames") for r in rules)


def _plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


def rendered(provider: str) -> list[dict[str, Any]]:
    """What Jetway writes for a deployment on `provider`, with a model cache (PVC and download Job)."""
    manifest = changed(
        MD,
        {"spec.provider": {"name": provider}, "spec.model.storage.volumes": [{"name": "cache", "purpose": "modelCache", "size": "20Gi"}]},
    )
    verdict = admit(manifest)
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    providers = [Provider(c["metadata"]["name"], InferenceProviderConfigSpec.model_validate(c["spec"]), True) for c in builtin_configs()]
    objects, _ = objects_for(verdict.obj, "uid-1", providers)
    return objects


def gateway_objects() -> list[dict[str, Any]]:
    """What the gateway's control plane writes for a running deployment: pool, picker, route, grant, member."""
    verdict = admit(changed(MD, {"spec.provider": {"name": "vllm"}}))
    assert isinstance(verdict.obj, ModelDeployment)
    key = Key("ModelDeployment", "default", "qwen")
    inputs = decide.Inputs(
        key,
        "uid-1",
        1,
        verdict.obj,
        True,
        {"service": "qwen", "port": 8000},
        "10.0.0.9",
        None,
        True,
        [GatewayView("default", "gw", listeners=({"name": "http", "port": 80, "protocol": "HTTP"},))],
    )
    plan = decide.plan(inputs)
    assert plan is not None
    return [*plan.objects(), decide.reference_grant(inputs, ("pools", "qwen-pool"))]


def agent_objects() -> list[dict[str, Any]]:
    binding = {"baseURL": "http://qwen.default.svc.cluster.local:8000/v1", "modelName": "m", "apiType": "openai"}
    out = []
    for backend, framework, lifecycle in (
        ("container", "helper", "deployment"),
        ("container", "helper", "job"),
        ("crd", "kagent", "deployment"),
    ):
        config = AgentProviderConfig.model_validate({"metadata": {"name": framework}, "spec": {"capabilities": {"backend": backend}}})
        agent = AgentDeployment.model_validate(
            {
                "metadata": {"name": "a", "namespace": "default"},
                "spec": {
                    "framework": {"name": framework},
                    "lifecycle": lifecycle,
                    "model": {"deploymentRef": {"name": "qwen"}},
                    "config": {"image": "x"},
                },
            }
        )
        out += agent_render.render(agent, config, "uid-2", binding).objects
    return out


def test_rbac_grants_each_service_what_its_code_writes_and_no_wildcards(objects: list[dict[str, Any]]) -> None:
    for role in (o for o in objects if o["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"], role["metadata"]["name"]
    written: dict[str, set[tuple[str, str]]] = {"workload": set(), "storage": set()}
    for provider in ("vllm", "llmd", "dynamo", "kaito", "kuberay"):
        for obj in rendered(provider):
            owner = "storage" if obj["kind"] in ("PersistentVolumeClaim", "Job") else "workload"
            group = obj["apiVersion"].rsplit("/", 1)[0] if "/" in obj["apiVersion"] else ""
            written[owner].add((group, _plural(obj["kind"])))
    assert ("", "persistentvolumeclaims") in written["storage"] and ("kaito.sh", "workspaces") in written["workload"]
    for service, resources in written.items():
        rules = _rules(objects, f"jetway-{service}")
        for group, resource in resources:
            for verb in ("get", "create", "patch", "delete", "list", "watch"):  # list and watch: the writer's cache
                assert _allows(rules, group, resource, verb), f"jetway-{service} may not {verb} {group}/{resource}"
    for service, produced in (("gateway", gateway_objects()), ("binding", agent_objects())):
        rules = _rules(objects, f"jetway-{service}")
        for obj in produced:
            group = obj["apiVersion"].rsplit("/", 1)[0] if "/" in obj["apiVersion"] else ""
            for verb in ("get", "create", "patch", "delete"):
                assert _allows(rules, group, _plural(obj["kind"]), verb), f"jetway-{service} may not {verb} {group}/{_plural(obj['kind'])}"
    # Kubernetes lets a Role grant only what its writer holds: the gateway holds what the picker's Role grants
    picker_role = next(o for o in gateway_objects() if o["kind"] == "Role")
    gateway_rules = _rules(objects, "jetway-gateway")
    for rule in picker_role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert _allows(gateway_rules, group, resource, verb), f"the picker's Role grants {verb} {group}/{resource}"
    watcher = _rules(objects, "jetway-watcher")
    for info in KINDS.values():
        for verb in ("list", "watch"):
            assert _allows(watcher, info.group, info.plural, verb)
        assert _allows(watcher, info.group, f"{info.plural}/status", "patch")
    assert not _allows(watcher, "apps", "deployments", "patch")  # reads workloads, never writes them
    assert _rules(objects, "jetway-selector") == []
    assert _rules(objects, "jetway-scaler") == []  # its counts reach the cluster through the workload service
    assert _rules(objects, "jetway-router") == []  # the data plane may create, delete or read nothing in the cluster
    assert _rules(objects, "jetway-console") == []  # the console speaks to Kubernetes only with the user's own token


def test_the_console_reaches_the_router_and_every_router_pods_metrics(objects: list[dict[str, Any]]) -> None:
    """The cluster console's playground relays to the router's Service, and its figures come from each router pod's
    /metrics, found by DNS through a headless Service (no API rights needed); its CA is the cluster's ConfigMap."""
    services = of_kind(objects, "Service")
    router_pod = of_kind(objects, "Deployment")["jetway-router"]["spec"]["template"]
    router_ports = {p["name"]: p["containerPort"] for p in router_pod["spec"]["containers"][0]["ports"]}
    console_pod = of_kind(objects, "Deployment")["jetway-console"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in console_pod["containers"][0]["env"]}
    host, port = env["JETWAY_ROUTER_METRICS"].split(":")
    headless = services[host]["spec"]
    assert headless["clusterIP"] == "None" and headless["selector"].items() <= router_pod["metadata"]["labels"].items()
    assert headless["ports"][0]["port"] == int(port) and router_ports[headless["ports"][0]["targetPort"]] == router_ports["health"]
    router_url = env["JETWAY_ROUTER_URL"]
    assert router_url == f"http://jetway-router:{services['jetway-router']['spec']['ports'][0]['port']}/v1"
    ca = next(v for v in console_pod["volumes"] if "configMap" in v)
    mount = next(m for m in console_pod["containers"][0]["volumeMounts"] if m["name"] == ca["name"])
    assert ca["configMap"]["name"] == "kube-root-ca.crt" and env["JETWAY_KUBE_CA_FILE"] == f"{mount['mountPath']}/ca.crt"
    # the pages are for port-forward only: no pod may call them (a NetworkPolicy that admits the health port alone)
    (policy,) = of_kind(objects, "NetworkPolicy").values()
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= of_kind(objects, "Deployment")["jetway-console"]["spec"]["template"]["metadata"]["labels"].items()
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"] and [p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]] == ["health"]
    console_port = services["jetway-console"]["spec"]["ports"][0]
    assert {p["name"]: p["containerPort"] for p in console_pod["containers"][0]["ports"]}[console_port["targetPort"]] == int(
        env["JETWAY_CONSOLE_PORT"]
    )


def test_the_webhook_configurations_cover_every_kind_and_reach_the_server(objects: list[dict[str, Any]]) -> None:
    routes = {r.resource.canonical for r in build_app().router.routes() if r.resource is not None}
    validating = of_kind(objects, "ValidatingWebhookConfiguration")["jetway"]["webhooks"][0]
    covered = {(g, r) for rule in validating["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert covered == {(i.group, i.plural) for i in KINDS.values()}
    mutating = of_kind(objects, "MutatingWebhookConfiguration")["jetway"]["webhooks"][0]
    for hook in (validating, mutating):
        service = hook["clientConfig"]["service"]
        assert service["path"] in routes and service["name"] in of_kind(objects, "Service")
    webhook_service = of_kind(objects, "Service")["jetway-webhook"]
    watcher_ports = {
        p["name"] for p in of_kind(objects, "Deployment")["jetway-watcher"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert webhook_service["spec"]["ports"][0]["targetPort"] in watcher_ports


def test_every_service_pod_is_scraped_on_its_health_port(objects: list[dict[str, Any]]) -> None:
    """Prometheus finds /metrics by the pods' annotations, or by the optional PodMonitor (docs/metrics.md)."""
    monitor = yaml.safe_load((ROOT / "deploy" / "monitoring" / "podmonitor.yaml").read_text())
    (selected,) = monitor["spec"]["selector"]["matchExpressions"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    for name, deployment in of_kind(objects, "Deployment").items():
        template = deployment["spec"]["template"]
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert ports["health"] == int(env.get("JETWAY_HEALTH_PORT", "8090")), name  # runtime/entry.py serves /metrics there
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics", name
        assert annotations["prometheus.io/port"] == str(ports["health"]), name
        assert template["metadata"]["labels"][selected["key"]] in selected["values"], name
        assert endpoint["port"] == "health" and endpoint["path"] == "/metrics"
    kustomization = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())
    assert not any(r.startswith("monitoring") for r in kustomization["resources"])  # the operator's CRDs may not be installed


def test_the_dockerfile_builds_the_image_the_manifests_run() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    for source in ("contracts", "runtime", "services", "cli", "simulator"):
        assert f"COPY --chown=10001:10001 {source} {source}" in dockerfile and (ROOT / source).is_dir()
    assert "USER 10001:10001" in dockerfile  # the uid the pods' securityContext names
    built = kustomize(ROOT / "deploy")
    images = {c["image"] for d in of_kind(built, "Deployment").values() for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"ghcr.io/jetway-dev/jetway:0.1.0"}


# --- the Tiltfile -----------------------------------------------------------------------------


@pytest.mark.parametrize("builder", ["docker", "buildah"])
def test_the_tiltfile_loads_and_covers_the_whole_stack(builder: str) -> None:
    tilt = tiltfile.load({"JETWAY_IMAGE_BUILDER": builder, "JETWAY_REGISTRY": "127.0.0.1:5000"})
    (build,) = tilt.builds
    assert tilt.registry == "127.0.0.1:5000"
    synced = {remote for _, remote in build.syncs}
    assert synced == {"/app/contracts", "/app/runtime", "/app/services", "/app/cli", "/app/simulator"}  # deploy/Dockerfile's /app
    if builder != "docker":  # no daemon: the builder builds deploy/Dockerfile and pushes to the registry itself
        assert build.pushes_itself and build.folder == ROOT
        assert build.command.startswith("buildah build") and "-f deploy/Dockerfile" in build.command
        assert "buildah push" in build.command and {ROOT / "pyproject.toml", ROOT / "services"} <= set(build.deps)

    images = {
        c["image"].split(":")[0] for o in tilt.objects if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == set(tilt.images)  # Tilt substitutes what it builds into every service
    workloads = {o["metadata"]["name"] for o in tilt.objects if o["kind"] in ("Deployment", "StatefulSet")}
    assert workloads <= set(tilt.resources)
    assert "8080:8080" in tilt.resources["jetway-router"]["forwards"] and "4222:4222" in tilt.resources["jetway-nats"]["forwards"]
    labels = {label for r in tilt.resources.values() for label in r["labels"]}
    assert labels >= {"watcher", "selector", "storage", "workload", "gateway", "router", "scaler"}
    others = {f"{o['metadata']['name']}:{o['kind'].lower()}" for o in tilt.objects if o["kind"] not in ("Deployment", "StatefulSet")}
    loose = others - tilt.claimed - {"jetway-nats:service", "jetway-nats-headless:service"}  # Tilt attaches a workload's Services itself
    assert not loose, f"objects no resource groups: {sorted(loose)}"
    reloading = [o for o in tilt.objects if o["kind"] == "Deployment"]
    assert all({"name": "JETWAY_DEV_RELOAD", "value": "true"} in o["spec"]["template"]["spec"]["containers"][0]["env"] for o in reloading)
