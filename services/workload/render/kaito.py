"""KAITO: a Workspace; a vLLM preset named by the model id, or a llama.cpp template with its image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contracts.objects import MODEL_DEPLOYMENT
from services.workload.render.common import (
    Inputs,
    RenderError,
    apply_overrides,
    env,
    main_metadata,
    merge_overrides,
    storage_volumes,
)

# AI Runway's KAITO node auto-provisioning settings, by the names its KAITO provider reads from its environment.
NODE_AUTO_PROVISIONING = "AIRUNWAY_KAITO_NODE_AUTO_PROVISIONING"
GPU_INSTANCE_TYPE = "AIRUNWAY_KAITO_GPU_INSTANCE_TYPE"
CPU_INSTANCE_TYPE = "AIRUNWAY_KAITO_CPU_INSTANCE_TYPE"
SETTINGS = (NODE_AUTO_PROVISIONING, GPU_INSTANCE_TYPE, CPU_INSTANCE_TYPE)
TRUE = ("1", "t", "true", "y", "yes", "on", "enabled")


def instance_type(inputs: Inputs, settings: Mapping[str, str]) -> str:
    """The node type KAITO is to provision: only when auto-provisioning is on, the GPU or the CPU one
    as the deployment asks for GPUs; "" (KAITO uses the nodes the label selector finds) otherwise."""
    if settings.get(NODE_AUTO_PROVISIONING, "").strip().lower() not in TRUE:
        return ""
    return settings.get(GPU_INSTANCE_TYPE if inputs.gpus > 0 else CPU_INSTANCE_TYPE, "").strip()


def replicas(inputs: Inputs) -> int:
    """`resource.count`, the nodes (and so the replicas): KAITO cannot scale a Workspace to zero. Its vLLM runtime runs at least one
    node whatever `count` says, and its webhook refuses any change of `count` once the Workspace exists
    ("field is immutable"), so `scaling.replicas: 0` renders 1, as AI Runway does."""
    return inputs.replicas if inputs.replicas > 0 else 1


def render(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.engine not in ("vllm", "llamacpp"):
        raise RenderError(f"KAITO does not support {inputs.engine} engine")
    if inputs.mode == "disaggregated":
        raise RenderError("KAITO does not support disaggregated serving mode")
    spec = inputs.spec
    # the GPU label last: a nodeSelector cannot turn it off (a null override can, then add another selector)
    match = {"kubernetes.io/os": "linux", **(spec.nodeSelector or {})}
    if inputs.gpus > 0:
        match["nvidia.com/gpu.present"] = "true"
    resource: dict[str, Any] = {"count": replicas(inputs)}
    node_type = instance_type(inputs, inputs.settings)
    if node_type:
        resource["instanceType"] = node_type  # the label selector stays: KAITO's v1beta1 schema requires it
    resource["labelSelector"] = {"matchLabels": match}
    workspace: dict[str, Any] = {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": main_metadata(inputs, inputs.name, {MODEL_DEPLOYMENT: inputs.name}),
        "resource": resource,
    }
    if inputs.engine == "vllm":
        workspace["inference"] = {"preset": {"name": spec.model.id or ""}}
    else:
        workspace["inference"] = {"template": _llamacpp_template(inputs)}
    merge_overrides(workspace, inputs, null_deletes=True)  # last, as AI Runway does; a null deletes the key
    return [workspace]


def _llamacpp_template(inputs: Inputs) -> dict[str, Any]:
    spec = inputs.spec
    image = (spec.engine.image if spec.engine else None) or spec.image
    if not image:
        raise RenderError("llamacpp engine requires an image: set spec.engine.image (or the legacy spec.image)")
    model_arg = (spec.engine.args or {}).get("ggufUrl") if spec.engine else None
    if model_arg is None and spec.model.source != "custom" and spec.model.id:
        model_arg = f"huggingface://{spec.model.id}"
    requests = {
        k: v
        for k, v in (("memory", spec.resources.memory if spec.resources else None), ("cpu", spec.resources.cpu if spec.resources else None))
        if v
    }
    container: dict[str, Any] = {
        "name": "model",
        "image": image,
        "args": [*([model_arg] if model_arg else []), "--address=:5000"],
        "ports": [{"containerPort": 5000}],
    }
    if requests:
        container["resources"] = {"requests": requests}
    variables = env(inputs)
    if variables:
        container["env"] = variables
    volumes, mounts = storage_volumes(inputs)  # the model cache HF_HOME points at
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {"containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    if spec.tolerations:
        pod["tolerations"] = [t.wire() for t in spec.tolerations]
    apply_overrides(inputs, pod, container, [container])
    return {"metadata": {"labels": {MODEL_DEPLOYMENT: inputs.name}}, "spec": pod}


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": inputs.name, "port": 80}
