"""Direct vLLM, ported from AI Runway's own tests (ai-runway/airunway b0d3fb7, providers/vllm/transformer_test.go
and config_test.go): the same inputs, the same facts a user sees in the rendered Deployment and Service, run
against Jetway's renderer and, where upstream's case is an admission one, against `jetway validate`'s rules.

Upstream builds its ModelDeployment in Go, so fields it leaves out are zero values; here the manifest goes
through admission like a user's does (CRD defaults applied). Where a case needs what admission refuses
(upstream's "reconcile-time backstop" cases), `unadmitted` parses and defaults the manifest without checking it.
The image cases (default, resolved, custom, legacy image) belong to the image-resolution work and are not here.
Deliberate differences are listed in docs/upstream-differences.md under "Direct vLLM".
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.workload.providers import VERSION, builtin_configs
from services.workload.render import render
from services.workload.render.common import Inputs, RenderError, resources
from tests.contracts.cases import DELETE, MD, changed
from tests.services import upstream
from tests.services.upstream import UID, has_arg

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# upstream newTestMD: test-model in default, a Hugging Face model, engine vllm, one GPU
UPSTREAM_MD = changed(MD, {"metadata.name": "test-model", "spec.model": {"id": MODEL, "source": "huggingface"}})
NETWORKING = (
    "conflicts with Direct vLLM generated networking; Direct vLLM currently requires host 0.0.0.0 and port 8000 "
    "to keep the container, Service, and probes aligned"
)


def admitted(changes: dict[str, Any], engine: str = "vllm", base: dict[str, Any] = UPSTREAM_MD) -> Inputs:
    return upstream.admitted(base, changes, engine=engine)


def unadmitted(changes: dict[str, Any], engine: str = "vllm", base: dict[str, Any] = UPSTREAM_MD) -> Inputs:
    return upstream.unadmitted(base, changes, engine=engine)


def refusals(changes: dict[str, Any], base: dict[str, Any] = UPSTREAM_MD) -> list[str]:
    return upstream.refusals(base, changes)


def container(obj: dict[str, Any]) -> dict[str, Any]:
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def args_of(obj: dict[str, Any]) -> list[str]:
    return list(container(obj)["args"])


def env_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(container(obj).get("env", []))


def vllm(changes: dict[str, Any]) -> list[dict[str, Any]]:
    return render("vllm", admitted(changes))


# --- the Deployment and the Service ---


def test_transform_aggregated_basic() -> None:
    """upstream: TestTransformAggregatedBasic"""
    deployment, service = vllm({})
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert (deployment["metadata"]["name"], deployment["metadata"]["namespace"]) == ("test-model", "default")
    assert (service["kind"], service["metadata"]["name"]) == ("Service", "test-model")


def test_transform_aggregated_owner_reference() -> None:
    """upstream: TestTransformAggregatedOwnerReference"""
    (owner,) = vllm({})[0]["metadata"]["ownerReferences"]
    assert (owner["name"], owner["uid"], owner["controller"]) == ("test-model", UID, True)


def test_transform_aggregated_labels() -> None:
    """upstream: TestTransformAggregatedLabels"""
    labels = vllm({})[0]["metadata"]["labels"]
    assert labels["airunway.ai/managed-by"] == "airunway"
    assert labels["airunway.ai/deployment"] == "test-model"
    assert labels["airunway.ai/engine-type"] == "vllm"


def test_transform_aggregated_replicas() -> None:
    """upstream: TestTransformAggregatedReplicas"""
    assert vllm({"spec.scaling": {"replicas": 3}})[0]["spec"]["replicas"] == 3


def test_transform_aggregated_default_replicas() -> None:
    """upstream: TestTransformAggregatedDefaultReplicas: no scaling at all is one replica."""
    assert vllm({})[0]["spec"]["replicas"] == 1
    assert render("vllm", unadmitted({}))[0]["spec"]["replicas"] == 1


def test_transform_aggregated_service_port() -> None:
    """upstream: TestTransformAggregatedServicePort"""
    ports = vllm({})[1]["spec"]["ports"]
    assert ports[0]["port"] == 8000


def test_transform_aggregated_explicit_host_port_args() -> None:
    """upstream: TestTransformAggregatedExplicitHostPortArgs"""
    args = args_of(vllm({})[0])
    assert has_arg(args, "--host", "0.0.0.0") and has_arg(args, "--port", "8000")


def test_transform_aggregated_deployment_probes() -> None:
    """upstream: TestTransformAggregatedDeploymentProbes: /health on 8000; (delay, period, failures)."""
    main = container(vllm({})[0])
    for name, (delay, period, failures) in {
        "startupProbe": (15, 10, 60),
        "livenessProbe": (15, 10, 3),
        "readinessProbe": (15, 5, 3),
    }.items():
        probe = main[name]
        assert (probe["initialDelaySeconds"], probe["periodSeconds"], probe["failureThreshold"]) == (delay, period, failures), name
        assert probe["httpGet"] == {"path": "/health", "port": 8000}, name


def test_transform_unsupported_engine() -> None:
    """upstream: TestTransformUnsupportedEngine"""
    with pytest.raises(RenderError, match="vLLM provider only supports vllm engine, got sglang"):
        render("vllm", admitted({"spec.engine.type": "sglang"}, "sglang"))


# --- vLLM's flags ---


def test_transform_aggregated_vllm_args() -> None:
    """upstream: TestTransformAggregatedVLLMArgs"""
    args = args_of(vllm({"spec.model.servedName": "my-alias", "spec.engine.contextLength": 4096, "spec.engine.trustRemoteCode": True})[0])
    assert has_arg(args, "--model", MODEL)
    assert has_arg(args, "--served-model-name", "my-alias")
    assert has_arg(args, "--max-model-len", "4096")
    assert "--trust-remote-code" in args


def test_transform_aggregated_tensor_parallelism() -> None:
    """upstream: TestTransformAggregatedTensorParallelism"""
    assert has_arg(args_of(vllm({"spec.resources": {"gpu": {"count": 4}}})[0]), "--tensor-parallel-size", "4")


def test_transform_aggregated_no_tensor_parallel_for_single_gpu() -> None:
    """upstream: TestTransformAggregatedNoTensorParallelForSingleGPU"""
    assert "--tensor-parallel-size" not in args_of(vllm({})[0])


def test_transform_aggregated_custom_engine_args() -> None:
    """upstream: TestTransformAggregatedCustomEngineArgs: an empty value is a bare flag."""
    args = args_of(vllm({"spec.engine.args": {"gpu-memory-utilization": "0.9", "disable-log-requests": ""}})[0])
    assert has_arg(args, "--gpu-memory-utilization", "0.9")
    assert "--disable-log-requests" in args


def test_transform_aggregated_engine_extra_args_appended_after_sorted_engine_args() -> None:
    """upstream: TestTransformAggregatedEngineExtraArgsAppendedAfterSortedEngineArgs"""
    args = args_of(
        vllm(
            {"spec.engine.args": {"zeta": "last", "alpha": "first"}, "spec.engine.extraArgs": ["--raw-flag", "raw-value", "--second-raw"]}
        )[0]
    )
    assert args[-7:] == ["--alpha", "first", "--zeta", "last", "--raw-flag", "raw-value", "--second-raw"]


def test_transform_aggregated_invalid_engine_arg_key() -> None:
    """upstream: TestTransformAggregatedInvalidEngineArgKey: refused at admission, and by the renderer as a backstop."""
    message = 'invalid engine arg key "-bad-key": must contain only alphanumeric characters, hyphens, and underscores'
    assert refusals({"spec.engine.args": {"-bad-key": "value"}}) == [f"spec.engine.args.-bad-key: {message}"]
    with pytest.raises(RenderError) as refused:
        render("vllm", unadmitted({"spec.engine.args": {"-bad-key": "value"}}))
    assert str(refused.value) == message


def test_transform_aggregated_rejects_reserved_engine_arg_port() -> None:
    """upstream: TestTransformAggregatedRejectsReservedEngineArgPort"""
    with pytest.raises(RenderError) as refused:
        vllm({"spec.engine.args": {"port": "9000"}})
    assert str(refused.value) == f'engine arg "port" {NETWORKING}'


def test_transform_aggregated_rejects_reserved_engine_extra_arg_host() -> None:
    """upstream: TestTransformAggregatedRejectsReservedEngineExtraArgHost: the raw token is named as written."""
    with pytest.raises(RenderError) as refused:
        vllm({"spec.engine.extraArgs": ["--host=127.0.0.1"]})
    assert str(refused.value) == f'engine extraArg "--host=127.0.0.1" {NETWORKING}'


@pytest.mark.parametrize("engine_args", [{"--port": "9000"}, {"--host": "127.0.0.1"}, {"--port=9000": ""}, {"port": "9000"}])
def test_validate_reserved_vllm_server_args_rejects_dash_and_equal_forms(engine_args: dict[str, str]) -> None:
    """upstream: TestValidateReservedVLLMServerArgsRejectsDashAndEqualForms: a flag written as an args key cannot slip
    a host or port past the guard. Admission refuses each (the dashed keys as invalid keys); so does the renderer."""
    assert refusals({"spec.provider": {"name": "vllm"}, "spec.engine.args": engine_args})
    with pytest.raises(RenderError) as refused:
        render("vllm", unadmitted({"spec.engine.args": engine_args}))
    assert str(refused.value) == f'engine arg "{next(iter(engine_args))}" {NETWORKING}'


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"spec.engine.args": {"port": "9000"}}, "spec.engine.args.port", f'engine arg "port" {NETWORKING}'),
        ({"spec.engine.extraArgs": ["--host=127.0.0.1"]}, "spec.engine.extraArgs[0]", f'engine extraArg "--host=127.0.0.1" {NETWORKING}'),
        ({"spec.engine.extraArgs": ["--port", "9000"]}, "spec.engine.extraArgs[0]", f'engine extraArg "--port" {NETWORKING}'),
    ],
)
def test_reserved_host_and_port_are_one_message_in_admission_and_render(changes: dict[str, Any], path: str, message: str) -> None:
    """Admission (spec.provider.name vllm) and the renderer refuse a reserved host or port in the same words,
    upstream's transformer's; admission adds the field path."""
    assert refusals({"spec.provider": {"name": "vllm"}, **changes}) == [f"{path}: {message}"]
    with pytest.raises(RenderError) as refused:
        render("vllm", unadmitted(changes))
    assert str(refused.value) == message


def test_build_vllm_args_tensor_parallel_dedup() -> None:
    """upstream: TestBuildVLLMArgsTensorParallelDedup: the user's value wins, once."""
    args = args_of(vllm({"spec.resources": {"gpu": {"count": 2}}, "spec.engine.args": {"tensor-parallel-size": "4"}})[0])
    assert args.count("--tensor-parallel-size") == 1 and has_arg(args, "--tensor-parallel-size", "4")


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(["--tensor-parallel-size=4"], id="inline value form"),
        pytest.param(["--tensor-parallel-size", "4"], id="two-token form"),
    ],
)
def test_build_vllm_args_tensor_parallel_dedup_via_extra_args(extra: list[str]) -> None:
    """upstream: TestBuildVLLMArgsTensorParallelDedupViaExtraArgs/{inline value form,two-token form}"""
    args = args_of(vllm({"spec.resources": {"gpu": {"count": 2}}, "spec.engine.extraArgs": extra})[0])
    assert sum(a == "--tensor-parallel-size" or a.startswith("--tensor-parallel-size=") for a in args) == 1


