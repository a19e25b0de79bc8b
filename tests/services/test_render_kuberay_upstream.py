"""AI Runway's KubeRay transformer tests (`providers/kuberay/transformer_test.go`, and the compatibility
cases of `controller_test.go`), as facts about the RayService Jetway renders.

Each test is named after the upstream test it ports; upstream tests of internal builders
(`buildEngineArgs`, `buildHeadGroupSpec`, ...) are asserted on the part of the RayService they build.
Every deployment is admitted first. Where Jetway renders otherwise on purpose, docs/upstream-differences.md
(## KubeRay) says why and the test asserts Jetway's output. Not ported: TestSanitizeLabelValue and
TestBoolPtr, which test Go helpers the RayService never shows.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import StoragePlanned
from contracts.subjects import Key
from services.storage.decide import plan
from services.workload import render
from services.workload.render import kuberay
from services.workload.render.common import Inputs, RenderError
from tests.contracts.cases import changed

UID = "test-uid"
MODEL = "meta-llama/Llama-2-7b-chat-hf"
# upstream's newTestMD: test-model in default, a Hugging Face model, vLLM on one GPU
BASE: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "test-model", "namespace": "default"},
    "spec": {"model": {"id": MODEL, "source": "huggingface"}, "engine": {"type": "vllm"}, "resources": {"gpu": {"count": 1}}},
}
DISAGGREGATED = {"spec.resources": None, "spec.serving": {"mode": "disaggregated"}}


def inputs(changes: dict[str, Any]) -> Inputs:
    verdict = admit(changed(BASE, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    md = verdict.obj
    key = Key("ModelDeployment", md.metadata.namespace or "default", md.metadata.name)
    storage = plan(md, key, 1, UID)
    assert isinstance(storage, StoragePlanned)
    return Inputs(key, UID, md, md.spec.engine.type if md.spec.engine and md.spec.engine.type else "vllm", storage)


def ray_service(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    objects = render.render("kuberay", inputs(changes or {}))
    assert len(objects) == 1
    return objects[0]


def serve_config(rs: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(rs["spec"]["serveConfigV2"])
    return config


def num_replicas(rs: dict[str, Any]) -> int:
    (application,) = serve_config(rs)["applications"]
    (deployment,) = application["deployments"]
    assert deployment["name"] == "VLLMDeployment"
    count: int = deployment["num_replicas"]
    return count


def head(rs: dict[str, Any]) -> dict[str, Any]:
    (container,) = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    return dict(container)


def workers(rs: dict[str, Any]) -> list[dict[str, Any]]:
    return list(rs["spec"]["rayClusterConfig"]["workerGroupSpecs"])


def worker_container(group: dict[str, Any]) -> dict[str, Any]:
    (container,) = group["template"]["spec"]["containers"]
    return dict(container)


def head_env(rs: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in head(rs)["env"]}


def engine_args(changes: dict[str, Any]) -> str:
    value: str = head_env(ray_service(changes))["VLLM_ENGINE_ARGS"]["value"]
    return value


def test_transform_aggregated() -> None:
    """upstream: TestTransformAggregated"""
    rs = ray_service()
    assert (rs["apiVersion"], rs["kind"], rs["metadata"]["name"]) == ("ray.io/v1", "RayService", "test-model")
    assert len(rs["metadata"]["ownerReferences"]) == 1
    labels = rs["metadata"]["labels"]
    assert labels["airunway.ai/managed-by"] == "airunway" and labels["airunway.ai/engine-type"] == "vllm"
    assert num_replicas(rs) == 1
    assert "headGroupSpec" in rs["spec"]["rayClusterConfig"]
    assert len(workers(rs)) == 1
    # the serve application as upstream writes it
    (application,) = serve_config(rs)["applications"]
    assert (application["name"], application["route_prefix"], application["import_path"]) == ("llm", "/", "vllm_serve:deployment")


def test_transform_with_scaling() -> None:
    """upstream: TestTransformWithScaling"""
    assert num_replicas(ray_service({"spec.scaling": {"replicas": 3}})) == 3


def test_transform_disaggregated() -> None:
    """upstream: TestTransformDisaggregated (Jetway: one Serve replica per worker pod, 2 + 3)"""
    scaling = {
        "prefill": {"replicas": 2, "gpu": {"count": 2, "type": "nvidia.com/gpu"}, "memory": "64Gi"},
        "decode": {"replicas": 3, "gpu": {"count": 1}, "memory": "32Gi"},
    }
    rs = ray_service({**DISAGGREGATED, "spec.scaling": scaling})
    prefill, decode = workers(rs)
    assert (prefill["groupName"], prefill["replicas"]) == ("prefill-workers", 2)
    assert (decode["groupName"], decode["replicas"]) == ("decode-workers", 3)
    assert worker_container(prefill)["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "2"}
    assert num_replicas(rs) == 5


def test_transform_disaggregated_default_memory() -> None:
    """upstream: TestTransformDisaggregatedDefaultMemory"""
    scaling = {"prefill": {"replicas": 1, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 1}}}
    for group in workers(ray_service({**DISAGGREGATED, "spec.scaling": scaling})):
        assert worker_container(group)["resources"]["limits"]["memory"] == "32Gi"


def test_transform_with_pod_template_labels() -> None:
    """upstream: TestTransformWithPodTemplateLabels"""
    rs = ray_service({"spec.podTemplate": {"metadata": {"labels": {"custom": "label"}, "annotations": {"custom": "annotation"}}}})
    assert rs["metadata"]["labels"]["custom"] == "label"
    assert rs["metadata"]["annotations"]["custom"] == "annotation"


def test_build_engine_args() -> None:
    """upstream: TestBuildEngineArgs"""
    assert f"--model {MODEL}" in engine_args({})
    assert "--max-model-len 4096" in engine_args({"spec.engine.contextLength": 4096})
    assert "--served-model-name my-model" in engine_args({"spec.model.servedName": "my-model"})
    assert "--trust-remote-code" in engine_args({"spec.engine.trustRemoteCode": True})
    everything = {"spec.engine.contextLength": 4096, "spec.model.servedName": "my-model", "spec.engine.trustRemoteCode": True}
    assert engine_args(everything) == f"--model {MODEL} --max-model-len 4096 --served-model-name my-model --trust-remote-code"


def test_build_engine_args_with_custom_args() -> None:
    """upstream: TestBuildEngineArgsWithCustomArgs: the user's value, once"""
    args = engine_args({"spec.engine.args": {"tensor-parallel-size": "4"}})
    assert args.split().count("--tensor-parallel-size") == 1 and "--tensor-parallel-size 4" in args
    with_gpus = engine_args({"spec.resources": {"gpu": {"count": 2}}, "spec.engine.args": {"tensor-parallel-size": "4"}})
    assert with_gpus.split().count("--tensor-parallel-size") == 1 and "--tensor-parallel-size 4" in with_gpus


