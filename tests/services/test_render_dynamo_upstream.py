"""NVIDIA Dynamo, ported from AI Runway's own tests (ai-runway/airunway b0d3fb7: providers/dynamo/transformer_test.go,
mocker_test.go, the mocker end-to-end test, and the controller's and webhook's mocker cases): the same inputs, the
same facts a user sees in the rendered DynamoGraphDeployment, run against Jetway's renderer and, where upstream's
case is an admission or compatibility one, against Jetway's admission rules and selector.

Upstream builds its ModelDeployment in Go, so what it leaves out is a zero value (`enablePrefixCaching` false);
here the manifest goes through admission like a user's does, with `enablePrefixCaching: false` written out where
upstream's zero value matters. Where a case needs what admission refuses (upstream's transformer tests call the
transformer directly), `unadmitted` parses and defaults the manifest without checking it.

Upstream renders the endpoint picker (`Epp`) unless `spec.gateway.enabled` is false; Jetway renders it when gateway
integration is on, which by default means the Inference Extension is served (`gateway=True` below). Deliberate
differences are listed in docs/upstream-differences.md under "Dynamo".
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cli.render import objects_for
from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, SelectionFailed
from contracts.subjects import Key
from services.selector.decide import select
from services.workload.render import endpoint, render
from services.workload.render.common import Inputs, RenderError
from services.workload.render.dynamo import model_label
from tests.contracts.cases import DELETE, MD, changed
from tests.services import upstream
from tests.services.test_selection import builtins
from tests.services.upstream import UID, has_arg

MODEL = "meta-llama/Llama-2-7b-chat-hf"
MOCKER = {"airunway.ai/dynamo-test-backend": "mocker"}
# upstream newTestMD: test-model in default, a Hugging Face model, engine vllm (Go's zero values), one GPU
UPSTREAM_MD = changed(
    MD,
    {
        "metadata.name": "test-model",
        "spec.model": {"id": MODEL, "source": "huggingface"},
        "spec.engine": {"type": "vllm", "enablePrefixCaching": False},
        "spec.provider": {"name": "dynamo"},
    },
)
# upstream newMockerMD: the annotation, Qwen/Qwen3-0.6B, no GPU
MOCKER_MD = changed(UPSTREAM_MD, {"metadata.annotations": MOCKER, "spec.model.id": "Qwen/Qwen3-0.6B", "spec.resources": {}})
DISAGG = {"spec.resources": DELETE, "spec.serving": {"mode": "disaggregated"}}
KV_TRANSFER = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
PLANNER = "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.1.1"


def admitted(changes: dict[str, Any], *, gateway: bool = False, base: dict[str, Any] = UPSTREAM_MD) -> Inputs:
    """`gateway`: the Inference Extension is served."""
    return upstream.admitted(base, changes, gateway=gateway)


def unadmitted(changes: dict[str, Any], *, gateway: bool = False, base: dict[str, Any] = UPSTREAM_MD) -> Inputs:
    return upstream.unadmitted(base, changes, gateway=gateway)


def refusals(changes: dict[str, Any], base: dict[str, Any] = UPSTREAM_MD) -> list[str]:
    return upstream.refusals(base, changes)


def dgd(inputs: Inputs) -> dict[str, Any]:
    (obj,) = render("dynamo", inputs)
    return obj


def services(inputs: Inputs) -> dict[str, Any]:
    return dict(dgd(inputs)["spec"]["services"])


def main(service: dict[str, Any]) -> dict[str, Any]:
    return dict(service["extraPodSpec"]["mainContainer"])


def args_of(service: dict[str, Any]) -> list[str]:
    return list(main(service)["args"])


def env_var(service: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in main(service).get("env", []) if v["name"] == name), None)


def render_refusal(inputs: Inputs) -> str:
    with pytest.raises(RenderError) as refused:
        render("dynamo", inputs)
    return str(refused.value)


def selection(changes: dict[str, Any], base: dict[str, Any] = UPSTREAM_MD) -> ProviderSelected | SelectionFailed:
    verdict = admit(changed(base, changes))
    assert isinstance(verdict.obj, ModelDeployment)
    decision = select(verdict.obj, 1, None, builtins()).decision
    assert isinstance(decision, ProviderSelected | SelectionFailed)
    return decision


def disagg(prefill: dict[str, Any], decode: dict[str, Any]) -> dict[str, Any]:
    return {**DISAGG, "spec.scaling": {"prefill": prefill, "decode": decode}}


# --- the DynamoGraphDeployment ---


def test_transform_aggregated() -> None:
    """upstream: TestTransformAggregated: with the Inference Extension, the endpoint picker and no Frontend."""
    obj = dgd(admitted({}, gateway=True))
    assert (obj["apiVersion"], obj["kind"]) == ("nvidia.com/v1alpha1", "DynamoGraphDeployment")
    assert (obj["metadata"]["name"], obj["metadata"]["namespace"]) == ("test-model", "default")
    labels = obj["metadata"]["labels"]
    assert (labels["airunway.ai/managed-by"], labels["airunway.ai/engine-type"]) == ("airunway", "vllm")
    (owner,) = obj["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "name": "test-model",
        "uid": UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert obj["spec"]["backendFramework"] == "vllm"
    assert set(obj["spec"]["services"]) == {"Epp", "VllmWorker"}


def test_transform_aggregated_gateway_follows_spec_gateway() -> None:
    """upstream: TestTransformAggregated's gateway default. Upstream renders `Epp` whenever `spec.gateway.enabled` is
    not false; Jetway turns gateway integration on by default only where the Inference Extension is served (the
    spec: "defaults to true when Gateway detected"), as its gateway control plane does, because the operator's
    InferencePool needs it. Offline (`jetway render`, nothing detected) an unset gateway renders the Frontend."""
    assert set(services(admitted({}))) == {"Frontend", "VllmWorker"}
    assert set(services(admitted({}, gateway=True))) == {"Epp", "VllmWorker"}
    assert set(services(admitted({"spec.gateway": {"enabled": False}}, gateway=True))) == {"Frontend", "VllmWorker"}
    explicit = services(admitted({"spec.gateway": {"enabled": True}}))
    assert set(explicit) == {"Epp", "VllmWorker"} and "frontendSidecar" in explicit["VllmWorker"]
    assert "frontendSidecar" not in services(admitted({}))["VllmWorker"]


def test_transform_disaggregated() -> None:
    """upstream: TestTransformDisaggregated"""
    found = services(
        admitted(
            disagg(
                {"replicas": 2, "gpu": {"count": 2, "type": "nvidia.com/gpu"}, "memory": "64Gi"},
                {"replicas": 3, "gpu": {"count": 1, "type": "nvidia.com/gpu"}, "memory": "32Gi"},
            )
        )
    )
    assert "VllmWorker" not in found
    prefill, decode = found["VllmPrefillWorker"], found["VllmDecodeWorker"]
    assert (prefill["replicas"], prefill["subComponentType"]) == (2, "prefill")
    assert (decode["replicas"], decode["subComponentType"]) == (3, "decode")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_map_engine_type(engine: str) -> None:
    """upstream: TestMapEngineType. An engine Dynamo cannot run (upstream passes its name through) is refused with
    the words of upstream's compatibility check."""
    assert dgd(admitted({"spec.engine.type": engine}))["spec"]["backendFramework"] == engine
    assert render_refusal(unadmitted({"spec.engine.type": "llamacpp"})) == "Dynamo does not support llamacpp engine"