@pytest.mark.parametrize(
    "token", [pytest.param("--tensor-parallel-size=2", id="inline value form"), pytest.param("--tensor-parallel-size", id="two-token form")]
)
def test_build_vllm_args_rejects_args_extra_args_conflict(token: str) -> None:
    """upstream: TestBuildVLLMArgsRejectsArgsExtraArgsConflict/{inline value form,two-token form}: refused at admission
    (upstream's webhook runs the same check) and by the renderer, naming the flag and both fields."""
    changes = {"spec.engine.args": {"tensor-parallel-size": "4"}, "spec.engine.extraArgs": [token]}
    message = (
        f'launch flag "tensor-parallel-size" is set in both spec.engine.args and spec.engine.extraArgs ("{token}"); '
        "set it in exactly one place so the engine does not receive conflicting values"
    )
    assert refusals(changes) == [f"spec.engine.extraArgs[0]: {message}"]
    with pytest.raises(RenderError) as refused:
        render("vllm", unadmitted(changes))
    assert str(refused.value) == message


def test_build_vllm_args_allows_extra_args_only_flag() -> None:
    """upstream: TestBuildVLLMArgsAllowsExtraArgsOnlyFlag"""
    assert "--tensor-parallel-size=2" in args_of(vllm({"spec.engine.extraArgs": ["--tensor-parallel-size=2"]})[0])


