"""Every object Jetway renders is accepted by a real API server, under the real CRDs' schemas.

The manifests (the rendering cases built on tests/contracts/cases, the examples, the CRD
reference's examples) go through the code the services and `jetway render` use: selection,
storage plan and provider rendering (`cli.render.objects_for`), the gateway control plane
(`services.gateway.decide`) and the agent binding (`services.binding`). Each rendered object is
its own test case: it is sent to the server with `dryRun=All` and `fieldValidation=Strict`, as a
create and as a server-side apply (how the services write), so an unknown or misplaced field, a
value the schema or its CEL rules refuse, or any warning fails the case with the server's words.
Nothing is stored.

Which schemas judge:
- from the projects' own Go modules (testbed/cluster/thirdparty.py): Gateway API v1.6.3 (Gateway,
  HTTPRoute, ReferenceGrant), Gateway API Inference Extension v1.5.0, AI Runway's pin, and
  v1.6.2, the newest served (InferencePool), KubeRay
  ray-operator v1.5.0 (RayService);
- Kubernetes' own kinds (Deployment, Service, Job, PVC, RBAC, ...) and Jetway's
  InferencePoolMember (deploy/crds/);
- STAND-INS, which take any field and so check only metadata, namespace and admission: KAITO
  `Workspace` (kaito.sh/v1beta1), Dynamo `DynamoGraphDeployment` (nvidia.com/v1alpha1), kagent
  `Agent` and `ModelConfig` (kagent.dev/v1alpha2). Their projects publish no Go module the proxy
  serves (each answered 403). To judge them too, put their released CRD YAML in a folder and set
  `JETWAY_THIRDPARTY_CRDS` to it: a CRD found there replaces the stand-in of the same name.

Runs on the test control plane only: it installs CRDs cluster-wide (skipped on a cluster
KUBECONFIG names) and the emulator validates no schema (skipped there, saying so).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.render import objects_for
from contracts.admission import admit
from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.gatewayapi import GatewayView
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, StoragePlanned
from contracts.providerconfig import EngineGateway, InferenceProviderConfig
from contracts.subjects import Key
from runtime.kube import APPLY, Kube, KubeError
from services.binding import decide as binding
from services.binding import render as agents
from services.gateway import decide
from services.selector import decide as selection
from services.storage import decide as storage
from services.workload import render as workload
from services.workload.providers import builtin_configs
from services.workload.render.common import Inputs
from testbed.cluster.thirdparty import INFERENCE_EXTENSION_NEWEST, UPSTREAM, upstream_crd
from testbed.kubeapi import CRDS, Cluster, RealServer, cluster_for_tests, foreign_crd
from tests.contracts.cases import AD, APC, MD, changed
from tests.services.test_render import CASES as RENDER_CASES
from tests.services.test_render import DISAGG

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(sys.executable).parent / "kubectl"
UID = "0d1f3a52-5b2e-4f2b-9f6c-8d7d0c1e2f3a"  # a uid, so objects carry their controller reference as in a cluster
SERVICE_IP = "10.96.0.42"
PLACEHOLDER = "jetway-test-collect"  # the namespace objects are rendered into to name the cases; each test renders into its own
DRY_RUN = [("dryRun", "All"), ("fieldValidation", "Strict")]
READY = {t: {"status": "True", "observedGeneration": 1} for t in ("Accepted", "ResolvedRefs", "Programmed")}

STAND_INS: list[dict[str, Any]] = [
    foreign_crd("kaito.sh", "v1beta1", "Workspace", "workspaces"),
    foreign_crd("nvidia.com", "v1alpha1", "DynamoGraphDeployment", "dynamographdeployments"),
    foreign_crd("kagent.dev", "v1alpha2", "Agent", "agents"),
    foreign_crd("kagent.dev", "v1alpha2", "ModelConfig", "modelconfigs"),
]


# --- the CRDs ------------------------------------------------------------------------------


def _local_crds() -> dict[str, dict[str, Any]]:
    """CRDs from $JETWAY_THIRDPARTY_CRDS, by name: released YAML a developer brought for the stand-ins."""
    folder = os.environ.get("JETWAY_THIRDPARTY_CRDS")
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(folder).glob("*.y*ml")) if folder else []:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found[doc["metadata"]["name"]] = doc
    return found


def provider_crd_set() -> list[dict[str, Any]]:
    local = _local_crds()
    stand_ins = [local.get(str(c["metadata"]["name"]), c) for c in STAND_INS]
    member = yaml.safe_load((CRDS / "inferencepoolmembers.airdress.co.yaml").read_text())
    return [upstream_crd(name) for name in UPSTREAM] + stand_ins + [member]


def kubectl(server: RealServer, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(KUBECTL), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "KUBECONFIG": server.kubeconfig},
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def provider_crds(real_server: RealServer) -> Iterator[list[str]]:
    """The providers' CRDs, installed once for the module (CRDs are cluster-wide and slow to come and go);
    those this module created are removed after it."""
    crds = provider_crd_set()
    names = [str(c["metadata"]["name"]) for c in crds]
    before = set(kubectl(real_server, "get", "crd", "-o", "name").split())
    created = [n for n in names if f"customresourcedefinition.apiextensions.k8s.io/{n}" not in before]
    try:
        kubectl(
            real_server,
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=jetway-tests",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(crds),
        )
        kubectl(real_server, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
        yield names
    finally:
        if created:
            kubectl(real_server, "delete", "crd", "--ignore-not-found", "--wait=true", *created)


# --- what is rendered ----------------------------------------------------------------------


def _providers() -> list[selection.Provider]:
    found = []
    for doc in builtin_configs():
        verdict = admit(doc)
        assert isinstance(verdict.obj, InferenceProviderConfig), verdict.problems
        found.append(selection.Provider(verdict.obj.metadata.name, verdict.obj.spec, True))
    return found


PROVIDERS = _providers()


def _in(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    placed = copy.deepcopy(doc)
    placed.setdefault("metadata", {})["namespace"] = namespace
    return placed


def deployment(manifest: dict[str, Any], namespace: str) -> ModelDeployment:
    verdict = admit(_in(manifest, namespace))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return verdict.obj


def _gateway(namespace: str) -> GatewayView:
    return GatewayView(namespace, "inference-gateway", 1, {}, ({"name": "http", "port": 80, "protocol": "HTTP"},), ("203.0.113.1",))


Render = Callable[[str], list[dict[str, Any]]]


def rendered_workload(manifest: dict[str, Any], *, gateway: bool = False) -> Render:
    """What the workload and storage services write for the deployment (`jetway render`)."""

    def render(namespace: str) -> list[dict[str, Any]]:
        objects, _ = objects_for(deployment(manifest, namespace), UID, PROVIDERS, gateway_available=gateway)
        return objects

    return render


def rendered_gateway(
    manifest: dict[str, Any],
    *,
    capability: Callable[[str], EngineGateway] | None = None,
    namespace_of: str | None = None,
    kinds: set[str] | None = None,
) -> Render:
    """What the gateway control plane writes once the deployment runs: the pool and its endpoint picker, or
    the provider's pool's ReferenceGrant, the HTTPRoute, the router member. `namespace_of` puts the deployment
    in another namespace than the objects kept (`kinds`)."""

    def render(namespace: str) -> list[dict[str, Any]]:
        md = deployment(manifest, namespace_of or namespace)
        key = Key("ModelDeployment", md.metadata.namespace or "default", md.metadata.name)
        chosen = selection.select(md, 1, None, PROVIDERS).decision
        assert isinstance(chosen, ProviderSelected), chosen
        plan = storage.plan(md, key, 1, UID)
        assert isinstance(plan, StoragePlanned), plan
        endpoint = workload.endpoint(chosen.provider, Inputs(key, UID, md, chosen.engine, plan, True))
        engine = next(p for p in PROVIDERS if p.name == chosen.provider).engine(chosen.engine)
        found = capability(namespace) if capability else (engine.gateway if engine else None)
        pool = decide.provider_pool(key, found)  # a provider's own pool: there, as the watcher would have seen it
        seen = {f"{pool[0]}/{pool[1]}"} if pool else set()
        inputs = decide.Inputs(key, UID, 1, md, True, endpoint, SERVICE_IP, found, True, [_gateway(namespace)], pools=seen)
        decided = decide.plan(inputs)
        assert decided is not None and decided.decision.reason == "GatewayConfigured", decided
        return [o for o in decided.objects() if kinds is None or o["kind"] in kinds]

    return render


def _model_views(namespace: str) -> dict[tuple[str, str], binding.ModelView]:
    manifest = next(d for d in _examples("modeldeployment-vllm.yaml") if d["kind"] == "ModelDeployment")
    md = deployment(manifest, namespace)
    return {(namespace, md.metadata.name): binding.ModelView(md, UID, {}, {"service": md.metadata.name, "port": 8000})}


AGENT_GATEWAYS = {
    "gateway-system/inference-gateway": GatewayView(
        "gateway-system",
        "inference-gateway",
        1,
        {},
        ({"name": "http", "port": 80, "protocol": "HTTP", "hostname": "models.example.com"},),
        ("203.0.113.1",),
        {"http": READY},
    )
}


def rendered_agent(manifest: dict[str, Any], framework: dict[str, Any]) -> Render:
    """What the binding service writes for the agent: the kagent ModelConfig and Agent, or the container workload."""

    def render(namespace: str) -> list[dict[str, Any]]:
        verdict = admit(_in(manifest, namespace))
        assert isinstance(verdict.obj, AgentDeployment), verdict.problems
        config = admit(framework).obj
        assert isinstance(config, AgentProviderConfig)
        bound = binding.bind(verdict.obj, config, _model_views(namespace), AGENT_GATEWAYS)
        assert isinstance(bound, binding.Bound), bound
        return agents.render(verdict.obj, config, UID, bound.binding).objects

    return render


def _examples(name: str, folder: Path = ROOT / "examples") -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((folder / name).read_text()) if d]


def _golden_case(case: str, more: dict[str, Any] | None = None) -> dict[str, Any]:
    """A rendering case of tests/services/test_render.py, with its provider named (those cases render one directly)."""
    provider, changes, _, _ = RENDER_CASES[case]
    return changed(MD, {**changes, **(more or {}), "spec.provider.name": provider})


# every option that reaches a provider's pod: env (literal and from a Secret), the token, pod metadata, scheduling, overrides
EVERY_OPTION = {
    "spec.env": [
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api"}}},
    ],
    "spec.secrets": {"huggingFaceToken": "hf-token"},
    "spec.podTemplate": {"metadata": {"labels": {"team": "ml"}, "annotations": {"prometheus.io/scrape": "true"}}},
    "spec.nodeSelector": {"gpu": "h100"},
    "spec.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "spec.provider.overrides": {
        "workload": {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}},
        "container": {
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}
        },
    },
}


SPEC_EXAMPLES = ROOT / "tests" / "contracts" / "spec_examples"
KAGENT = _examples("agentproviderconfig-kagent.yaml", SPEC_EXAMPLES)[0]
CONTAINER = _examples("agentproviderconfig-container.yaml")[0]
EXAMPLE_AGENTS = {d["metadata"]["name"]: d for d in _examples("agentdeployments.yaml")}
FRAMEWORKS = {"kagent": KAGENT, "openclaw": CONTAINER}
OTHER_POOLS = "dynamo-pools"
LONGEST = ("longest-name-" + "0123456789" * 6)[:63]  # a DNS-1035 label of 63 characters


def _sources() -> dict[str, Render]:
    sources: dict[str, Render] = {}
    for case, (_, _, _, gateway) in RENDER_CASES.items():
        sources[f"workload-{case}"] = rendered_workload(_golden_case(case), gateway=gateway)
    for path in sorted((ROOT / "examples").glob("modeldeployment-*.yaml")):
        for doc in _examples(path.name):
            if doc.get("kind") == "ModelDeployment":
                sources[f"example-{doc['metadata']['name']}"] = rendered_workload(doc, gateway="dynamo" in path.name)
    for path in (SPEC_EXAMPLES / "modeldeployment.yaml", SPEC_EXAMPLES / "direct-vllm.yaml"):
        doc = _examples(path.name, SPEC_EXAMPLES)[0]
        sources[f"spec-example-{doc['metadata']['name']}"] = rendered_workload(doc)
    for case in ("vllm-minimal", "llmd-aggregated", "dynamo-aggregated-gateway", "kaito-llamacpp"):
        sources[f"gateway-{case}"] = rendered_gateway(_golden_case(case))
    elsewhere = _golden_case("dynamo-aggregated-gateway")
    sources["gateway-route-to-a-pool-in-another-namespace"] = rendered_gateway(
        elsewhere,
        capability=lambda _: EngineGateway(
            managesInferencePool=True, inferencePoolNamePattern="{name}-pool", inferencePoolNamespace=OTHER_POOLS
        ),
        kinds={"HTTPRoute"},
    )
    sources["gateway-reference-grant"] = rendered_gateway(
        elsewhere,
        capability=lambda namespace: EngineGateway(
            managesInferencePool=True, inferencePoolNamePattern="{name}-pool", inferencePoolNamespace=namespace
        ),
        namespace_of="tenant-a",  # the grant lives with the pool, in the test's namespace; the route (not kept) in tenant-a
        kinds={"ReferenceGrant"},
    )
    for case in ("vllm-minimal", "llmd-aggregated", "kaito-vllm", "kaito-llamacpp", "kuberay", "dynamo-aggregated-gateway"):
        sources[f"every-option-{case}"] = rendered_workload(_golden_case(case, EVERY_OPTION), gateway="gateway" in case)
    sources["every-option-kaito-gguf"] = rendered_workload(
        _golden_case("kaito-llamacpp", {**EVERY_OPTION, "spec.engine.args": {"ggufUrl": "https://example.com/m.gguf"}})
    )
    sources["kuberay-disaggregated"] = rendered_workload(changed(MD, {**DISAGG, "spec.provider.name": "kuberay"}))
    sources["gateway-users-own-httproute"] = rendered_gateway(
        _golden_case("vllm-minimal", {"spec.gateway": {"httpRouteRef": "mine"}}), kinds={"InferencePool"}
    )
    for case in ("vllm-minimal", "llmd-disaggregated", "kaito-llamacpp", "kuberay", "dynamo-aggregated-gateway"):
        # the longest name admission takes: every name and label derived from it must still fit
        long = {**_golden_case(case), "metadata": {"name": LONGEST}}
        sources[f"longest-name-{case}"] = rendered_workload(long)
        if case == "vllm-minimal":
            sources[f"longest-name-gateway-{case}"] = rendered_gateway(long)
    for name, doc in EXAMPLE_AGENTS.items():
        sources[f"agent-example-{name}"] = rendered_agent(doc, FRAMEWORKS[doc["spec"]["framework"]["name"]])
    credentials = {"name": "llm-key", "key": "api-key"}
    for api, url in (("anthropic", "https://api.anthropic.com"), ("azureOpenAI", "https://acme.openai.azure.com")):
        external = {"type": api, "baseURL": url, "modelName": "big-model", "credentialsRef": credentials}
        sources[f"agent-kagent-{api}"] = rendered_agent(changed(AD, {"spec.model": {"externalAPI": external}}), APC)
    job = changed(
        AD,
        {
            "metadata.name": "nightly-report",
            "spec.framework.name": "openclaw",
            "spec.lifecycle": "job",
            "spec.model": {"externalAPI": {"type": "openai", "baseURL": "https://api.openai.com/v1", "modelName": "gpt-4o-mini"}},
            "spec.config": {"image": "ghcr.io/acme/report:1.0", "command": ["python", "-m", "report"], "args": ["--daily"], "port": 9000},
            "spec.resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "512Mi"}},
            "spec.observability": {"otlp": {"endpoint": "http://otel-collector.observability:4317", "protocol": "grpc"}},
        },
    )
    sources["agent-container-job"] = rendered_agent(job, CONTAINER)
    return sources


SOURCES = _sources()


@dataclass(frozen=True)
class Case:
    source: str
    kind: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.source}:{self.kind}/{self.name}"


CASES = [Case(source, o["kind"], o["metadata"]["name"]) for source, render in SOURCES.items() for o in render(PLACEHOLDER)]


# --- the server's verdict ------------------------------------------------------------------


def _warnings(kube: Kube) -> list[str]:
    """The server's warnings on the client's last answer (kubernetes-asyncio keeps that response)."""
    return list(kube.api.last_response.getheaders().getall("Warning", []))  # type: ignore[attr-defined]


async def submit(kube: Kube, obj: dict[str, Any]) -> list[str]:
    """Create it, then apply it server-side, both as a dry run under strict field validation; the server's
    warnings (KubeError when it refuses)."""
    resource = await kube.served(obj["apiVersion"], obj["kind"])
    namespace = obj["metadata"].get("namespace") if resource.namespaced else None
    warnings: list[str] = []
    await kube.request("POST", resource.path(namespace), query=DRY_RUN, body=obj)
    warnings += _warnings(kube)
    query = [*DRY_RUN, ("fieldManager", "jetway-tests"), ("force", "true")]
    await kube.request("PATCH", resource.path(namespace, obj["metadata"]["name"]), query=query, body=obj, content_type=APPLY)
    warnings += _warnings(kube)
    return warnings


@pytest.fixture(params=["emulator", "real"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """tests/conftest.py's `cluster`, skipping the emulator's side before an emulator is started for nothing."""
    if request.param == "emulator":
        pytest.skip("the emulator validates no schema: what a CRD's schema accepts is the real API server's to say")
    async with cluster_for_tests(request.getfixturevalue("real_server")) as found:
        yield found


def real_only(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    cluster.need_cluster_wide()
    request.getfixturevalue("provider_crds")


CLUSTER_SCOPED = {"InferencePoolMember"}  # named `<name>.<namespace>`, in no namespace


def rendered_object(case: Case, namespace: str) -> dict[str, Any]:
    """The case's object rendered into `namespace` (a cluster-scoped object's name carries the namespace)."""
    name = case.name.replace(PLACEHOLDER, namespace) if case.kind in CLUSTER_SCOPED else case.name
    found = [o for o in SOURCES[case.source](namespace) if o["kind"] == case.kind and o["metadata"]["name"] == name]
    assert found, f"{case.id}: not rendered into {namespace}"
    return found[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_the_server_accepts_the_rendered_object(cluster: Cluster, request: pytest.FixtureRequest, case: Case) -> None:
    real_only(cluster, request)
    obj = rendered_object(case, cluster.namespace)
    expected = None if case.kind in CLUSTER_SCOPED else cluster.namespace
    assert obj["metadata"].get("namespace") == expected, f"{case.id} is rendered into {obj['metadata'].get('namespace')}"
    try:
        warnings = await submit(cluster.kube, obj)
    except KubeError as refused:
        pytest.fail(f"{case.id}: the API server refused it: {refused.message}\n{yaml.safe_dump(obj, sort_keys=False)}", pytrace=False)
    assert not warnings, f"{case.id}: the API server warned: {warnings}"


async def test_the_server_accepts_the_gateway_allowed_routes_patch(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    """The one object Jetway does not own, only patches: a Gateway's listeners admitting other namespaces' routes."""
    real_only(cluster, request)
    listeners = [
        {"name": "http", "port": 80, "protocol": "HTTP"},
        {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "m.example.com"},
    ]
    gateway = {
        "apiVersion": decide.ROUTE_API,
        "kind": "Gateway",
        "metadata": {"name": "inference-gateway", "namespace": cluster.namespace},
        "spec": {"gatewayClassName": "example", "listeners": listeners},
    }
    await cluster.kube.create(gateway)
    view = GatewayView(cluster.namespace, "inference-gateway", 1, {}, tuple(listeners))
    for namespaces in ({cluster.namespace, "tenant-a", "tenant-b"}, {cluster.namespace}):  # admitting others, then taking it back
        patch = decide.allowed_routes(view, namespaces)
        try:
            warnings = await submit_patch(cluster.kube, patch)
        except KubeError as refused:
            pytest.fail(f"allowedRoutes for {sorted(namespaces)}: the API server refused it: {refused.message}", pytrace=False)
        assert not warnings, warnings


async def submit_patch(kube: Kube, patch: dict[str, Any]) -> list[str]:
    resource = await kube.served(patch["apiVersion"], patch["kind"])
    query = [*DRY_RUN, ("fieldManager", "jetway-gateway"), ("force", "true")]
    path = resource.path(patch["metadata"]["namespace"], patch["metadata"]["name"])
    await kube.request("PATCH", path, query=query, body=patch, content_type=APPLY)
    return _warnings(kube)


def test_every_provider_kind_is_covered() -> None:
    """A kind a provider renders that no case sends to the server would go unchecked."""
    kinds = {c.kind for c in CASES}
    expected = {"RayService", "Workspace", "DynamoGraphDeployment", "InferencePool", "HTTPRoute", "ReferenceGrant", "Agent", "ModelConfig"}
    assert expected <= kinds, expected - kinds
    assert {"Deployment", "Service", "Job", "PersistentVolumeClaim", "InferencePoolMember"} <= kinds


# --- the controls: were strict validation not in force, every case above would pass for nothing ----

JUDGED = sorted(
    {"HTTPRoute", "ReferenceGrant", "InferencePool", "RayService", "InferencePoolMember", "Deployment"}
    | {str(c["spec"]["names"]["kind"]) for c in _local_crds().values()}
)


@pytest.mark.parametrize("kind", JUDGED)
async def test_a_field_the_schema_does_not_know_is_refused(cluster: Cluster, request: pytest.FixtureRequest, kind: str) -> None:
    real_only(cluster, request)
    case = next(c for c in CASES if c.kind == kind)
    obj = rendered_object(case, cluster.namespace)
    obj["jetwayUnknown"] = True
    with pytest.raises(KubeError, match="jetwayUnknown") as refused:
        await submit(cluster.kube, obj)
    assert refused.value.status in (400, 422), refused.value


async def test_the_servers_warnings_are_seen(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    real_only(cluster, request)
    case = next(c for c in CASES if c.kind == "Deployment")
    obj = rendered_object(case, cluster.namespace)
    obj["spec"]["template"]["spec"]["nodeSelector"] = {"beta.kubernetes.io/arch": "amd64"}  # deprecated: the server warns, accepting it
    warnings = await submit(cluster.kube, obj)
    assert any("beta.kubernetes.io/arch" in w for w in warnings), warnings


POOL_CASES = [c for c in CASES if c.kind == "InferencePool"]


async def test_the_newest_inference_extension_accepts_every_rendered_pool(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    """Every InferencePool Jetway renders, judged again under the newest served release's CRD (the module's
    CRD, AI Runway's pin, put back after)."""
    real_only(cluster, request)
    server = request.getfixturevalue("real_server")
    name = "inferencepools.inference.networking.k8s.io"

    def install(crd: dict[str, Any]) -> None:
        kubectl(server, "apply", "--server-side", "--force-conflicts", "--field-manager=jetway-tests", "-f", "-", stdin=yaml.safe_dump(crd))
        kubectl(server, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")

    assert POOL_CASES, "no InferencePool is rendered"
    install(upstream_crd(name, INFERENCE_EXTENSION_NEWEST))
    try:
        refused = []
        for case in POOL_CASES:
            try:
                warnings = await submit(cluster.kube, rendered_object(case, cluster.namespace))
            except KubeError as exc:
                refused.append(f"{case.id}: {exc.message}")
                continue
            assert not warnings, f"{case.id} under {INFERENCE_EXTENSION_NEWEST[1]}: the API server warned: {warnings}"
        assert not refused, f"refused under {INFERENCE_EXTENSION_NEWEST[1]}: {refused}"
    finally:
        install(upstream_crd(name))