def test_get_image() -> None:
    """upstream: TestGetImage: spec.image, then spec.engine.image ahead of it, else the engine's runtime image."""
    assert main(services(admitted({"spec.image": "custom-image:v1"}))["VllmWorker"])["image"] == "custom-image:v1"
    assert main(services(admitted({"spec.engine.image": "engine-image:v2"}))["VllmWorker"])["image"] == "engine-image:v2"
    both = {"spec.image": "custom-image:v1", "spec.engine.image": "engine-image:v2"}
    assert main(services(unadmitted(both))["VllmWorker"])["image"] == "engine-image:v2"
    assert any("conflicts with spec.engine.image" in p for p in refusals(both))  # upstream's webhook refuses the pair too
    for engine, image in {"vllm": "vllm-runtime", "sglang": "sglang-runtime", "trtllm": "tensorrtllm-runtime"}.items():
        worker = services(admitted({"spec.engine.type": engine}))["VllmWorker"]
        assert main(worker)["image"] == f"nvcr.io/nvidia/ai-dynamo/{image}:1.1.1"


def test_build_engine_args() -> None:
    """upstream: TestBuildEngineArgs"""

    def worker_args(engine: dict[str, Any], served: str | None = None) -> list[str]:
        changes: dict[str, Any] = {"spec.engine": {"enablePrefixCaching": False, **engine}}
        if served:
            changes["spec.model.servedName"] = served
        return args_of(services(admitted(changes))["VllmWorker"])

    assert worker_args({"type": "vllm"}) == ["--model", MODEL]
    assert worker_args({"type": "sglang", "contextLength": 4096}) == ["--model-path", MODEL, "--context-length", "4096"]
    assert worker_args({"type": "vllm", "contextLength": 4096}) == ["--model", MODEL, "--max-model-len", "4096"]
    assert worker_args({"type": "trtllm"}) == ["--model-path", MODEL]
    named = worker_args({"type": "vllm", "trustRemoteCode": True}, served="my-model")
    assert has_arg(named, "--served-model-name", "my-model") and "--trust-remote-code" in named
    assert "--enable-prefix-caching" in worker_args({"type": "vllm", "enablePrefixCaching": True})
    assert "--enforce-eager" in worker_args({"type": "vllm", "enforceEager": True})
    trtllm = worker_args({"type": "trtllm", "enablePrefixCaching": True, "enforceEager": True})
    assert "--enable-prefix-caching" not in trtllm and "--enforce-eager" not in trtllm


def test_build_engine_args_prefix_caching_off_emits_nothing() -> None:
    """upstream: TestBuildEngineArgs (prefix caching off): no flag at all, the engine's own default stands. For
    SGLang, Jetway passes SGLang's own flags, not vLLM's: nothing for prefix caching on (the radix cache is SGLang's
    default) and `--disable-cuda-graph` for eager mode, where upstream passes `--enable-prefix-caching` and
    `--enforce-eager`, which SGLang does not have."""
    for engine in ("vllm", "sglang"):
        off = args_of(services(admitted({"spec.engine": {"type": engine, "enablePrefixCaching": False}}))["VllmWorker"])
        assert not [a for a in off if "prefix-caching" in a or "radix" in a], off
    sglang = args_of(
        services(admitted({"spec.engine": {"type": "sglang", "enablePrefixCaching": True, "enforceEager": True}}))["VllmWorker"]
    )
    assert "--enable-prefix-caching" not in sglang and "--enforce-eager" not in sglang and "--disable-cuda-graph" in sglang


@pytest.mark.parametrize(("engine", "module"), [("vllm", "dynamo.vllm"), ("sglang", "dynamo.sglang"), ("trtllm", "dynamo.trtllm")])
def test_engine_command(engine: str, module: str) -> None:
    """upstream: TestEngineCommand"""
    assert main(services(admitted({"spec.engine.type": engine}))["VllmWorker"])["command"] == ["python3", "-m", module]