def test_build_vllm_args_derived_flag_dedup() -> None:
    """upstream: TestBuildVLLMArgsDerivedFlagDedup"""
    args = args_of(
        vllm(
            {
                "spec.engine.contextLength": 4096,
                "spec.model.servedName": "alias",
                "spec.engine.args": {"model": "override/model", "max-model-len": "8192", "served-model-name": "override-alias"},
            }
        )[0]
    )
    assert [args.count(f) for f in ("--model", "--max-model-len", "--served-model-name")] == [1, 1, 1]
    assert has_arg(args, "--model", "override/model")


def test_build_vllm_args_enforce_eager_and_prefix_caching() -> None:
    """upstream: TestBuildVLLMArgsEnforceEagerAndPrefixCaching"""
    args = args_of(vllm({"spec.engine.enforceEager": True, "spec.engine.enablePrefixCaching": True})[0])
    assert "--enforce-eager" in args and "--enable-prefix-caching" in args


def test_build_vllm_args_omits_enforce_eager_when_disabled() -> None:
    """upstream: TestBuildVLLMArgsOmitsEnforceEagerWhenDisabled. Jetway says `--no-enable-prefix-caching` where upstream
    says nothing (vLLM's own default, prefix caching on, then applies): a difference on purpose."""
    args = args_of(vllm({"spec.engine.enforceEager": False, "spec.engine.enablePrefixCaching": False})[0])
    assert "--enforce-eager" not in args and "--enable-prefix-caching" not in args
    assert "--no-enable-prefix-caching" in args