def test_build_engine_args_deterministic_order() -> None:
    """upstream: TestBuildEngineArgsDeterministicOrder"""
    args = {"zebra-param": "z", "alpha-param": "a", "middle-param": "m", "beta-param": "b", "enable-some-feature": "", "data-path": "/data"}
    first = engine_args({"spec.engine.args": args})
    assert all(engine_args({"spec.engine.args": dict(reversed(args.items()))}) == first for _ in range(3))
    assert first == (
        f"--model {MODEL} --alpha-param a --beta-param b --data-path /data --enable-some-feature --middle-param m --zebra-param z"
    )


def test_build_env_vars() -> None:
    """upstream: TestBuildEnvVars (the head's env after MODEL_ID and VLLM_ENGINE_ARGS)"""

    def user_env(changes: dict[str, Any]) -> list[dict[str, Any]]:
        return list(head(ray_service(changes))["env"][2:])

    assert user_env({}) == []
    assert user_env({"spec.env": [{"name": "FOO", "value": "bar"}]}) == [{"name": "FOO", "value": "bar"}]
    token = user_env({"spec.env": [{"name": "FOO", "value": "bar"}], "spec.secrets": {"huggingFaceToken": "my-secret"}})
    assert [e["name"] for e in token] == ["FOO", "HF_TOKEN"]
    assert token[1]["valueFrom"] == {"secretKeyRef": {"name": "my-secret", "key": "HF_TOKEN"}}
    source = {"secretKeyRef": {"name": "my-secret", "key": "my-key"}}
    assert user_env({"spec.env": [{"name": "SECRET_VAR", "valueFrom": source}]}) == [{"name": "SECRET_VAR", "valueFrom": source}]