def test_is_valid_arg_key() -> None:
    """upstream: TestIsValidArgKey: refused at admission, with upstream's words."""
    for key in ("tensor-parallel-size", "enable_feature", "maxBatchSize", "abc123"):
        assert refusals({"spec.engine.args": {key: "1"}}) == [], key
        assert has_arg(args_of(services(admitted({"spec.engine.args": {key: "1"}}))["VllmWorker"]), f"--{key}", "1")
    for key in ("", "key;drop", "a b", "foo$bar", "x&y", "a|b", "a`b"):
        message = f'invalid engine arg key "{key}": must contain only alphanumeric characters, hyphens, and underscores'
        assert any(message in p for p in refusals({"spec.engine.args": {key: "1"}})), key


def test_build_resource_limits() -> None:
    """upstream: TestBuildResourceLimits: GPUs under Dynamo's own `gpu` key whatever their type, requested and limited;
    memory and CPU limited. Without resources admission defaults one GPU, as upstream's webhook does."""
    assert services(admitted({"spec.resources": DELETE}))["VllmWorker"]["resources"] == {"limits": {"gpu": "1"}, "requests": {"gpu": "1"}}
    four = services(admitted({"spec.resources": {"gpu": {"count": 4, "type": "nvidia.com/gpu"}}}))["VllmWorker"]["resources"]
    assert four == {"limits": {"gpu": "4"}, "requests": {"gpu": "4"}}
    amd = services(admitted({"spec.resources": {"gpu": {"count": 2, "type": "amd.com/gpu"}}}))["VllmWorker"]["resources"]
    assert amd["limits"] == {"gpu": "2"}
    sized = services(admitted({"spec.resources": {"gpu": {"count": 1}, "memory": "32Gi", "cpu": "8"}}))["VllmWorker"]["resources"]
    assert (sized["limits"]["memory"], sized["limits"]["cpu"]) == ("32Gi", "8")


