"""llm-d, ported from AI Runway's own tests (ai-runway/airunway b0d3fb7, providers/llmd/transformer_test.go): the
same inputs, the same facts a user sees in the rendered Deployments and Services, run against Jetway's renderer and,
where upstream's case is an admission one, against `jetway validate`'s rules.

The manifests go through admission as a user's do (see test_render_vllm_upstream.py for `admitted` and
`unadmitted`). Deliberate differences are listed in docs/upstream-differences.md under "llm-d".
"""

from __future__ import annotations

from typing import Any

import pytest

from services.workload.render import render
from services.workload.render.common import RenderError, resources
from tests.contracts.cases import DELETE
from tests.services.test_render_vllm_upstream import (
    MODEL,
    UID,
    admitted,
    args_of,
    container,
    env_of,
    has_arg,
    refusals,
    unadmitted,
)

KV_PRODUCER = '{"kv_connector":"PyNcclConnector","kv_role":"kv_producer"}'
KV_CONSUMER = '{"kv_connector":"PyNcclConnector","kv_role":"kv_consumer"}'


def llmd(changes: dict[str, Any]) -> list[dict[str, Any]]:
    return render("llmd", admitted({"spec.provider": {"name": "llmd"}, **changes}))


def disaggregated(prefill: dict[str, Any], decode: dict[str, Any]) -> list[dict[str, Any]]:
    """Upstream's disaggregated cases keep newTestMD's one GPU in spec.resources too; admission (upstream's webhook as
    much as Jetway's) refuses both at once, so the top-level GPUs go."""
    return llmd(
        {"spec.resources": DELETE, "spec.serving": {"mode": "disaggregated"}, "spec.scaling": {"prefill": prefill, "decode": decode}}
    )


# --- the Deployment and the Service ---


def test_transform_aggregated_basic() -> None:
    """upstream: TestTransformAggregatedBasic"""
    deployment, service = llmd({})
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert (deployment["metadata"]["name"], deployment["metadata"]["namespace"]) == ("test-model", "default")
    assert (service["kind"], service["metadata"]["name"]) == ("Service", "test-model")


def test_transform_aggregated_owner_reference() -> None:
    """upstream: TestTransformAggregatedOwnerReference"""
    (owner,) = llmd({})[0]["metadata"]["ownerReferences"]
    assert (owner["name"], owner["uid"], owner["controller"]) == ("test-model", UID, True)


def test_transform_aggregated_labels() -> None:
    """upstream: TestTransformAggregatedLabels"""
    labels = llmd({})[0]["metadata"]["labels"]
    assert labels["airunway.ai/managed-by"] == "airunway"
    assert labels["airunway.ai/deployment"] == "test-model"
    assert labels["airunway.ai/engine-type"] == "vllm"


def test_transform_aggregated_replicas() -> None:
    """upstream: TestTransformAggregatedReplicas"""
    assert llmd({"spec.scaling": {"replicas": 3}})[0]["spec"]["replicas"] == 3


def test_transform_aggregated_default_replicas() -> None:
    """upstream: TestTransformAggregatedDefaultReplicas"""
    assert llmd({})[0]["spec"]["replicas"] == 1
    assert render("llmd", unadmitted({}))[0]["spec"]["replicas"] == 1


def test_transform_aggregated_service_port() -> None:
    """upstream: TestTransformAggregatedServicePort"""
    assert llmd({})[1]["spec"]["ports"][0]["port"] == 8000


def test_transform_unsupported_engine() -> None:
    """upstream: TestTransformUnsupportedEngine"""
    with pytest.raises(RenderError, match="llm-d provider only supports vllm engine, got sglang"):
        render("llmd", admitted({"spec.engine.type": "sglang"}, "sglang"))


# --- vLLM's flags ---


def test_transform_aggregated_vllm_args() -> None:
    """upstream: TestTransformAggregatedVLLMArgs: no --host/--port, the model first."""
    args = args_of(llmd({"spec.model.servedName": "my-alias", "spec.engine.contextLength": 4096, "spec.engine.trustRemoteCode": True})[0])
    assert args[:2] == ["--model", MODEL]
    assert has_arg(args, "--served-model-name", "my-alias")
    assert has_arg(args, "--max-model-len", "4096")
    assert "--trust-remote-code" in args
    assert "--host" not in args and "--port" not in args


