"""Direct vLLM: a Deployment and a Service named after the deployment, vLLM's OpenAI server on port 8000."""

from __future__ import annotations

from typing import Any

from contracts.objects import metadata
from services.workload.render.common import (
    Inputs,
    RenderError,
    apply_overrides,
    env,
    labels,
    main_metadata,
    main_resources,
    merge_overrides,
    pod_annotations,
    pod_labels,
    scheduling,
    selector,
    storage_volumes,
    vllm_args,
)

DEFAULT_IMAGE = "vllm/vllm-openai:cu130-nightly"
PORT = 8000


def probe(initial: int, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": PORT},
        "initialDelaySeconds": initial,
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def service(inputs: Inputs, name: str, selector_labels: dict[str, str], extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, inputs.key, inputs.uid, {**labels(inputs), **(extra_labels or {})}),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels,
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def deployment(
    inputs: Inputs,
    name: str,
    container: dict[str, Any],
    selector_labels: dict[str, str],
    replicas: int,
    volumes: list[dict[str, Any]],
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [container], **scheduling(inputs)}
    if volumes:
        pod_spec["volumes"] = volumes
    apply_overrides(inputs, pod_spec, container, pod_spec["containers"])
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": main_metadata(inputs, name, extra_labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels},
            "template": {
                "metadata": {
                    "labels": {**pod_labels(inputs, selector_labels), **(extra_labels or {})},
                    "annotations": pod_annotations(inputs),
                },
                "spec": pod_spec,
            },
        },
    }
    merge_overrides(obj, inputs)
    return obj


COMPATIBLE = "Configuration compatible with vLLM"


def compatibility(inputs: Inputs) -> str | None:
    """Why Direct vLLM cannot run this deployment (`ProviderCompatible=False`), or None."""
    if inputs.engine != "vllm":
        return f"vLLM provider only supports vllm engine, got {inputs.engine}"
    if inputs.mode == "disaggregated":
        return "vLLM provider does not support disaggregated serving mode; use spec.serving.mode: aggregated"
    if inputs.gpus <= 0:
        return "vLLM provider requires GPU resources (spec.resources.gpu.count > 0)"
    return None


def render(inputs: Inputs) -> list[dict[str, Any]]:
    problem = compatibility(inputs)
    if problem:
        raise RenderError(problem)
    volumes, mounts = storage_volumes(inputs)
    if inputs.gpus > 1:
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "20Gi"}})
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    container: dict[str, Any] = {
        "name": "vllm",
        "image": inputs.image(inputs.default_image or DEFAULT_IMAGE),  # the default runs by its digest once resolved
        "args": vllm_args(inputs, networking=True, prefix_off_flag=True),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "startupProbe": probe(15, 10, 60),
        "livenessProbe": probe(15, 10, 3),
        "readinessProbe": probe(15, 5, 3),
    }
    variables = env(inputs)
    if variables:
        container["env"] = variables
    res = main_resources(inputs)
    if res:
        container["resources"] = res
    if mounts:
        container["volumeMounts"] = mounts
    labels_ = selector(inputs.name)
    return [deployment(inputs, inputs.name, container, labels_, inputs.replicas, volumes), service(inputs, inputs.name, labels_)]


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": inputs.name, "port": PORT}