# --- resources, memory and volumes ---


def test_transform_aggregated_gpu_resources() -> None:
    """upstream: TestTransformAggregatedGPUResources"""
    limits = container(vllm({"spec.resources": {"gpu": {"count": 2}, "memory": "32Gi"}})[0])["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["memory"]) == ("2", "32Gi")


def test_build_resource_limits() -> None:
    """upstream: TestBuildResourceLimits: nothing for nothing; GPUs and memory are limits."""
    assert resources(0, "nvidia.com/gpu", None, None) == {}
    assert resources(2, "nvidia.com/gpu", None, None)["limits"]["nvidia.com/gpu"] == "2"
    assert resources(0, "nvidia.com/gpu", "16Gi", None)["limits"]["memory"] == "16Gi"


SHM_VOLUME = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "20Gi"}}
SHM_MOUNT = {"name": "shm", "mountPath": "/dev/shm"}


def test_transform_aggregated_shared_memory_for_tensor_parallelism() -> None:
    """upstream: TestTransformAggregatedSharedMemoryForTensorParallelism"""
    deployment = vllm({"spec.resources": {"gpu": {"count": 4}}})[0]
    assert container(deployment)["volumeMounts"] == [SHM_MOUNT]
    assert deployment["spec"]["template"]["spec"]["volumes"] == [SHM_VOLUME]


def test_transform_aggregated_no_shared_memory_for_single_gpu() -> None:
    """upstream: TestTransformAggregatedNoSharedMemoryForSingleGPU"""
    deployment = vllm({})[0]
    assert "volumeMounts" not in container(deployment)
    assert "volumes" not in deployment["spec"]["template"]["spec"]


def test_transform_mounts_model_storage_volumes() -> None:
    """upstream: TestTransformMountsModelStorageVolumes"""
    volume = {"name": "model-cache", "claimName": "shared-model-cache", "mountPath": "/model-cache", "readOnly": True}
    deployment = vllm({"spec.model.storage.volumes": [volume]})[0]
    assert container(deployment)["volumeMounts"] == [{"name": "model-cache", "mountPath": "/model-cache", "readOnly": True}]
    (pod_volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    assert pod_volume["name"] == "model-cache"
    assert pod_volume["persistentVolumeClaim"]["claimName"] == "shared-model-cache"


# --- environment ---

HF_FROM_SECRET = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "my-hf-secret", "key": "HF_TOKEN"}}}


def test_transform_aggregated_hf_token_secret() -> None:
    """upstream: TestTransformAggregatedHFTokenSecret"""
    assert HF_FROM_SECRET in env_of(vllm({"spec.secrets": {"huggingFaceToken": "my-hf-secret"}})[0])


