"""llm-d: vLLM Deployments and Services in the llm-d shape; prefill and decode pairs when disaggregated."""

from __future__ import annotations

from typing import Any

from contracts.objects import DEPLOYMENT, child_name
from services.workload.render.common import Inputs, RenderError, env, free_overrides, resources, storage_volumes, vllm_args
from services.workload.render.vllm import PORT, deployment, probe, service

DEFAULT_IMAGE = "vllm/vllm-openai:v0.9.1"
ROLE = "llm-d.ai/role"
# vLLM's KV transfer between the roles, written as AI Runway writes it
KV_TRANSFER = {
    "prefill": '{"kv_connector":"PyNcclConnector","kv_role":"kv_producer"}',
    "decode": '{"kv_connector":"PyNcclConnector","kv_role":"kv_consumer"}',
}


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
            raise RenderError("llm-d provider requires GPU resources (spec.resources.gpu.count > 0)")
        args = vllm_args(inputs, networking=False, prefix_off_flag=True)
        res = resources(inputs.gpus, inputs.gpu_type, inputs.spec.resources.memory, inputs.spec.resources.cpu)
        labels_ = {DEPLOYMENT: inputs.name, "app": inputs.name}
        return [
            deployment(inputs, inputs.name, _container(inputs, args, res, mounts), labels_, inputs.replicas, volumes),
            service(inputs, inputs.name, labels_),
        ]
    scaling = inputs.spec.scaling
    if scaling is None or scaling.prefill is None:
        raise RenderError("spec.scaling.prefill is required for disaggregated serving mode")
    if scaling.decode is None:
        raise RenderError("spec.scaling.decode is required for disaggregated serving mode")
    deployments: list[dict[str, Any]] = []
    services: list[dict[str, Any]] = []
    for role in ("prefill", "decode"):
        gpu = getattr(scaling, role).gpu
        if gpu is None or gpu.count <= 0:
            raise RenderError(f"llm-d provider requires GPU resources for {role} (spec.scaling.{role}.gpu.count > 0)")
    # AI Runway's order: both Deployments, the decode one first (its status is the deployment's), then both Services.
    for role in ("decode", "prefill"):
        component = getattr(scaling, role)
        gpu = component.gpu
        name = child_name(inputs.name, f"-{role}")  # a Service name and a label value: 63 characters at most
        args = vllm_args(inputs, networking=False, prefix_off_flag=True, gpus=gpu.count, kv_transfer=KV_TRANSFER[role])
        res = resources(gpu.count, gpu.type or inputs.gpu_type, component.memory, None)
        # every role's pods carry the ModelDeployment's name; `app` tells the roles apart
        labels_ = {DEPLOYMENT: inputs.name, "app": name}
        deployments.append(
            deployment(inputs, name, _container(inputs, args, res, mounts), labels_, component.replicas, volumes, {ROLE: role})
        )
        services.append(service(inputs, name, labels_, {ROLE: role}))
    return deployments + services


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": inputs.name if inputs.mode == "aggregated" else child_name(inputs.name, "-decode"), "port": PORT}
