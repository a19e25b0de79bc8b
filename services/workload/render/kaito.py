"""KAITO: a Workspace; a vLLM preset named by the model id, or a llama.cpp template with its image."""

from __future__ import annotations

from typing import Any

from contracts.objects import MODEL_DEPLOYMENT, metadata
from services.workload.render.common import Inputs, RenderError, apply_overrides, env, labels, pod_annotations, template_labels


def render(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.engine not in ("vllm", "llamacpp"):
        raise RenderError(f"KAITO does not support {inputs.engine} engine")
    if inputs.mode == "disaggregated":
        raise RenderError("KAITO does not support disaggregated serving mode")
    spec = inputs.spec
    match = {"kubernetes.io/os": "linux", **(spec.nodeSelector or {})}
    if inputs.gpus > 0:
        match["nvidia.com/gpu.present"] = "true"
    workspace: dict[str, Any] = {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": metadata(
            inputs.name,
            inputs.key,
            inputs.uid,
            {**template_labels(inputs), **labels(inputs), MODEL_DEPLOYMENT: inputs.name},
            pod_annotations(inputs) or None,
        ),
        "resource": {"count": max(inputs.replicas, 0), "labelSelector": {"matchLabels": match}},
    }
    if inputs.engine == "vllm":
        workspace["inference"] = {"preset": {"name": spec.model.id or ""}}
        return [workspace]
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
    pod: dict[str, Any] = {"containers": [container]}
    if spec.tolerations:
        pod["tolerations"] = [t.wire() for t in spec.tolerations]
    apply_overrides(inputs, pod, container, [container])
    workspace["inference"] = {"template": {"metadata": {"labels": {MODEL_DEPLOYMENT: inputs.name}}, "spec": pod}}
    return [workspace]


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": inputs.name, "port": 80}