def test_transform_aggregated_prefix_caching_flag() -> None:
    """upstream: TestTransformAggregatedPrefixCachingFlag: both states are said out loud."""
    on = args_of(llmd({"spec.engine.enablePrefixCaching": True})[0])
    assert "--enable-prefix-caching" in on and "--no-enable-prefix-caching" not in on
    off = args_of(llmd({"spec.engine.enablePrefixCaching": False})[0])
    assert "--no-enable-prefix-caching" in off and "--enable-prefix-caching" not in off


def test_transform_aggregated_enforce_eager_flag() -> None:
    """upstream: TestTransformAggregatedEnforceEagerFlag: there is no off form; off is silence."""
    assert "--enforce-eager" in args_of(llmd({"spec.engine.enforceEager": True})[0])
    assert "--enforce-eager" not in args_of(llmd({"spec.engine.enforceEager": False})[0])


def test_transform_aggregated_tensor_parallelism() -> None:
    """upstream: TestTransformAggregatedTensorParallelism"""
    assert has_arg(args_of(llmd({"spec.resources": {"gpu": {"count": 4}}})[0]), "--tensor-parallel-size", "4")


def test_transform_aggregated_no_tensor_parallel_for_single_gpu() -> None:
    """upstream: TestTransformAggregatedNoTensorParallelForSingleGPU"""
    assert "--tensor-parallel-size" not in args_of(llmd({})[0])


def test_transform_aggregated_custom_engine_args() -> None:
    """upstream: TestTransformAggregatedCustomEngineArgs"""
    args = args_of(llmd({"spec.engine.args": {"gpu-memory-utilization": "0.9", "disable-log-requests": ""}})[0])
    assert has_arg(args, "--gpu-memory-utilization", "0.9")
    assert "--disable-log-requests" in args


def test_transform_aggregated_engine_extra_args_appended_after_sorted_engine_args() -> None:
    """upstream: TestTransformAggregatedEngineExtraArgsAppendedAfterSortedEngineArgs"""
    args = args_of(
        llmd(
            {"spec.engine.args": {"zeta": "last", "alpha": "first"}, "spec.engine.extraArgs": ["--raw-flag", "raw-value", "--second-raw"]}
        )[0]
    )
    assert args[-7:] == ["--alpha", "first", "--zeta", "last", "--raw-flag", "raw-value", "--second-raw"]


def test_transform_aggregated_invalid_engine_arg_key() -> None:
    """upstream: TestTransformAggregatedInvalidEngineArgKey: refused at admission, and by the renderer as a backstop."""
    message = 'invalid engine arg key "-bad-key": must contain only alphanumeric characters, hyphens, and underscores'
    assert refusals({"spec.engine.args": {"-bad-key": "value"}}) == [f"spec.engine.args.-bad-key: {message}"]
    with pytest.raises(RenderError) as refused:
        render("llmd", unadmitted({"spec.engine.args": {"-bad-key": "value"}}))
    assert str(refused.value) == message


# --- image (llm-d's own: no resolution) ---


def test_transform_aggregated_default_image() -> None:
    """upstream: TestTransformAggregatedDefaultImage"""
    assert container(llmd({})[0])["image"] == "vllm/vllm-openai:v0.9.1"


def test_transform_aggregated_custom_image() -> None:
    """upstream: TestTransformAggregatedCustomImage: the legacy spec.image."""
    assert container(llmd({"spec.image": "my-custom-vllm:latest"})[0])["image"] == "my-custom-vllm:latest"


