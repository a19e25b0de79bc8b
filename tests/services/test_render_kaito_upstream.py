"""AI Runway's KAITO transformer tests (`providers/kaito/transformer_test.go`, and the compatibility cases
of `controller_test.go`), as facts about the Workspace Jetway renders.

Each test is named after the upstream test it ports. Upstream's tests build a ModelDeployment without its
webhook; here every deployment is admitted first, so the webhook's defaults apply (a vLLM deployment
without resources gets one GPU, as upstream's defaulter gives it). Where Jetway renders otherwise on
purpose, docs/upstream-differences.md (## KAITO) says why and the test asserts Jetway's output.
Not ported: TestSanitizeLabelValue and TestBoolPtr, which test Go helpers the Workspace never shows.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli import render as cli_render
from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import StoragePlanned
from contracts.subjects import Key
from services.storage.decide import plan
from services.workload import render
from services.workload.render import kaito
from services.workload.render.common import Inputs, RenderError
from tests.contracts.cases import changed

UID = "test-uid"
MODEL = "meta-llama/Llama-2-7b-chat-hf"
# upstream's newTestMD: test-model in default, a Hugging Face model, vLLM
BASE: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "test-model", "namespace": "default"},
    "spec": {"model": {"id": MODEL, "source": "huggingface"}, "engine": {"type": "vllm"}},
}
LLAMACPP = {"spec.engine.type": "llamacpp", "spec.image": "my-image:latest"}
NAP_ON = {kaito.NODE_AUTO_PROVISIONING: "true"}
GPU_SKU = "Standard_NC24ads_A100_v4"
CPU_SKU = "Standard_D4s_v5"


def inputs(changes: dict[str, Any], settings: dict[str, str] | None = None) -> Inputs:
    verdict = admit(changed(BASE, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    md = verdict.obj
    key = Key("ModelDeployment", md.metadata.namespace or "default", md.metadata.name)
    storage = plan(md, key, 1, UID)
    assert isinstance(storage, StoragePlanned)
    return Inputs(key, UID, md, md.spec.engine.type if md.spec.engine and md.spec.engine.type else "vllm", storage, False, settings or {})


def workspace(changes: dict[str, Any] | None = None, settings: dict[str, str] | None = None) -> dict[str, Any]:
    objects = render.render("kaito", inputs(changes or {}, settings))
    assert len(objects) == 1
    return objects[0]


def container(ws: dict[str, Any]) -> dict[str, Any]:
    containers = ws["inference"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def match_labels(ws: dict[str, Any]) -> dict[str, str]:
    return dict(ws["resource"]["labelSelector"]["matchLabels"])


def test_transform_vllm() -> None:
    """upstream: TestTransformVLLM"""
    ws = workspace()
    assert (ws["apiVersion"], ws["kind"]) == ("kaito.sh/v1beta1", "Workspace")
    assert (ws["metadata"]["name"], ws["metadata"]["namespace"]) == ("test-model", "default")
    (owner,) = ws["metadata"]["ownerReferences"]
    assert owner["name"] == "test-model"
    labels = ws["metadata"]["labels"]
    assert labels["airunway.ai/managed-by"] == "airunway" and labels["airunway.ai/engine-type"] == "vllm"
    assert ws["inference"] == {"preset": {"name": MODEL}}
    assert ws["resource"]["count"] == 1


def test_transform_vllm_with_scaling() -> None:
    """upstream: TestTransformVLLMWithScaling"""
    assert workspace({"spec.scaling": {"replicas": 3}})["resource"]["count"] == 3


def test_transform_llama_cpp() -> None:
    """upstream: TestTransformLlamaCpp"""
    ws = workspace(LLAMACPP)
    assert "preset" not in ws["inference"]
    model = container(ws)
    assert model["image"] == "my-image:latest"
    assert f"huggingface://{MODEL}" in model["args"]
    assert model["ports"] == [{"containerPort": 5000}]


def test_transform_llama_cpp_uses_engine_image_override() -> None:
    """upstream: TestTransformLlamaCppUsesEngineImageOverride"""
    ws = workspace({**LLAMACPP, "spec.image": "legacy-image:latest", "spec.engine.image": "engine-image:latest"})
    assert container(ws)["image"] == "engine-image:latest"


def test_transform_llama_cpp_uses_explicit_gguf_url() -> None:
    """upstream: TestTransformLlamaCppUsesExplicitGGUFURL"""
    url = "https://huggingface.co/unsloth/NVIDIA-Nemotron-3-Nano-4B-GGUF/resolve/main/NVIDIA-Nemotron-3-Nano-4B-Q4_K_M.gguf"
    args = container(workspace({**LLAMACPP, "spec.engine.args": {"ggufUrl": url}}))["args"]
    assert args[0] == url


def test_transform_llama_cpp_no_image() -> None:
    """upstream: TestTransformLlamaCppNoImage (Jetway's message names both places an image can be given)"""
    with pytest.raises(RenderError, match=r"llamacpp engine requires an image: set spec\.engine\.image \(or the legacy spec\.image\)"):
        workspace({"spec.engine.type": "llamacpp"})


def test_transform_unsupported_engine() -> None:
    """upstream: TestTransformUnsupportedEngine"""
    with pytest.raises(RenderError, match="KAITO does not support sglang engine"):
        workspace({"spec.engine.type": "sglang"})


def test_transform_with_node_selector() -> None:
    """upstream: TestTransformWithNodeSelector"""
    labels = match_labels(workspace({"spec.nodeSelector": {"gpu-type": "a100"}}))
    assert labels["gpu-type"] == "a100" and labels["kubernetes.io/os"] == "linux"


def test_transform_with_env_vars() -> None:
    """upstream: TestTransformWithEnvVars"""
    changes = {**LLAMACPP, "spec.env": [{"name": "FOO", "value": "bar"}], "spec.secrets": {"huggingFaceToken": "my-hf-secret"}}
    env = container(workspace(changes))["env"]
    assert len(env) == 2
    assert env[0] == {"name": "FOO", "value": "bar"}
    assert env[1]["name"] == "HF_TOKEN"


def test_transform_with_env_from_secret() -> None:
    """upstream: TestTransformWithEnvFromSecret"""
    source = {"secretKeyRef": {"name": "my-secret", "key": "my-key"}}
    env = container(workspace({**LLAMACPP, "spec.env": [{"name": "SECRET_VAL", "valueFrom": source}]}))["env"]
    assert env == [{"name": "SECRET_VAL", "valueFrom": source}]


def test_transform_with_resources() -> None:
    """upstream: TestTransformWithResources"""
    model = container(workspace({**LLAMACPP, "spec.resources": {"memory": "16Gi", "cpu": "4"}}))
    assert model["resources"]["requests"] == {"memory": "16Gi", "cpu": "4"}


def test_transform_with_pod_template_labels() -> None:
    """upstream: TestTransformWithPodTemplateLabels"""
    template = {"metadata": {"labels": {"custom-label": "custom-value"}, "annotations": {"custom-annotation": "custom-value"}}}
    ws = workspace({"spec.podTemplate": template})
    assert ws["metadata"]["labels"]["custom-label"] == "custom-value"
    assert ws["metadata"]["annotations"]["custom-annotation"] == "custom-value"


def test_transform_with_pod_template_annotations_copies_map() -> None:
    """upstream: TestTransformWithPodTemplateAnnotationsCopiesMap"""
    given = inputs({"spec.podTemplate": {"metadata": {"annotations": {"custom-annotation": "custom-value"}}}})
    ws = render.render("kaito", given)[0]
    annotations = given.spec.podTemplate.metadata.annotations
    annotations["custom-annotation"] = "mutated"
    annotations["new-annotation"] = "new-value"
    assert ws["metadata"]["annotations"] == {"custom-annotation": "custom-value"}


@pytest.mark.parametrize(
    ("resources", "requests"),
    [
        (None, None),
        ({}, None),
        ({"memory": "8Gi"}, {"memory": "8Gi"}),
        ({"memory": "8Gi", "cpu": "2"}, {"memory": "8Gi", "cpu": "2"}),
    ],
    ids=["nil spec", "empty spec", "only memory", "both"],
)
def test_build_resource_requests(resources: dict[str, str] | None, requests: dict[str, str] | None) -> None:
    """upstream: TestBuildResourceRequests (as the llama.cpp container's requests)"""
    changes: dict[str, Any] = {**LLAMACPP}
    if resources is not None:
        changes["spec.resources"] = resources
    model = container(workspace(changes))
    assert model.get("resources") == ({"requests": requests} if requests else None)


def test_build_env_vars_empty() -> None:
    """upstream: TestBuildEnvVarsEmpty"""
    assert "env" not in container(workspace(LLAMACPP))


def test_apply_overrides() -> None:
    """upstream: TestApplyOverrides"""
    assert workspace()["resource"]["count"] == 1
    overrides = {"resource": {"labelSelector": {"matchLabels": {"custom": "label"}}}, "inference": {"preset": {"accessMode": "private"}}}
    ws = workspace({"spec.provider": {"name": "kaito", "overrides": overrides}})
    assert ws["inference"]["preset"] == {"name": MODEL, "accessMode": "private"}
    assert ws["resource"]["count"] == 1
    assert match_labels(ws)["custom"] == "label"


def test_apply_overrides_invalid_json() -> None:
    """upstream: TestApplyOverridesInvalidJSON (refused at admission: it never reaches a render)"""
    verdict = admit(changed(BASE, {"spec.provider": {"name": "kaito", "overrides": "not valid json"}}))
    assert not verdict.ok
    assert [str(p) for p in verdict.problems] == ["spec.provider.overrides: overrides must be a JSON object"]


def test_transform_vllm_default_replicas() -> None:
    """upstream: TestTransformVLLMDefaultReplicas"""
    assert workspace()["resource"]["count"] == 1


def test_transform_vllm_zero_replicas() -> None:
    """upstream: TestTransformVLLMZeroReplicas: KAITO cannot scale to zero (its vLLM runtime runs a node
    whatever `count` says, and its webhook refuses changing `count`), so 0 renders 1, and the status says 1."""
    given = inputs({"spec.scaling": {"replicas": 0}})
    assert render.render("kaito", given)[0]["resource"]["count"] == 1
    assert render.replicas("kaito", given) == 1


def test_transform_llama_cpp_does_not_inject_served_name_flag() -> None:
    """upstream: TestTransformLlamaCppDoesNotInjectServedNameFlag"""
    args = container(workspace({**LLAMACPP, "spec.model.servedName": "my-alias"}))["args"]
    assert not any("served-model-name" in a for a in args)


def test_transform_empty_node_selector() -> None:
    """upstream: TestTransformEmptyNodeSelector: nothing but the defaults (with the GPU label: admission gives a
    vLLM deployment without resources one GPU, as upstream's defaulter does)"""
    assert match_labels(workspace({"spec.nodeSelector": {}})) == {"kubernetes.io/os": "linux", "nvidia.com/gpu.present": "true"}
    cpu = {**LLAMACPP, "spec.nodeSelector": {}, "spec.resources": {"gpu": {"count": 0}}}
    assert match_labels(workspace(cpu)) == {"kubernetes.io/os": "linux"}


def test_transform_gpu_adds_nvidia_label() -> None:
    """upstream: TestTransformGPUAddsNvidiaLabel"""
    assert match_labels(workspace({"spec.resources": {"gpu": {"count": 1}}}))["nvidia.com/gpu.present"] == "true"


def test_transform_default_byo_node_resource_omits_instance_type() -> None:
    """upstream: TestTransformDefaultBYONodeResourceOmitsInstanceType"""
    resource = workspace()["resource"]
    assert "instanceType" not in resource and "labelSelector" in resource
    # the instance types alone do not turn auto-provisioning on
    assert "instanceType" not in workspace(settings={kaito.GPU_INSTANCE_TYPE: GPU_SKU})["resource"]


def test_transform_cpu_node_auto_provisioning_uses_cpu_instance_type() -> None:
    """upstream: TestTransformCPUNodeAutoProvisioningUsesCPUInstanceType"""
    settings = {**NAP_ON, kaito.CPU_INSTANCE_TYPE: CPU_SKU, kaito.GPU_INSTANCE_TYPE: GPU_SKU}
    resource = workspace({**LLAMACPP, "spec.resources": {"gpu": {"count": 0}}}, settings)["resource"]
    assert resource["instanceType"] == CPU_SKU
    assert "labelSelector" in resource  # KAITO v1beta1 requires it even when it provisions nodes


def test_transform_gpu_node_auto_provisioning_uses_gpu_instance_type() -> None:
    """upstream: TestTransformGPUNodeAutoProvisioningUsesGPUInstanceType"""
    settings = {**NAP_ON, kaito.GPU_INSTANCE_TYPE: GPU_SKU, kaito.CPU_INSTANCE_TYPE: CPU_SKU}
    ws = workspace({"spec.resources": {"gpu": {"count": 1}}}, settings)
    assert ws["resource"]["instanceType"] == GPU_SKU
    assert match_labels(ws)["nvidia.com/gpu.present"] == "true"


def test_transform_node_auto_provisioning_without_instance_type_falls_back_to_label_selector() -> None:
    """upstream: TestTransformNodeAutoProvisioningWithoutInstanceTypeFallsBackToLabelSelector"""
    for settings in (NAP_ON, {**NAP_ON, kaito.GPU_INSTANCE_TYPE: "  "}, {**NAP_ON, kaito.CPU_INSTANCE_TYPE: CPU_SKU}):
        ws = workspace({"spec.resources": {"gpu": {"count": 1}}}, settings)
        assert "instanceType" not in ws["resource"], settings
        assert match_labels(ws)["nvidia.com/gpu.present"] == "true"


@pytest.mark.parametrize("value", ["1", "t", "true", "y", "yes", "on", "enabled", " TRUE ", "Yes"])
def test_node_auto_provisioning_truthy_values(value: str) -> None:
    """upstream: kaitoNodeAutoProvisioningEnabled's values (1, t, true, y, yes, on, enabled; any case, trimmed)"""
    settings = {kaito.NODE_AUTO_PROVISIONING: value, kaito.GPU_INSTANCE_TYPE: f" {GPU_SKU} "}
    assert workspace(settings=settings)["resource"]["instanceType"] == GPU_SKU


@pytest.mark.parametrize("value", ["", "0", "false", "off", "no", "disabled", "2"])
def test_node_auto_provisioning_other_values_are_off(value: str) -> None:
    """upstream: kaitoNodeAutoProvisioningEnabled: anything else is off"""
    settings = {kaito.NODE_AUTO_PROVISIONING: value, kaito.GPU_INSTANCE_TYPE: GPU_SKU}
    assert "instanceType" not in workspace(settings=settings)["resource"]


def test_transform_override_can_delete_generated_instance_type() -> None:
    """upstream: TestTransformOverrideCanDeleteGeneratedInstanceType"""
    changes = {
        "spec.resources": {"gpu": {"count": 1}},
        "spec.provider": {"name": "kaito", "overrides": {"resource": {"instanceType": None}}},
    }
    resource = workspace(changes, {**NAP_ON, kaito.GPU_INSTANCE_TYPE: GPU_SKU})["resource"]
    assert "instanceType" not in resource and resource["count"] == 1


def test_transform_no_gpu_omits_nvidia_label() -> None:
    """upstream: TestTransformNoGPUOmitsNvidiaLabel"""
    assert "nvidia.com/gpu.present" not in match_labels(workspace({**LLAMACPP, "spec.resources": {"gpu": {"count": 0}}}))


def test_transform_gpu_label_wins_over_node_selector() -> None:
    """upstream: TestTransformGPULabelWinsOverNodeSelector"""
    ws = workspace({"spec.resources": {"gpu": {"count": 1}}, "spec.nodeSelector": {"nvidia.com/gpu.present": "false"}})
    assert match_labels(ws)["nvidia.com/gpu.present"] == "true"


def test_transform_override_can_delete_nvidia_gpu_label() -> None:
    """upstream: TestTransformOverrideCanDeleteNvidiaGPULabel"""
    overrides = {
        "resource": {"labelSelector": {"matchLabels": {"nvidia.com/gpu.present": None, "accelerator.vendor": "example.com/custom"}}}
    }
    ws = workspace({"spec.resources": {"gpu": {"count": 1}}, "spec.provider": {"name": "kaito", "overrides": overrides}})
    assert match_labels(ws) == {"kubernetes.io/os": "linux", "accelerator.vendor": "example.com/custom"}


def test_transform_sglang_unsupported() -> None:
    """upstream: TestTransformSGLangUnsupported"""
    with pytest.raises(RenderError, match="KAITO does not support sglang engine"):
        workspace({"spec.engine.type": "sglang"})


def test_transform_trtllm_unsupported() -> None:
    """upstream: TestTransformTRTLLMUnsupported"""
    with pytest.raises(RenderError, match="KAITO does not support trtllm engine"):
        workspace({"spec.engine.type": "trtllm"})


def test_transform_with_nil_resources() -> None:
    """upstream: TestTransformWithNilResources"""
    assert "resources" not in container(workspace(LLAMACPP))


def test_transform_with_hf_secret() -> None:
    """upstream: TestTransformWithHFSecret"""
    env = container(workspace({**LLAMACPP, "spec.secrets": {"huggingFaceToken": "my-hf-secret"}}))["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "my-hf-secret", "key": "HF_TOKEN"}}} in env


def test_transform_override_can_set_root_fields() -> None:
    """upstream: TestTransformOverrideCanSetRootFields"""
    ws = workspace({"spec.provider": {"name": "kaito", "overrides": {"resource": {"count": 10}}}})
    assert ws["resource"]["count"] == 10
    assert "labelSelector" in ws["resource"]


def test_build_resource_requests_gpu_only() -> None:
    """upstream: TestBuildResourceRequestsGPUOnly: KAITO puts no GPU in the container's requests"""
    assert "resources" not in container(workspace({**LLAMACPP, "spec.resources": {"gpu": {"count": 4}}}))


def test_transform_preserves_owner_reference() -> None:
    """upstream: TestTransformPreservesOwnerReference"""
    (owner,) = workspace()["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "name": "test-model",
        "uid": UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({}, None),
        (LLAMACPP, None),
        ({"spec.engine.type": "llamacpp"}, "llamacpp engine requires an image"),
        ({"spec.engine.type": "sglang"}, "KAITO does not support sglang engine"),
        ({"spec.engine.type": "trtllm"}, "KAITO does not support trtllm engine"),
        ({"spec.serving": {"mode": "aggregated"}}, None),
    ],
    ids=[
        "vllm is compatible",
        "llamacpp with image is compatible",
        "llamacpp without image is incompatible",
        "sglang is incompatible",
        "trtllm is incompatible",
        "aggregated mode is compatible",
    ],
)
def test_validate_compatibility(changes: dict[str, Any], message: str | None) -> None:
    """upstream: TestValidateCompatibility (controller_test.go); Jetway says it when rendering"""
    if message is None:
        assert workspace(changes)["kind"] == "Workspace"
    else:
        with pytest.raises(RenderError, match=message):
            workspace(changes)


def test_validate_compatibility_disaggregated_mode_is_incompatible() -> None:
    """upstream: TestValidateCompatibility/disaggregated mode is incompatible"""
    changes = {
        "spec.resources": None,
        "spec.serving": {"mode": "disaggregated"},
        "spec.scaling": {"prefill": {"replicas": 1, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 1}}},
    }
    with pytest.raises(RenderError, match="KAITO does not support disaggregated serving mode"):
        workspace(changes)


