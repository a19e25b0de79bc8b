"""llm-d: vLLM Deployments and Services in the llm-d shape; prefill and decode pairs when disaggregated."""

from __future__ import annotations

import json
from typing import Any

from contracts.objects import child_name
from services.workload.render.common import Inputs, RenderError, env, free_overrides, resources, storage_volumes, vllm_args
from services.workload.render.vllm import PORT, deployment, probe, service

DEFAULT_IMAGE = "vllm/vllm-openai:v0.9.1"
ROLE = "llm-d.ai/role"


def _container(inputs: Inputs, args: list[str], res: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "vllm",
        "image": inputs.image(DEFAULT_IMAGE),
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": probe(15, 5, 3),
    }
    variables = env(inputs)
    if variables:
        container["env"] = variables
    if res:
        container["resources"] = res
    if mounts:
        container["volumeMounts"] = mounts
    return container


def render(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.engine != "vllm":
        raise RenderError(f"llm-d provider only supports vllm engine, got {inputs.engine}")
    template = free_overrides(inputs).get("spec", {})
    if isinstance(template, dict) and isinstance(template.get("template"), dict) and "spec" in template["template"]:
        # llm-d's pod spec is the engine's contract with its scheduler; AI Runway refuses replacing it.
        raise RenderError('overriding "spec.template.spec" is not allowed')
    volumes, mounts = storage_volumes(inputs)
    if inputs.mode == "aggregated":
        if inputs.gpus <= 0:
            raise RenderError("llm-d requires GPU resources (spec.resources.gpu.count > 0)")
        args = vllm_args(inputs, networking=False, prefix_off_flag=True)
        res = resources(inputs.gpus, inputs.gpu_type, inputs.spec.resources.memory, inputs.spec.resources.cpu)
        labels_ = {"airunway.ai/deployment": inputs.name, "app": inputs.name}
        return [
            deployment(inputs, inputs.name, _container(inputs, args, res, mounts), labels_, inputs.replicas, volumes),
            service(inputs, inputs.name, labels_),
        ]
    scaling = inputs.spec.scaling
    objects: list[dict[str, Any]] = []
    for role, kv_role in (("decode", "kv_consumer"), ("prefill", "kv_producer")):
        component = getattr(scaling, role) if scaling else None
        gpu = component.gpu if component and component.gpu else None
        if component is None or gpu is None or gpu.count <= 0:
            raise RenderError(f"llm-d disaggregated serving requires scaling.{role} with gpu.count > 0")
        name = child_name(inputs.name, f"-{role}")  # a Service name and a label value: 63 characters at most
        args = vllm_args(inputs, networking=False, prefix_off_flag=True)
        args = [a for i, a in enumerate(args) if not (a == "--tensor-parallel-size" or (i and args[i - 1] == "--tensor-parallel-size"))]
        if gpu.count > 1:
            args += ["--tensor-parallel-size", str(gpu.count)]
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "PyNcclConnector", "kv_role": kv_role})]
        res = resources(gpu.count, gpu.type or inputs.gpu_type, component.memory, None)
        labels_ = {"airunway.ai/deployment": name, "app": name}
        objects.append(deployment(inputs, name, _container(inputs, args, res, mounts), labels_, component.replicas, volumes, {ROLE: role}))
        objects.append(service(inputs, name, labels_, {ROLE: role}))
    return objects


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": inputs.name if inputs.mode == "aggregated" else child_name(inputs.name, "-decode"), "port": PORT}