def test_transform_hf_token_secret_dedupes_user_env() -> None:
    """upstream: TestTransformHFTokenSecretDedupesUserEnv: one HF_TOKEN, from the Secret; the rest kept."""
    variables = env_of(
        vllm(
            {
                "spec.secrets": {"huggingFaceToken": "my-hf-secret"},
                "spec.env": [{"name": "HF_TOKEN", "value": "plaintext-should-be-dropped"}, {"name": "VLLM_USE_V1", "value": "1"}],
            }
        )[0]
    )
    assert [v for v in variables if v["name"] == "HF_TOKEN"] == [HF_FROM_SECRET]
    assert {"name": "VLLM_USE_V1", "value": "1"} in variables


def test_transform_aggregated_env_vars() -> None:
    """upstream: TestTransformAggregatedEnvVars: in order, a Secret reference kept as one."""
    secret = {"secretKeyRef": {"name": "my-secret", "key": "my-key"}}
    variables = env_of(vllm({"spec.env": [{"name": "FOO", "value": "bar"}, {"name": "SECRET_VAL", "valueFrom": secret}]})[0])
    assert variables == [{"name": "FOO", "value": "bar"}, {"name": "SECRET_VAL", "valueFrom": secret}]


def test_transform_aggregated_env_var_prefers_value_from_over_value() -> None:
    """upstream: TestTransformAggregatedEnvVarPrefersValueFromOverValue: Kubernetes refuses both, the reference wins."""
    secret = {"secretKeyRef": {"name": "my-secret", "key": "my-key"}}
    variables = env_of(vllm({"spec.env": [{"name": "SECRET_VAL", "value": "inline-fallback", "valueFrom": secret}]})[0])
    assert variables == [{"name": "SECRET_VAL", "valueFrom": secret}]


# --- scheduling and pod metadata ---


def test_transform_aggregated_node_selector() -> None:
    """upstream: TestTransformAggregatedNodeSelector"""
    assert vllm({"spec.nodeSelector": {"gpu-type": "a100"}})[0]["spec"]["template"]["spec"]["nodeSelector"] == {"gpu-type": "a100"}


def test_transform_aggregated_pod_template_labels() -> None:
    """upstream: TestTransformAggregatedPodTemplateLabels: labels on the Deployment and its pods, annotations on the
    Deployment."""
    deployment = vllm(
        {
            "spec.podTemplate": {
                "metadata": {"labels": {"custom-label": "custom-value"}, "annotations": {"custom-annotation": "annotation-value"}}
            }
        }
    )[0]
    assert deployment["metadata"]["labels"]["custom-label"] == "custom-value"
    assert deployment["metadata"]["annotations"]["custom-annotation"] == "annotation-value"
    assert deployment["spec"]["template"]["metadata"]["labels"]["custom-label"] == "custom-value"


def test_transform_user_labels_cannot_clobber_selectors() -> None:
    """upstream: TestTransformUserLabelsCannotClobberSelectors"""
    labels = {"app": "my-custom-app", "airunway.ai/deployment": "my-custom-deployment", "my-label": "my-value"}
    deployment = vllm({"spec.podTemplate": {"metadata": {"labels": labels}}})[0]
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod = deployment["spec"]["template"]["metadata"]["labels"]
    assert (pod["app"], pod["airunway.ai/deployment"]) == (selector["app"], selector["airunway.ai/deployment"])
    assert pod["my-label"] == "my-value"


# --- free-form overrides ---


def test_transform_aggregated_override() -> None:
    """upstream: TestTransformAggregatedOverride: the Deployment takes the merged value. Admission refuses `replicas`
    (upstream's webhook does too: sizing keys would bypass the ceilings), so only an unchecked spec gets here."""
    overrides = {"spec": {"replicas": 5}}
    assert any('overriding "replicas" is not allowed' in p for p in refusals({"spec.provider": {"overrides": overrides}}))
    assert render("vllm", unadmitted({"spec.provider": {"overrides": overrides}}))[0]["spec"]["replicas"] == 5


def test_transform_override_blocks_metadata() -> None:
    """upstream: TestTransformOverrideBlocksMetadata"""
    overrides = {"metadata": {"name": "evil-name"}}
    assert refusals({"spec.provider": {"overrides": overrides}}) == [
        'spec.provider.overrides.metadata: overriding "metadata" is not allowed'
    ]
    with pytest.raises(RenderError, match='overriding "metadata" is not allowed'):
        render("vllm", unadmitted({"spec.provider": {"overrides": overrides}}))


