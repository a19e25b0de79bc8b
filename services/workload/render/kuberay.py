"""KubeRay: a RayService serving the model with vLLM, a head group and GPU worker groups."""

from __future__ import annotations

from typing import Any

import yaml

from contracts.objects import MODEL_DEPLOYMENT
from services.workload.render.common import (
    Inputs,
    RenderError,
    apply_overrides,
    env,
    main_metadata,
    merge_overrides,
    pod_annotations,
    pod_labels,
    scheduling,
    storage_volumes,
)

DEFAULT_IMAGE = "rayproject/ray-llm:2.55.0-py311-cu128"


def engine_args(inputs: Inputs) -> str:
    spec, engine = inputs.spec, inputs.spec.engine
    args = ["--model", spec.model.id or ""]
    if engine and engine.contextLength:
        args += ["--max-model-len", str(engine.contextLength)]
    if spec.model.servedName:
        args += ["--served-model-name", spec.model.servedName]
    if engine and engine.trustRemoteCode:
        args.append("--trust-remote-code")
    if inputs.gpus > 1 and "tensor-parallel-size" not in ((engine.args or {}) if engine else {}):
        args += ["--tensor-parallel-size", str(inputs.gpus)]  # use every GPU of a worker (AI Runway leaves this out)
    for key in sorted((engine.args or {}) if engine else {}):
        value = engine.args[key]
        args += [f"--{key}"] if value == "" else [f"--{key}", value]
    return " ".join(args + list(engine.extraArgs or [] if engine else []))


def _pod(inputs: Inputs, name: str, image: str, limits: dict[str, str], extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, "resources": {"limits": limits}}
    variables = extra_env + env(inputs)
    if variables:
        container["env"] = variables
    volumes, mounts = storage_volumes(inputs)  # the model cache HF_HOME points at, on every Ray pod
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {"containers": [container], **scheduling(inputs)}
    if volumes:
        spec["volumes"] = volumes
    apply_overrides(inputs, spec, container, [container])
    return {"metadata": {"labels": pod_labels(inputs, {}), "annotations": pod_annotations(inputs)}, "spec": spec}


def replicas(inputs: Inputs) -> int:
    """Ray Serve refuses `num_replicas: 0` (a positive integer or "auto"), and the RayService would never
    serve, so `scaling.replicas: 0` renders one worker and one Serve replica, as AI Runway does."""
    return inputs.replicas if inputs.replicas > 0 else 1


def render(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.engine != "vllm":
        raise RenderError(f"KubeRay only supports vllm engine, got {inputs.engine}")
    spec = inputs.spec
    disaggregated = inputs.mode == "disaggregated"
    if not disaggregated and inputs.gpus <= 0:
        raise RenderError("KubeRay requires GPU (set resources.gpu.count > 0)")
    image = inputs.image(DEFAULT_IMAGE)
    memory = spec.resources.memory if spec.resources else None
    head_env = [{"name": "MODEL_ID", "value": spec.model.id or ""}, {"name": "VLLM_ENGINE_ARGS", "value": engine_args(inputs)}]
    head = {
        "rayStartParams": {"dashboard-host": "0.0.0.0"},
        "template": _pod(inputs, "ray-head", image, {"cpu": "4", "memory": memory or "16Gi"}, head_env),
    }
    groups = []
    if not disaggregated:
        groups.append(("gpu-workers", replicas(inputs), inputs.gpus, inputs.gpu_type, memory))
    else:
        for role in ("prefill", "decode"):
            component = getattr(spec.scaling, role) if spec.scaling else None
            if component is None or component.gpu is None or component.gpu.count <= 0:
                raise RenderError(f"KubeRay disaggregated serving requires scaling.{role} with gpu.count > 0")
            groups.append((f"{role}-workers", component.replicas, component.gpu.count, component.gpu.type, component.memory))
    workers = [
        {
            "groupName": group,
            "replicas": replicas,
            "minReplicas": replicas,
            "maxReplicas": replicas,
            "rayStartParams": {},
            "template": _pod(inputs, "ray-worker", image, {"memory": mem or "32Gi", gpu_type: str(gpus)}, []),
        }
        for group, replicas, gpus, gpu_type, mem in groups
    ]
    serve = {
        "applications": [
            {
                "name": "llm",
                "route_prefix": "/",
                "import_path": "vllm_serve:deployment",
                # one Serve replica per worker pod (AI Runway: scaling.replicas, disaggregated too); never 0
                "deployments": [{"name": "VLLMDeployment", "num_replicas": max(sum(g[1] for g in groups), 1)}],
            }
        ]
    }
    service: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": main_metadata(inputs, inputs.name, {MODEL_DEPLOYMENT: inputs.name}),
        "spec": {
            "serveConfigV2": yaml.safe_dump(serve, sort_keys=False),
            "rayClusterConfig": {"headGroupSpec": head, "workerGroupSpecs": workers},
        },
    }
    # AI Runway's KubeRay provider ignores overrides; Jetway merges them, last, as its other providers do
    merge_overrides(service, inputs)
    return [service]


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": f"{inputs.name}-serve-svc", "port": 8000}