def test_get_image() -> None:
    """upstream: TestGetImage (and spec.engine.image, which upstream's getImage also honours)"""
    assert head(ray_service({"spec.image": "custom:v1"}))["image"] == "custom:v1"
    assert head(ray_service({"spec.engine.image": "engine:v2", "spec.image": "custom:v1"}))["image"] == "engine:v2"
    rs = ray_service()
    assert head(rs)["image"] == kuberay.DEFAULT_IMAGE == "rayproject/ray-llm:2.55.0-py311-cu128"
    assert worker_container(workers(rs)[0])["image"] == kuberay.DEFAULT_IMAGE


def test_build_head_group_spec() -> None:
    """upstream: TestBuildHeadGroupSpec"""
    rs = ray_service()
    assert head(rs)["name"] == "ray-head"
    env = head_env(rs)
    assert env["MODEL_ID"]["value"] == MODEL
    assert "VLLM_ENGINE_ARGS" in env
    assert head(rs)["resources"] == {"limits": {"cpu": "4", "memory": "16Gi"}}
    assert rs["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"] == {"dashboard-host": "0.0.0.0"}


def test_build_head_group_spec_with_custom_memory() -> None:
    """upstream: TestBuildHeadGroupSpecWithCustomMemory"""
    rs = ray_service({"spec.resources": {"memory": "64Gi", "gpu": {"count": 1}}})
    assert head(rs)["resources"]["limits"]["memory"] == "64Gi"


def test_build_aggregated_worker_group() -> None:
    """upstream: TestBuildAggregatedWorkerGroup"""
    rs = ray_service({"spec.scaling": {"replicas": 2}, "spec.resources": {"gpu": {"count": 4, "type": "nvidia.com/gpu"}}})
    (group,) = workers(rs)
    assert (group["groupName"], group["replicas"], group["minReplicas"], group["maxReplicas"]) == ("gpu-workers", 2, 2, 2)
    assert worker_container(group)["resources"]["limits"] == {"memory": "32Gi", "nvidia.com/gpu": "4"}


def test_build_aggregated_worker_group_custom_gpu() -> None:
    """upstream: TestBuildAggregatedWorkerGroupCustomGPU"""
    (group,) = workers(ray_service({"spec.resources": {"gpu": {"count": 2, "type": "amd.com/gpu"}, "memory": "64Gi"}}))
    limits = worker_container(group)["resources"]["limits"]
    assert (limits["amd.com/gpu"], limits["memory"]) == ("2", "64Gi")


def test_build_disaggregated_worker_groups_with_custom_gpu_type() -> None:
    """upstream: TestBuildDisaggregatedWorkerGroupsWithCustomGPUType"""
    scaling = {
        "prefill": {"replicas": 1, "gpu": {"count": 2, "type": "amd.com/gpu"}},
        "decode": {"replicas": 1, "gpu": {"count": 1, "type": "amd.com/gpu"}},
    }
    prefill, decode = workers(ray_service({**DISAGGREGATED, "spec.scaling": scaling}))
    assert worker_container(prefill)["resources"]["limits"]["amd.com/gpu"] == "2"
    assert worker_container(decode)["resources"]["limits"]["amd.com/gpu"] == "1"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({}, None),
        ({"spec.engine.type": "sglang"}, "KubeRay only supports vllm engine, got sglang"),
        ({"spec.engine.type": "llamacpp"}, "KubeRay only supports vllm engine, got llamacpp"),
        ({"spec.engine.type": "trtllm"}, "KubeRay only supports vllm engine, got trtllm"),
        ({"spec.resources": {"gpu": {"count": 0}}}, r"KubeRay requires GPU \(set resources.gpu.count > 0\)"),
    ],
    ids=[
        "vllm with GPU is compatible",
        "sglang is incompatible",
        "llamacpp is incompatible",
        "trtllm is incompatible",
        "no GPU is incompatible",
    ],
)
def test_validate_compatibility(changes: dict[str, Any], message: str | None) -> None:
    """upstream: TestValidateCompatibility (controller_test.go); Jetway says it when rendering"""
    if message is None:
        assert ray_service(changes)["kind"] == "RayService"
    else:
        with pytest.raises(RenderError, match=message):
            ray_service(changes)