# --- disaggregated: upstream's transformer renders it, its controller never lets it ---

PREFILL_1_DECODE_4 = {"prefill": {"replicas": 4, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 4}}}


@pytest.mark.parametrize(
    "scaling",
    [
        pytest.param(PREFILL_1_DECODE_4, id="TestTransformDisaggregatedBasic"),
        pytest.param(
            {"prefill": {"replicas": 2, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 2}}},
            id="TestTransformDisaggregatedKVTransferConfig",
        ),
        pytest.param(
            {"prefill": {"replicas": 4, "gpu": {"count": 1}}, "decode": {"replicas": 2, "gpu": {"count": 2}}},
            id="TestTransformDisaggregatedReplicas",
        ),
        pytest.param(PREFILL_1_DECODE_4, id="TestTransformDisaggregatedTensorParallelism"),
        pytest.param(PREFILL_1_DECODE_4, id="TestTransformDisaggregatedSharedMemoryPerComponent"),
    ],
)
def test_transform_disaggregated_is_refused(scaling: dict[str, Any]) -> None:
    """upstream: TestTransformDisaggregated{Basic,KVTransferConfig,Replicas,TensorParallelism,SharedMemoryPerComponent}.
    Those cases drive a prefill/decode path of the transformer that upstream's controller refuses before it runs
    (its compatibility check, and the provider config advertising aggregated only); Jetway refuses it the same way."""
    inputs = admitted({"spec.resources": DELETE, "spec.serving": {"mode": "disaggregated"}, "spec.scaling": scaling})
    with pytest.raises(RenderError) as refused:
        render("vllm", inputs)
    assert str(refused.value) == "vLLM provider does not support disaggregated serving mode; use spec.serving.mode: aggregated"


def test_transform_disaggregated_missing_scaling() -> None:
    """upstream: TestTransformDisaggregatedMissingScaling: refused at admission, and by the renderer."""
    assert refusals({"spec.serving": {"mode": "disaggregated"}, "spec.resources": DELETE})
    with pytest.raises(RenderError):
        render("vllm", unadmitted({"spec.serving": {"mode": "disaggregated"}}))


# --- the InferenceProviderConfig Direct vLLM registers (config_test.go) ---


def _config() -> dict[str, Any]:
    return next(c for c in builtin_configs() if c["metadata"]["name"] == "vllm")


def test_get_provider_config_spec() -> None:
    """upstream: TestGetProviderConfigSpec: vLLM on GPUs only, three API formats, aggregated only, explicit-only."""
    spec = _config()["spec"]
    (engine,) = [e for e in spec["capabilities"]["engines"] if e["name"] == "vllm"]
    assert engine["gpuSupport"] is True and not engine.get("cpuSupport")
    assert sorted(engine["apiFormats"]) == sorted(["openai-chat", "openai-responses", "anthropic-messages"])
    assert "aggregated" in engine["servingModes"] and "disaggregated" not in engine["servingModes"]
    assert spec["selectionRules"] == []


def test_get_installation_info() -> None:
    """upstream: TestGetInstallationInfo: a description (the steps are below)."""
    assert json.loads(_config()["metadata"]["annotations"]["airunway.ai/installation"])["description"]


def test_get_installation_info_steps() -> None:
    """upstream: TestGetInstallationInfo: installation steps, among them the lower-case HF token Secret command."""
    info = json.loads(_config()["metadata"]["annotations"]["airunway.ai/installation"])
    assert info["steps"]
    assert any(
        s.get("command") == "kubectl create secret generic vllm-hf-token --from-literal=HF_TOKEN=<your-token> -n <model-namespace>"
        for s in info["steps"]
    )


def test_provider_constants() -> None:
    """upstream: TestProviderConstants: the config is named `vllm`. Upstream's version is its shim's
    (`vllm-provider:<tag>`); Jetway has no shim and reports its workload service's version: a difference on purpose."""
    assert _config()["metadata"]["name"] == "vllm"
    assert VERSION.startswith("jetway-workload:")


def test_provider_documentation() -> None:
    """upstream: TestProviderDocumentation"""
    assert _config()["metadata"]["annotations"]["airunway.ai/documentation"]