# --- Jetway's own: how the node auto-provisioning settings reach a render ----------------------


def test_jetway_reads_the_kaito_settings_from_the_environment_only_by_name() -> None:
    """Not upstream: the workload service and `jetway render` read AIRUNWAY_KAITO_* once, into Inputs.settings."""
    environ = {kaito.NODE_AUTO_PROVISIONING: "on", kaito.GPU_INSTANCE_TYPE: GPU_SKU, "PATH": "/bin", "AIRUNWAY_OTHER": "x"}
    assert render.settings(environ) == {kaito.NODE_AUTO_PROVISIONING: "on", kaito.GPU_INSTANCE_TYPE: GPU_SKU}


def test_jetway_offline_render_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not upstream: `jetway render -f` renders what a workload service started with the same environment would."""
    manifest = changed(BASE, {"spec.provider": {"name": "kaito"}, "spec.resources": {"gpu": {"count": 1}}})
    path = tmp_path / "md.yaml"
    path.write_text(yaml.safe_dump(manifest))
    monkeypatch.setenv(kaito.NODE_AUTO_PROVISIONING, "true")
    monkeypatch.setenv(kaito.GPU_INSTANCE_TYPE, GPU_SKU)
    out, err = io.StringIO(), io.StringIO()
    assert cli_render.run([str(path)], [], out, err) == 0, err.getvalue()
    (ws,) = [d for d in yaml.safe_load_all(out.getvalue()) if d and d.get("kind") == "Workspace"]
    assert ws["resource"]["instanceType"] == GPU_SKU


def test_jetway_mounts_the_model_cache_in_the_llama_cpp_template() -> None:
    """Not upstream (AI Runway's KAITO ignores storage): the llama.cpp pod mounts the volumes the storage plan
    made, where HF_HOME points; a vLLM preset has no pod of Jetway's to mount them in."""
    volumes = [{"name": "model-cache", "purpose": "modelCache", "size": "50Gi"}]
    ws = workspace({**LLAMACPP, "spec.model.storage.volumes": volumes})
    model = container(ws)
    (mount,) = model["volumeMounts"]
    assert mount["mountPath"] == "/model-cache" and {"name": "HF_HOME", "value": "/model-cache"} in model["env"]
    assert [v["name"] for v in ws["inference"]["template"]["spec"]["volumes"]] == [mount["name"]]
    assert "volumes" not in workspace(LLAMACPP)["inference"]["template"]["spec"]