def test_validate_compatibility_disaggregated_with_prefill_gpu_is_compatible() -> None:
    """upstream: TestValidateCompatibility/disaggregated with prefill GPU is compatible (Jetway's admission
    also wants scaling.decode with GPUs in disaggregated mode, so the decode role is given here)"""
    scaling = {"prefill": {"replicas": 1, "gpu": {"count": 2}}, "decode": {"replicas": 1, "gpu": {"count": 1}}}
    assert [g["groupName"] for g in workers(ray_service({**DISAGGREGATED, "spec.scaling": scaling}))] == [
        "prefill-workers",
        "decode-workers",
    ]


# --- Jetway's own decisions ------------------------------------------------------------------


def test_jetway_zero_replicas_render_one_as_upstream() -> None:
    """Not an upstream test, upstream's code (`replicas > 0 ? n : 1`): Ray Serve refuses `num_replicas: 0` (its
    schema's num_replicas is a positive integer or "auto"), so scale-to-zero is not offered; the status says 1."""
    given = inputs({"spec.scaling": {"replicas": 0}})
    rs = render.render("kuberay", given)[0]
    (group,) = workers(rs)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"], num_replicas(rs)) == (1, 1, 1, 1)
    assert render.replicas("kuberay", given) == 1


def test_jetway_disaggregated_roles_at_zero_still_ask_for_a_serve_replica() -> None:
    """Not upstream: worker groups may be 0 (KubeRay allows it), but num_replicas is never 0."""
    scaling = {"prefill": {"replicas": 0, "gpu": {"count": 1}}, "decode": {"replicas": 0, "gpu": {"count": 1}}}
    rs = ray_service({**DISAGGREGATED, "spec.scaling": scaling})
    assert [g["replicas"] for g in workers(rs)] == [0, 0] and num_replicas(rs) == 1


def test_jetway_merges_overrides_into_the_ray_service() -> None:
    """Not upstream (AI Runway's KubeRay ignores overrides): merged last, maps merged, other values replace."""
    overrides = {
        "spec": {
            "rayClusterConfig": {"headGroupSpec": {"rayStartParams": {"num-cpus": "0"}}, "enableInTreeAutoscaling": False},
            "serviceUnhealthySecondThreshold": 900,
        }
    }
    rs = ray_service({"spec.provider": {"name": "kuberay", "overrides": overrides}})
    assert rs["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"] == {"dashboard-host": "0.0.0.0", "num-cpus": "0"}
    assert rs["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is False
    assert rs["spec"]["serviceUnhealthySecondThreshold"] == 900
    assert num_replicas(rs) == 1 and len(workers(rs)) == 1  # the rest is as rendered
    replaced = ray_service({"spec.provider": {"name": "kuberay", "overrides": {"spec": {"serveConfigV2": "applications: []\n"}}}})
    assert replaced["spec"]["serveConfigV2"] == "applications: []\n"


def test_jetway_security_overrides_reach_every_ray_pod() -> None:
    """Not upstream: the spec's security sections, into the head's and the workers' pods."""
    overrides = {
        "workload": {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1000}},
        "container": {"securityContext": {"allowPrivilegeEscalation": False}},
    }
    rs = ray_service({"spec.provider": {"name": "kuberay", "overrides": overrides}})
    pods = [rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"], *(g["template"] for g in workers(rs))]
    for pod in pods:
        assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000}
        assert pod["spec"]["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False}
    assert "workload" not in rs and "container" not in rs["spec"]


def test_jetway_mounts_the_model_cache_on_every_ray_pod() -> None:
    """Not upstream (AI Runway's KubeRay ignores storage): the volumes the storage plan made, mounted where
    HF_HOME points, on the head and the workers, so the downloaded model is what vLLM reads."""
    volumes = [{"name": "model-cache", "purpose": "modelCache", "size": "50Gi"}]
    rs = ray_service({"spec.model.storage.volumes": volumes})
    for pod in [rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"], *(g["template"] for g in workers(rs))]:
        (container,) = pod["spec"]["containers"]
        (mount,) = container["volumeMounts"]
        assert mount["mountPath"] == "/model-cache"
        assert {"name": "HF_HOME", "value": "/model-cache"} in container["env"]
        assert [v["name"] for v in pod["spec"]["volumes"]] == [mount["name"]]
    assert "volumes" not in ray_service()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