def test_transform_aggregated_engine_image_preferred_over_legacy_image() -> None:
    """upstream: TestTransformAggregatedEngineImagePreferredOverLegacyImage. Two different images are refused at
    admission (upstream's webhook says the same words); the renderer, given both, takes spec.engine.image."""
    changes = {"spec.image": "legacy-vllm:latest", "spec.engine.image": "engine-vllm:latest"}
    assert refusals(changes) == [
        'spec.engine.image: spec.image "legacy-vllm:latest" conflicts with spec.engine.image "engine-vllm:latest"; '
        "remove spec.image or set both fields to the same value (spec.engine.image is preferred)"
    ]
    assert container(render("llmd", unadmitted(changes))[0])["image"] == "engine-vllm:latest"


# --- resources and environment ---


def test_transform_aggregated_gpu_resources() -> None:
    """upstream: TestTransformAggregatedGPUResources"""
    limits = container(llmd({"spec.resources": {"gpu": {"count": 2}, "memory": "32Gi"}})[0])["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["memory"]) == ("2", "32Gi")


def test_build_resource_limits() -> None:
    """upstream: TestBuildResourceLimits"""
    assert resources(0, "nvidia.com/gpu", None, None) == {}
    assert resources(2, "nvidia.com/gpu", None, None)["limits"]["nvidia.com/gpu"] == "2"
    assert resources(0, "nvidia.com/gpu", "16Gi", None)["limits"]["memory"] == "16Gi"


def test_transform_aggregated_hf_token_secret() -> None:
    """upstream: TestTransformAggregatedHFTokenSecret"""
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "my-hf-secret", "key": "HF_TOKEN"}}}
    assert token in env_of(llmd({"spec.secrets": {"huggingFaceToken": "my-hf-secret"}})[0])


def test_transform_aggregated_env_vars() -> None:
    """upstream: TestTransformAggregatedEnvVars"""
    secret = {"secretKeyRef": {"name": "my-secret", "key": "my-key"}}
    variables = env_of(llmd({"spec.env": [{"name": "FOO", "value": "bar"}, {"name": "SECRET_VAL", "valueFrom": secret}]})[0])
    assert variables == [{"name": "FOO", "value": "bar"}, {"name": "SECRET_VAL", "valueFrom": secret}]


# --- scheduling and pod metadata ---


def test_transform_aggregated_node_selector() -> None:
    """upstream: TestTransformAggregatedNodeSelector"""
    assert llmd({"spec.nodeSelector": {"gpu-type": "a100"}})[0]["spec"]["template"]["spec"]["nodeSelector"] == {"gpu-type": "a100"}


def test_transform_aggregated_pod_template_labels() -> None:
    """upstream: TestTransformAggregatedPodTemplateLabels"""
    deployment = llmd(
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
    deployment = llmd({"spec.podTemplate": {"metadata": {"labels": labels}}})[0]
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod = deployment["spec"]["template"]["metadata"]["labels"]
    assert (pod["app"], pod["airunway.ai/deployment"]) == (selector["app"], selector["airunway.ai/deployment"])
    assert pod["my-label"] == "my-value"


# --- disaggregated: decode and prefill pairs ---


def test_transform_disaggregated_basic() -> None:
    """upstream: TestTransformDisaggregatedBasic: both Deployments, then both Services; the decode Deployment first
    (it is the one whose status the deployment reports). Every pod and Service selects on the ModelDeployment's name
    and its own role's `app`."""
    objects = disaggregated({"replicas": 4, "gpu": {"count": 1}}, {"replicas": 1, "gpu": {"count": 4}})
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Deployment", "test-model-decode"),
        ("Deployment", "test-model-prefill"),
        ("Service", "test-model-decode"),
        ("Service", "test-model-prefill"),
    ]
    for deployment, service in zip(objects[:2], objects[2:], strict=True):
        name = deployment["metadata"]["name"]
        assert deployment["spec"]["selector"]["matchLabels"] == {"airunway.ai/deployment": "test-model", "app": name}
        assert service["spec"]["selector"] == {"airunway.ai/deployment": "test-model", "app": name}


def test_transform_disaggregated_kv_transfer_config() -> None:
    """upstream: TestTransformDisaggregatedKVTransferConfig: decode consumes, prefill produces, the JSON exactly so."""
    decode, prefill, *_ = disaggregated({"replicas": 2, "gpu": {"count": 1}}, {"replicas": 1, "gpu": {"count": 2}})
    assert has_arg(args_of(decode), "--kv-transfer-config", KV_CONSUMER)
    assert has_arg(args_of(prefill), "--kv-transfer-config", KV_PRODUCER)