def test_parse_overrides() -> None:
    """upstream: TestParseOverrides: routerMode and the Frontend's replicas and resources reach the Frontend; without
    overrides the defaults (round-robin, one replica, 2 CPUs and 4Gi requested). Whether admission lets the typed
    keys through is contracts/rules/overrides.py's to say, so the overridden case is rendered unadmitted."""
    plain = services(admitted({}))["Frontend"]
    assert plain["replicas"] == 1 and plain["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}}
    assert main(plain)["env"] == [{"name": "DYN_ROUTER_MODE", "value": "round-robin"}]
    typed = {"routerMode": "kv", "frontend": {"replicas": 3, "resources": {"cpu": "4", "memory": "8Gi"}}}
    obj = dgd(unadmitted({"spec.provider.overrides": typed}))
    frontend = obj["spec"]["services"]["Frontend"]
    assert frontend["replicas"] == 3 and frontend["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}}
    assert main(frontend)["env"] == [{"name": "DYN_ROUTER_MODE", "value": "kv"}]
    assert not {"routerMode", "frontend", "epp"} & (set(obj) | set(obj["spec"]))  # consumed, not merged raw (Jetway)
    assert refusals({"spec.provider.overrides": "invalid json"}) == ["spec.provider.overrides: overrides must be a JSON object"]
    wrong = render_refusal(unadmitted({"spec.provider.overrides": {"frontend": {"replicas": "three"}}}))
    assert wrong == 'provider override "frontend.replicas" must be an integer'


def test_parse_overrides_epp() -> None:
    """upstream: TestParseOverrides' EPPOverrides (replicas, image), as buildEPP applies them; routerMode is the
    standalone Frontend's and does not reach the endpoint picker."""
    epp = services(admitted({}, gateway=True))["Epp"]
    assert epp["replicas"] == 1 and main(epp)["image"] == "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.1.1"
    overrides = {"routerMode": "kv", "epp": {"replicas": 2, "image": "registry.example.com/dynamo-epp:custom"}}
    epp = services(unadmitted({"spec.provider.overrides": overrides}, gateway=True))["Epp"]
    assert epp["replicas"] == 2 and main(epp)["image"] == "registry.example.com/dynamo-epp:custom"
    assert "DYN_ROUTER_MODE" not in json.dumps(epp)


def test_build_aggregated_worker() -> None:
    """upstream: TestBuildAggregatedWorker"""
    worker = services(admitted({"spec.scaling": {"replicas": 2}, "spec.engine.image": "test-image:v1"}, gateway=True))["VllmWorker"]
    assert (worker["replicas"], worker["componentType"]) == (2, "worker")
    assert main(worker)["image"] == "test-image:v1" and main(worker)["command"][0] == "python3"  # no shell


def test_build_aggregated_worker_with_secret() -> None:
    """upstream: TestBuildAggregatedWorkerWithSecret: the token as `envFromSecret`, on the worker and on its frontend
    sidecar (upstream's buildFrontendSidecar), not as a separate HF_TOKEN variable."""
    worker = services(admitted({"spec.secrets": {"huggingFaceToken": "hf-secret"}}, gateway=True))["VllmWorker"]
    assert worker["envFromSecret"] == "hf-secret" and worker["frontendSidecar"]["envFromSecret"] == "hf-secret"
    assert env_var(worker, "HF_TOKEN") is None
    frontend = services(admitted({"spec.secrets": {"huggingFaceToken": "hf-secret"}}))["Frontend"]
    assert frontend["envFromSecret"] == "hf-secret"


def test_build_frontend_sidecar() -> None:
    """upstream: buildFrontendSidecar, as TestBuildAggregatedWorker and the prefill/decode builders call it with the
    gateway on: Dynamo's vLLM runtime image whatever the engine; aggregated `--router-mode direct` (the picker chose
    the pod), disaggregated Dynamo's default routing."""
    aggregated = services(admitted({"spec.engine.type": "sglang"}, gateway=True))["VllmWorker"]["frontendSidecar"]
    assert aggregated == {
        "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.1",
        "args": ["-m", "dynamo.frontend", "--router-mode", "direct"],
    }
    split = services(admitted(disagg({"gpu": {"count": 1}}, {"gpu": {"count": 1}}), gateway=True))
    for name in ("VllmPrefillWorker", "VllmDecodeWorker"):
        assert split[name]["frontendSidecar"]["args"] == ["-m", "dynamo.frontend"]


def test_add_scheduling_config() -> None:
    """upstream: TestAddSchedulingConfig: nodeSelector (a copy) and tolerations with value and tolerationSeconds."""
    inputs = admitted(
        {
            "spec.nodeSelector": {"gpu": "a100"},
            "spec.tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Equal",
                    "value": "true",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        }
    )
    pod = services(inputs)["VllmWorker"]["extraPodSpec"]
    assert inputs.spec.nodeSelector is not None
    inputs.spec.nodeSelector["gpu"] = "changed"
    assert pod["nodeSelector"] == {"gpu": "a100"}
    assert len(pod["tolerations"]) == 2
    assert pod["tolerations"][1]["value"] == "true" and pod["tolerations"][1]["tolerationSeconds"] == 300


@pytest.mark.parametrize(
    ("value", "label"),
    [
        ("simple", "simple"),
        ("with/slashes", "with-slashes"),
        ("-leading", "leading"),
        ("trailing-", "trailing"),
        ("", ""),
        (
            "this-is-a-very-long-label-value-that-exceeds-the-sixty-three-character-limit",
            "this-is-a-very-long-label-value-that-exceeds-the-sixty-three-ch",
        ),
    ],
)
def test_sanitize_label_value(value: str, label: str) -> None:
    """upstream: TestSanitizeLabelValue: the model id as the DGD's airunway.ai/model-id label."""
    assert model_label(value) == label
    if value:
        assert dgd(admitted({"spec.model.id": value}))["metadata"]["labels"]["airunway.ai/model-id"] == label


def test_build_prefill_worker_with_secret() -> None:
    """upstream: TestBuildPrefillWorkerWithSecret: the KV-transfer JSON compact, as upstream writes it."""
    inputs = admitted({**disagg({"gpu": {"count": 1}}, {"gpu": {"count": 1}}), "spec.secrets": {"huggingFaceToken": "hf-secret"}})
    prefill = services(inputs)["VllmPrefillWorker"]
    assert prefill["envFromSecret"] == "hf-secret"
    args = args_of(prefill)
    assert has_arg(args, "--disaggregation-mode", "prefill") and has_arg(args, "--kv-transfer-config", KV_TRANSFER)


def test_build_decode_worker_with_secret() -> None:
    """upstream: TestBuildDecodeWorkerWithSecret"""
    decode_spec = {"replicas": 2, "gpu": {"count": 1, "type": "custom.gpu"}, "memory": "64Gi"}
    inputs = admitted({**disagg({"gpu": {"count": 1}}, decode_spec), "spec.secrets": {"huggingFaceToken": "hf-secret"}})
    decode = services(inputs)["VllmDecodeWorker"]
    assert (decode["envFromSecret"], decode["replicas"]) == ("hf-secret", 2)
    args = args_of(decode)
    assert has_arg(args, "--disaggregation-mode", "decode") and has_arg(args, "--kv-transfer-config", KV_TRANSFER)


def test_build_engine_args_with_custom_args() -> None:
    """upstream: TestBuildEngineArgsWithCustomArgs"""
    args = args_of(services(admitted({"spec.engine.args": {"tensor-parallel-size": "4", "enable-prefix-caching": ""}}))["VllmWorker"])
    assert has_arg(args, "--tensor-parallel-size", "4") and "--enable-prefix-caching" in args


def test_build_engine_args_aggregated_vllm_omits_connector() -> None:
    """upstream: TestBuildEngineArgsAggregatedVLLMOmitsConnector"""
    assert "--connector" not in args_of(services(admitted({}))["VllmWorker"])


def test_build_engine_args_strips_connector_from_vllm_args() -> None:
    """upstream: TestBuildEngineArgsStripsConnectorFromVLLMArgs"""
    assert "--connector" not in args_of(services(admitted({"spec.engine.args": {"connector": "nixl"}}))["VllmWorker"])


def test_build_engine_args_disaggregated_leaves_connector_to_runtime_default() -> None:
    """upstream: TestBuildEngineArgsDisaggregatedLeavesConnectorToRuntimeDefault"""
    found = services(admitted(disagg({"gpu": {"count": 1}}, {"gpu": {"count": 1}})))
    assert all("--connector" not in args_of(found[n]) for n in ("VllmPrefillWorker", "VllmDecodeWorker"))


def test_build_engine_args_deterministic_order() -> None:
    """upstream: TestBuildEngineArgsDeterministicOrder: the same every time, keys in alphabetical order."""
    keys = {"zebra-param": "z", "alpha-param": "a", "middle-param": "m", "beta-param": "b", "enable-some-feature": "", "data-path": "/data"}
    first = args_of(services(admitted({"spec.engine.args": keys}))["VllmWorker"])
    for _ in range(20):
        assert args_of(services(admitted({"spec.engine.args": keys}))["VllmWorker"]) == first
    flags = [a for a in first if a.startswith("--") and a[2:] in keys]
    assert flags == sorted(flags)


def test_build_engine_args_trust_remote_code_sglang() -> None:
    """upstream: TestBuildEngineArgsTrustRemoteCodeSGLang"""
    args = args_of(services(admitted({"spec.engine": {"type": "sglang", "trustRemoteCode": True}}))["VllmWorker"])
    assert "--trust-remote-code" in args


def test_build_engine_args_trtllm_context_length() -> None:
    """upstream: TestBuildEngineArgsTRTLLMContextLength: set at TensorRT-LLM's build time, so not passed (and admission
    says so)."""
    args = args_of(services(admitted({"spec.engine": {"type": "trtllm", "contextLength": 8192}}))["VllmWorker"])
    assert "8192" not in args
    warnings = admit(changed(UPSTREAM_MD, {"spec.engine": {"type": "trtllm", "contextLength": 8192}})).warnings
    assert any("contextLength is ignored for TensorRT-LLM" in w for w in warnings)


def test_build_prefill_worker_with_custom_gpu_type() -> None:
    """upstream: TestBuildPrefillWorkerWithCustomGPUType"""
    found = services(admitted(disagg({"gpu": {"count": 2, "type": "amd.com/gpu"}, "memory": "32Gi"}, {"gpu": {"count": 1}})))
    assert found["VllmPrefillWorker"]["resources"]["limits"] == {"gpu": "2", "memory": "32Gi"}


def test_apply_overrides_escape_hatch() -> None:
    """upstream: TestApplyOverridesEscapeHatch: the free-form keys are deep-merged into the DGD, what the renderer set
    stays. Upstream also merges the typed `routerMode` raw onto the DGD's root; Jetway consumes it."""
    obj = dgd(admitted({"spec.provider.overrides": {"routerMode": "kv", "spec": {"customField": "customValue"}}}))
    assert obj["spec"]["customField"] == "customValue" and obj["spec"]["backendFramework"] == "vllm"
    assert "routerMode" not in obj


def test_transform_aggregated_no_gpu() -> None:
    """upstream: TestTransformAggregatedNoGPU: memory and CPU are limits (requests hold GPUs only). Without a GPU the
    renderer refuses, with the words of upstream's compatibility check, which runs before its transformer."""
    worker = services(admitted({"spec.resources": {"gpu": {"count": 1}, "memory": "16Gi", "cpu": "4"}}))["VllmWorker"]
    assert worker["resources"] == {"limits": {"gpu": "1", "memory": "16Gi", "cpu": "4"}, "requests": {"gpu": "1"}}
    refused = render_refusal(admitted({"spec.resources": {"memory": "16Gi", "cpu": "4"}}))
    assert refused == "Dynamo requires GPU (set resources.gpu.count > 0)"


def test_transform_aggregated_nil_resources() -> None:
    """upstream: TestTransformAggregatedNilResources: admission defaults one GPU; a spec that skipped admission has
    none and is refused."""
    assert services(admitted({"spec.resources": DELETE}))["VllmWorker"]["resources"]["limits"] == {"gpu": "1"}
    bare = ModelDeployment.model_validate(changed(UPSTREAM_MD, {"spec.resources": DELETE}))
    assert render_refusal(upstream.inputs_of(bare, None)) == "Dynamo requires GPU (set resources.gpu.count > 0)"


def test_transform_aggregated_gpu_count0() -> None:
    """upstream: TestTransformAggregatedGPUCount0"""
    assert render_refusal(admitted({"spec.resources": {"gpu": {"count": 0}}})) == "Dynamo requires GPU (set resources.gpu.count > 0)"
    failed = selection({"spec.resources": {"gpu": {"count": 0}}})
    assert isinstance(failed, SelectionFailed)
    assert failed.message == "Validation failed: vllm engine on provider dynamo requires GPU (set resources.gpu.count > 0)"


def test_transform_sglang_engine() -> None:
    """upstream: TestTransformSGLangEngine: the worker is `VllmWorker` whatever the engine."""
    obj = dgd(admitted({"spec.engine.type": "sglang"}))
    assert obj["spec"]["backendFramework"] == "sglang"
    assert main(obj["spec"]["services"]["VllmWorker"])["command"][2] == "dynamo.sglang"


def test_transform_worker_key_is_vllmworker_for_every_engine() -> None:
    """upstream: TestTransformSGLangEngine, TestTransformTRTLLMEngine: the worker keys do not follow the engine."""
    assert set(services(admitted({"spec.engine.type": "trtllm"}))) == {"Frontend", "VllmWorker"}
    split = services(admitted({**disagg({"gpu": {"count": 1}}, {"gpu": {"count": 1}}), "spec.engine.type": "sglang"}))
    assert set(split) == {"Frontend", "VllmPrefillWorker", "VllmDecodeWorker"}


def test_transform_trtllm_engine() -> None:
    """upstream: TestTransformTRTLLMEngine"""
    obj = dgd(admitted({"spec.engine.type": "trtllm"}))
    assert obj["spec"]["backendFramework"] == "trtllm"
    worker = obj["spec"]["services"]["VllmWorker"]
    assert main(worker)["command"][2] == "dynamo.trtllm" and args_of(worker)[:2] == ["--model-path", MODEL]


def test_transform_with_custom_scaling_replicas() -> None:
    """upstream: TestTransformWithCustomScalingReplicas"""
    assert services(admitted({"spec.scaling": {"replicas": 5}}))["VllmWorker"]["replicas"] == 5


def test_transform_disaggregated_gpu_requests() -> None:
    """upstream: TestTransformDisaggregatedGPURequests"""
    found = services(admitted(disagg({"gpu": {"count": 4}}, {"gpu": {"count": 2}})))
    assert found["VllmPrefillWorker"]["resources"] == {"limits": {"gpu": "4"}, "requests": {"gpu": "4"}}
    assert found["VllmDecodeWorker"]["resources"] == {"limits": {"gpu": "2"}, "requests": {"gpu": "2"}}


def test_transform_override_can_overwrite_services() -> None:
    """upstream: TestTransformOverrideCanOverwriteServices: the deep merge replaces a worker's replicas and keeps the
    rest. Admission refuses `replicas` in overrides, as upstream's webhook does, so only an unadmitted spec gets there."""
    overrides = {"spec": {"services": {"VllmWorker": {"replicas": 3}}}}
    assert any("replicas" in p for p in refusals({"spec.provider.overrides": overrides}))
    worker = services(unadmitted({"spec.provider.overrides": overrides}))["VllmWorker"]
    assert (worker["replicas"], worker["componentType"]) == (3, "worker")


def test_transform_with_custom_image() -> None:
    """upstream: TestTransformWithCustomImage"""
    worker = services(admitted({"spec.image": "my-registry.io/custom-vllm:v1"}))["VllmWorker"]
    assert main(worker)["image"] == "my-registry.io/custom-vllm:v1"


def test_transform_aggregated_vllm_workers_do_not_inject_nixl_side_channel_host_by_default() -> None:
    """upstream: TestTransformAggregatedVLLMWorkersDoNotInjectNixlSideChannelHostByDefault"""
    assert env_var(services(admitted({}))["VllmWorker"], "VLLM_NIXL_SIDE_CHANNEL_HOST") is None


def test_transform_disaggregated_vllm_workers_inject_nixl_side_channel_host() -> None:
    """upstream: TestTransformDisaggregatedVLLMWorkersInjectNixlSideChannelHost"""
    found = services(admitted(disagg({"gpu": {"count": 1}}, {"gpu": {"count": 1}})))
    for name in ("VllmPrefillWorker", "VllmDecodeWorker"):
        assert env_var(found[name], "VLLM_NIXL_SIDE_CHANNEL_HOST") == {
            "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        }


def test_transform_non_vllm_workers_do_not_inject_nixl_side_channel_host() -> None:
    """upstream: TestTransformNonVLLMWorkersDoNotInjectNixlSideChannelHost"""
    assert env_var(services(admitted({"spec.engine.type": "sglang"}))["VllmWorker"], "VLLM_NIXL_SIDE_CHANNEL_HOST") is None
    split = services(admitted({**disagg({"gpu": {"count": 1}}, {"gpu": {"count": 1}}), "spec.engine.type": "sglang"}))
    assert env_var(split["VllmPrefillWorker"], "VLLM_NIXL_SIDE_CHANNEL_HOST") is None
    assert not [a for a in args_of(split["VllmPrefillWorker"]) if a == "--kv-transfer-config"]


def test_build_resource_limits_with_all_fields() -> None:
    """upstream: TestBuildResourceLimitsWithAllFields: `resources.cpu` is a limit; requests hold GPUs only."""
    worker = services(admitted({"spec.resources": {"gpu": {"count": 2}, "memory": "64Gi", "cpu": "16"}}))["VllmWorker"]
    assert worker["resources"] == {"limits": {"gpu": "2", "memory": "64Gi", "cpu": "16"}, "requests": {"gpu": "2"}}


# --- storage ---

MODEL_CACHE = {"name": "model-data", "claimName": "model-pvc", "mountPath": "/model-cache", "purpose": "modelCache"}
COMPILE_CACHE = {"name": "compile-data", "claimName": "compile-pvc", "mountPath": "/compilation-cache", "purpose": "compilationCache"}


def test_transform_with_model_cache_storage() -> None:
    """upstream: TestTransformWithModelCacheStorage"""
    obj = dgd(admitted({"spec.model.storage": {"volumes": [MODEL_CACHE]}}))
    assert obj["spec"]["pvcs"] == [{"name": "model-pvc", "create": False}]
    worker = obj["spec"]["services"]["VllmWorker"]
    assert worker["volumeMounts"] == [{"name": "model-pvc", "mountPoint": "/model-cache"}]  # no readOnly
    assert env_var(worker, "HF_HOME") == {"name": "HF_HOME", "value": "/model-cache"}


def test_transform_with_compilation_cache_storage() -> None:
    """upstream: TestTransformWithCompilationCacheStorage: by the volume's purpose, wherever it is mounted."""
    worker = services(admitted({"spec.model.storage": {"volumes": [COMPILE_CACHE]}}))["VllmWorker"]
    assert worker["volumeMounts"] == [{"name": "compile-pvc", "mountPoint": "/compilation-cache", "useAsCompilationCache": True}]
    elsewhere = {**COMPILE_CACHE, "mountPath": "/cache/compiled"}
    (mount,) = services(admitted({"spec.model.storage": {"volumes": [elsewhere]}}))["VllmWorker"]["volumeMounts"]
    assert mount["useAsCompilationCache"] is True


def test_transform_with_both_caches() -> None:
    """upstream: TestTransformWithBothCaches"""
    obj = dgd(admitted({"spec.model.storage": {"volumes": [MODEL_CACHE, COMPILE_CACHE]}}))
    assert len(obj["spec"]["pvcs"]) == 2
    assert obj["spec"]["services"]["VllmWorker"]["volumeMounts"] == [
        {"name": "model-pvc", "mountPoint": "/model-cache"},
        {"name": "compile-pvc", "mountPoint": "/compilation-cache", "useAsCompilationCache": True},
    ]


def test_transform_no_storage_no_pvcs() -> None:
    """upstream: TestTransformNoStorageNoPVCs"""
    obj = dgd(admitted({}))
    assert "pvcs" not in obj["spec"] and "volumeMounts" not in obj["spec"]["services"]["VllmWorker"]


def test_transform_hf_home_not_injected_when_user_sets_it() -> None:
    """upstream: TestTransformHFHomeNotInjectedWhenUserSetsIt: the model cache does not replace the user's HF_HOME.
    Jetway renders spec.env, so the user's own value is there (upstream renders no spec.env on Dynamo)."""
    worker = services(
        admitted({"spec.model.storage": {"volumes": [MODEL_CACHE]}, "spec.env": [{"name": "HF_HOME", "value": "/custom/hf/home"}]})
    )["VllmWorker"]
    assert [v for v in main(worker)["env"] if v["name"] == "HF_HOME"] == [{"name": "HF_HOME", "value": "/custom/hf/home"}]


def test_transform_frontend_has_no_volume_mounts() -> None:
    """upstream: TestTransformFrontendHasNoVolumeMounts (the router loads no model)"""
    assert "volumeMounts" not in services(admitted({"spec.model.storage": {"volumes": [MODEL_CACHE]}}))["Frontend"]


def test_transform_disaggregated_both_workers_get_volume_mounts() -> None:
    """upstream: TestTransformDisaggregatedBothWorkersGetVolumeMounts"""
    found = services(admitted({**disagg({"gpu": {"count": 2}}, {"gpu": {"count": 1}}), "spec.model.storage": {"volumes": [MODEL_CACHE]}}))
    for name in ("VllmPrefillWorker", "VllmDecodeWorker"):
        assert found[name]["volumeMounts"] and env_var(found[name], "HF_HOME") == {"name": "HF_HOME", "value": "/model-cache"}
    assert "volumeMounts" not in found["Frontend"]


def test_transform_with_read_only_volume() -> None:
    """upstream: TestTransformWithReadOnlyVolume. Upstream writes `readOnly: true`, a field Dynamo's VolumeMount does
    not have (refused under strict field validation, pruned otherwise); Jetway leaves it out."""
    volume = {**MODEL_CACHE, "readOnly": True}
    assert services(admitted({"spec.model.storage": {"volumes": [volume]}}))["VllmWorker"]["volumeMounts"] == [
        {"name": "model-pvc", "mountPoint": "/model-cache"}
    ]


# --- the mocker test backend ---


def mocker(changes: dict[str, Any] | None = None, *, gateway: bool = False) -> dict[str, Any]:
    return services(admitted(changes or {}, gateway=gateway, base=MOCKER_MD))


def test_is_mocker_mode() -> None:
    """upstream: TestIsMockerMode: only the annotation with the value `mocker`."""
    assert main(services(admitted({}))["VllmWorker"])["command"] == ["python3", "-m", "dynamo.vllm"]
    other = services(admitted({"metadata.annotations": {"airunway.ai/dynamo-test-backend": "something-else"}}))
    assert main(other["VllmWorker"])["command"] == ["python3", "-m", "dynamo.vllm"]
    assert main(mocker()["VllmWorker"])["command"] == ["python3", "-m", "dynamo.mocker"]


def test_validate_compatibility_mocker() -> None:
    """upstream: TestValidateCompatibilityMocker: the GPU requirement waived, vLLM only, both disaggregated blocks
    still needed; without the annotation a CPU-only spec is still refused."""
    mocker()  # aggregated, CPU-only
    mocker(disagg({"replicas": 1}, {"replicas": 1}))  # disaggregated, CPU-only, with scaling
    missing = unadmitted(DISAGG, base=MOCKER_MD)
    assert render_refusal(missing) == "Dynamo mocker disaggregated mode requires spec.scaling.prefill and spec.scaling.decode"
    assert render_refusal(unadmitted({"spec.engine.type": "sglang"}, base=MOCKER_MD)) == "Dynamo mocker mode only supports the vllm engine"
    assert render_refusal(admitted({"spec.resources": {}})) == "Dynamo requires GPU (set resources.gpu.count > 0)"


def test_transform_mocker_aggregated() -> None:
    """upstream: TestTransformMockerAggregated: a standalone Frontend (even where the Inference Extension is served),
    the planner image, python3 -m dynamo.mocker with its CI-sized flags, small CPU and memory requested and limited
    alike, no GPU."""
    found = mocker(gateway=True)
    assert set(found) == {"Frontend", "VllmWorker"}
    assert main(found["Frontend"])["image"] == PLANNER
    assert found["Frontend"]["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
    worker = found["VllmWorker"]
    assert main(worker)["image"] == PLANNER and main(worker)["command"] == ["python3", "-m", "dynamo.mocker"]
    assert args_of(worker) == [
        "--model-path",
        "Qwen/Qwen3-0.6B",
        "--model-name",
        "Qwen/Qwen3-0.6B",
        "--speedup-ratio",
        "1000.0",
        "--num-gpu-blocks-override",
        "4096",
        "--block-size",
        "16",
        "--max-num-seqs",
        "64",
    ]
    assert worker["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "100m", "memory": "256Mi"}}
    assert "frontendSidecar" not in worker


def test_transform_mocker_uses_served_name() -> None:
    """upstream: TestTransformMockerUsesServedName"""
    assert has_arg(args_of(mocker({"spec.model.servedName": "my-model"})["VllmWorker"]), "--model-name", "my-model")


def test_transform_mocker_image_wins_over_override() -> None:
    """upstream: TestTransformMockerImageWinsOverOverride: dynamo.mocker exists only in the planner image."""
    worker = mocker({"spec.image": "example.com/some/custom-image:latest"})["VllmWorker"]
    assert main(worker)["image"] == PLANNER


def test_transform_mocker_disaggregated() -> None:
    """upstream: TestTransformMockerDisaggregated: no endpoint picker; each role keeps --disaggregation-mode but not
    vLLM's NIXL --kv-transfer-config; no GPU."""
    found = mocker(disagg({"replicas": 1}, {"replicas": 1}), gateway=True)
    assert "Epp" not in found and "Frontend" in found
    for name, role in (("VllmPrefillWorker", "prefill"), ("VllmDecodeWorker", "decode")):
        worker = found[name]
        assert main(worker)["command"] == ["python3", "-m", "dynamo.mocker"]
        assert has_arg(args_of(worker), "--disaggregation-mode", role) and "--kv-transfer-config" not in args_of(worker)
        assert "gpu" not in worker["resources"]["requests"]
        assert worker["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}


def test_validate_spec_mocker_cases() -> None:
    """upstream: TestValidateSpec (controller/internal/controller/validate_spec_test.go) and the webhook's mocker cases
    (modeldeployment_webhook_test.go, "Should accept CPU-only vllm on dynamo when mocker annotation is set" and the
    four after it): what the selector, which runs admission's rules and the provider compatibility check, decides."""
    cpu = {"spec.model.id": "Qwen/Qwen3-0.6B", "spec.resources": {"gpu": {"count": 0}}}
    split = {**disagg({"replicas": 1}, {"replicas": 1}), "spec.model.id": "Qwen/Qwen3-0.6B"}
    chosen = selection({**cpu, "metadata.annotations": MOCKER})
    assert isinstance(chosen, ProviderSelected) and chosen.provider == "dynamo"
    assert isinstance(selection({**split, "metadata.annotations": MOCKER}), ProviderSelected)
    other = selection({**cpu, "metadata.annotations": {"airunway.ai/dynamo-test-backend": "real"}})
    assert isinstance(other, SelectionFailed) and "requires GPU" in other.message
    unannotated = selection(split)
    assert isinstance(unannotated, SelectionFailed) and "scaling.prefill.gpu.count > 0" in unannotated.message
    assert refusals({**cpu, "metadata.annotations": MOCKER, "spec.engine.type": "sglang"}) == [
        "spec.engine.type: the dynamo mocker test backend only supports the vllm engine"
    ]


def test_validate_spec_mocker_needs_the_dynamo_provider_named() -> None:
    """upstream: isDynamoMockerMode (controller and webhook): the GPU rules are waived only when `spec.provider.name`
    is dynamo; the annotation alone on an auto-selected deployment waives nothing."""
    split = {**disagg({"replicas": 1}, {"replicas": 1}), "metadata.annotations": MOCKER, "spec.provider": DELETE}
    assert any("scaling.prefill.gpu.count > 0" in p for p in refusals(split))


def _e2e(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """upstream's injectMockerAnnotation: the annotation set, every GPU field removed; then what `jetway render` (and
    the services) decide for it: selection, storage plan, rendering."""
    doc = copy.deepcopy(fixture)
    doc["metadata"]["annotations"] = dict(MOCKER)
    doc["spec"].get("resources", {}).pop("gpu", None)
    for role in ("prefill", "decode"):
        doc["spec"].get("scaling", {}).get(role, {}).pop("gpu", None)
    verdict = admit(doc)
    assert verdict.ok and isinstance(verdict.obj, ModelDeployment), verdict.problems
    objects, account = objects_for(verdict.obj, UID, builtins(), gateway_available=True)
    assert account.startswith("provider dynamo")
    return objects


E2E_AGGREGATED = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "qwen3-0-6b", "namespace": "default"},
    "spec": {
        "model": {"id": "Qwen/Qwen3-0.6B", "source": "huggingface"},
        "provider": {"name": "dynamo"},
        "engine": {"type": "vllm", "contextLength": 4096, "trustRemoteCode": False},
        "resources": {"gpu": {"count": 1, "type": "nvidia.com/gpu"}},
        "scaling": {"replicas": 1},
    },
}
E2E_DISAGGREGATED = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "qwen3-0-6b-disagg", "namespace": "default"},
    "spec": {
        "model": {"id": "Qwen/Qwen3-0.6B", "source": "huggingface"},
        "provider": {"name": "dynamo"},
        "engine": {"type": "vllm", "contextLength": 4096, "trustRemoteCode": False},
        "serving": {"mode": "disaggregated"},
        "scaling": {"prefill": {"replicas": 1, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 1}}},
    },
}


@pytest.mark.parametrize(
    ("fixture", "workers"),
    [(E2E_AGGREGATED, ["VllmWorker"]), (E2E_DISAGGREGATED, ["VllmPrefillWorker", "VllmDecodeWorker"])],
    ids=["TestDynamoMockerE2E", "TestDynamoMockerDisaggE2E"],
)
def test_dynamo_mocker_e2e(fixture: dict[str, Any], workers: list[str]) -> None:
    """upstream: TestDynamoMockerE2E, TestDynamoMockerDisaggE2E (their DGDCreated step): a CPU-only deployment is
    selected for Dynamo and rendered into mocker workers behind a standalone Frontend, `<name>-frontend` on 8000."""
    (obj,) = _e2e(fixture)
    name = fixture["metadata"]["name"]
    assert (obj["kind"], obj["metadata"]["name"]) == ("DynamoGraphDeployment", name)
    found = obj["spec"]["services"]
    assert set(found) == {"Frontend", *workers}
    for worker in workers:
        assert "dynamo-planner" in main(found[worker])["image"] and "dynamo.mocker" in main(found[worker])["command"]
        assert "gpu" not in found[worker]["resources"]["requests"]
        if len(workers) > 1:
            assert "--disaggregation-mode" in args_of(found[worker]) and "--kv-transfer-config" not in args_of(found[worker])
    key = Key("ModelDeployment", "default", name)
    assert endpoint("dynamo", Inputs(key, UID, ModelDeployment.model_validate(fixture), "vllm")) == {
        "service": f"{name}-frontend",
        "port": 8000,
    }