def test_transform_disaggregated_replicas() -> None:
    """upstream: TestTransformDisaggregatedReplicas"""
    decode, prefill, *_ = disaggregated({"replicas": 4, "gpu": {"count": 1}}, {"replicas": 2, "gpu": {"count": 2}})
    assert (decode["spec"]["replicas"], prefill["spec"]["replicas"]) == (2, 4)


def test_transform_disaggregated_tensor_parallelism() -> None:
    """upstream: TestTransformDisaggregatedTensorParallelism: each role's own GPU count, before the engine args."""
    decode, prefill, *_ = llmd(
        {
            "spec.resources": DELETE,
            "spec.serving": {"mode": "disaggregated"},
            "spec.scaling": {"prefill": {"replicas": 4, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 4}}},
            "spec.engine.args": {"max-num-seqs": "8"},
        }
    )
    args = args_of(decode)
    assert has_arg(args, "--tensor-parallel-size", "4")
    assert args.index("--tensor-parallel-size") < args.index("--kv-transfer-config") < args.index("--max-num-seqs")
    assert "--tensor-parallel-size" not in args_of(prefill)


def test_transform_disaggregated_missing_scaling() -> None:
    """upstream: TestTransformDisaggregatedMissingScaling: refused at admission, and by the renderer."""
    assert refusals({"spec.serving": {"mode": "disaggregated"}, "spec.resources": DELETE})
    with pytest.raises(RenderError, match=r"spec\.scaling\.prefill is required for disaggregated serving mode"):
        render("llmd", unadmitted({"spec.serving": {"mode": "disaggregated"}, "spec.resources": DELETE}))


# --- free-form overrides ---


def test_transform_aggregated_override() -> None:
    """upstream: TestTransformAggregatedOverride (admission refuses `replicas`, as upstream's webhook does)."""
    overrides = {"spec": {"replicas": 5}}
    assert any('overriding "replicas" is not allowed' in p for p in refusals({"spec.provider": {"overrides": overrides}}))
    assert render("llmd", unadmitted({"spec.provider": {"overrides": overrides}}))[0]["spec"]["replicas"] == 5


def test_transform_override_blocks_metadata() -> None:
    """upstream: TestTransformOverrideBlocksMetadata"""
    with pytest.raises(RenderError, match='overriding "metadata" is not allowed'):
        render("llmd", unadmitted({"spec.provider": {"overrides": {"metadata": {"name": "evil-name"}}}}))


def test_transform_override_blocks_pod_spec() -> None:
    """upstream: TestTransformOverrideBlocksPodSpec: the message names spec.template.spec. (At admission the
    `hostNetwork` inside is refused for security, whichever provider is chosen.)"""
    overrides = {"spec": {"template": {"spec": {"hostNetwork": True}}}}
    assert refusals({"spec.provider": {"overrides": overrides}}) == [
        'spec.provider.overrides.spec.template.spec.hostNetwork: overriding "hostNetwork" is not allowed for security reasons'
    ]
    with pytest.raises(RenderError) as refused:
        render("llmd", unadmitted({"spec.provider": {"overrides": overrides}}))
    assert "spec.template.spec" in str(refused.value)


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        pytest.param({"spec": {"template": {"spec": {}}}}, True, id="path exists"),
        pytest.param({"spec": {}}, False, id="path missing"),
        pytest.param({"spec": "not-a-map"}, False, id="path blocked by non-map"),
    ],
)
def test_has_nested_map_path(overrides: dict[str, Any], refused: bool) -> None:
    """upstream: TestHasNestedMapPath/{path exists,path missing,path blocked by non-map}: only a pod spec that is
    really there is refused, an empty one included."""
    inputs = unadmitted({"spec.provider": {"overrides": overrides}})
    if refused:
        with pytest.raises(RenderError, match=r'overriding "spec\.template\.spec" is not allowed'):
            render("llmd", inputs)
    else:
        render("llmd", inputs)
