"""NVIDIA Dynamo: a DynamoGraphDeployment; one worker (aggregated) or prefill and decode workers."""

from __future__ import annotations

import json
from typing import Any

from contracts.objects import ENGINE_TYPE, MODEL_DEPLOYMENT, managed_labels, metadata
from services.workload.render.common import Inputs, RenderError, apply_overrides, env, pod_labels, resources, scheduling

DYNAMO = "1.1.1"
IMAGES = {
    "vllm": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO}",
    "sglang": f"nvcr.io/nvidia/ai-dynamo/sglang-runtime:{DYNAMO}",
    "trtllm": f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{DYNAMO}",
}
EPP_IMAGE = f"nvcr.io/nvidia/ai-dynamo/dynamo-frontend:{DYNAMO}"
WORKER = {"vllm": "Vllm", "sglang": "Sglang", "trtllm": "Trtllm"}


def model_label(model_id: str) -> str:
    """A model id as a label value: at most 63 characters of [A-Za-z0-9-_.]."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)[:63]
    return cleaned.strip("-_.")


def engine_args(inputs: Inputs) -> list[str]:
    spec, engine = inputs.spec, inputs.spec.engine
    model_flag = "--model" if inputs.engine == "vllm" else "--model-path"
    args = [model_flag, spec.model.id or ""]
    if spec.model.servedName:
        args += ["--served-model-name", spec.model.servedName]
    if engine and engine.contextLength and inputs.engine != "trtllm":
        args += ["--max-model-len" if inputs.engine == "vllm" else "--context-length", str(engine.contextLength)]
    if inputs.engine in ("vllm", "sglang") and engine is not None:
        if engine.trustRemoteCode:
            args.append("--trust-remote-code")
        if inputs.engine == "vllm":
            args.append("--enable-prefix-caching" if engine.enablePrefixCaching else "--no-enable-prefix-caching")
            if engine.enforceEager:
                args.append("--enforce-eager")
        else:
            if not engine.enablePrefixCaching:
                args.append("--disable-radix-cache")
            if engine.enforceEager:
                args.append("--disable-cuda-graph")
    for key in sorted((engine.args or {}) if engine else {}):
        if inputs.engine == "vllm" and key == "connector":
            continue
        value = engine.args[key]
        args += [f"--{key}"] if value == "" else [f"--{key}", value]
    return args + list(engine.extraArgs or [] if engine else [])


def _main(inputs: Inputs, args: list[str], extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "image": inputs.image(IMAGES[inputs.engine]),
        "command": ["python3", "-m", f"dynamo.{inputs.engine}"],
        "args": args,
    }
    variables = env(inputs) + extra_env
    if variables:
        container["env"] = variables
    return container


def _worker(
    inputs: Inputs, replicas: int, gpus: int, memory: str | None, args: list[str], sub: str | None, extra_env: list[dict[str, Any]]
) -> dict[str, Any]:
    main = _main(inputs, args, extra_env)
    pod: dict[str, Any] = {"mainContainer": main, **scheduling(inputs)}
    pod_meta = {"labels": pod_labels(inputs, {}), "annotations": {}}
    apply_overrides(inputs, pod, main, [main])
    limits = resources(gpus, "gpu", memory, None)
    worker: dict[str, Any] = {
        "componentType": "worker",
        "replicas": replicas,
        "resources": {"limits": limits.get("limits", {}), "requests": {"gpu": str(gpus)}},
        "extraPodMetadata": pod_meta,
        "extraPodSpec": pod,
    }
    if sub:
        worker["subComponentType"] = sub
    if inputs.gateway_available:
        sidecar_args = ["-m", "dynamo.frontend"] + ([] if sub else ["--router-mode", "direct"])
        worker["frontendSidecar"] = {"image": inputs.image(IMAGES[inputs.engine]), "args": sidecar_args}
    if inputs.storage is not None and inputs.storage.volumes:
        # Dynamo's VolumeMount has name, mountPoint and useAsCompilationCache only: a readOnly there is a field its
        # schema refuses under strict validation (and prunes otherwise), so the claim's readOnly cannot be passed on.
        worker["volumeMounts"] = [
            {
                "name": v["persistentVolumeClaim"]["claimName"],
                "mountPoint": m["mountPath"],
                **({"useAsCompilationCache": True} if m["mountPath"] == "/compilation-cache" else {}),
            }
            for v, m in zip(inputs.storage.volumes, inputs.storage.mounts, strict=True)
        ]
    return worker


def _epp(disaggregated: bool) -> dict[str, Any]:
    plugins: list[dict[str, Any]] = [
        {"type": "disagg-profile-handler"},
        {
            "name": "decode-filter",
            "type": "label-filter",
            "parameters": {"label": "nvidia.com/dynamo-sub-component-type", "validValues": ["decode"], "allowsNoLabel": not disaggregated},
        },
        {"name": "picker", "type": "max-score-picker"},
        {"name": "dyn-decode", "type": "dyn-decode-scorer"},
    ]
    profiles = [
        {
            "name": "decode",
            "plugins": [
                {"pluginRef": "decode-filter", "weight": 1},
                {"pluginRef": "dyn-decode", "weight": 1},
                {"pluginRef": "picker", "weight": 1},
            ],
        }
    ]
    if disaggregated:
        plugins += [
            {
                "name": "prefill-filter",
                "type": "label-filter",
                "parameters": {"label": "nvidia.com/dynamo-sub-component-type", "validValues": ["prefill"], "allowsNoLabel": False},
            },
            {"name": "dyn-prefill", "type": "dyn-prefill-scorer"},
        ]
        profiles.insert(
            0,
            {
                "name": "prefill",
                "plugins": [
                    {"pluginRef": "prefill-filter", "weight": 1},
                    {"pluginRef": "dyn-prefill", "weight": 1},
                    {"pluginRef": "picker", "weight": 1},
                ],
            },
        )
    env_ = [
        {"name": "DYN_DECODE_FALLBACK", "value": "false" if disaggregated else "true"},
        {"name": "DYN_ENFORCE_DISAGG", "value": "true" if disaggregated else "false"},
    ]
    return {
        "componentType": "epp",
        "replicas": 1,
        "extraPodSpec": {"mainContainer": {"image": EPP_IMAGE, "env": env_}},
        "eppConfig": {"config": {"plugins": plugins, "schedulingProfiles": profiles}},
    }


def render(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.engine not in IMAGES:
        raise RenderError(f"Dynamo does not support {inputs.engine} engine")
    spec = inputs.spec
    disaggregated = inputs.mode == "disaggregated"
    if not disaggregated and inputs.gpus <= 0:
        raise RenderError("Dynamo requires GPU (set resources.gpu.count > 0)")
    args = engine_args(inputs)
    services: dict[str, Any] = {}
    if inputs.gateway_available:
        services["Epp"] = _epp(disaggregated)
    else:
        secret = spec.secrets.huggingFaceToken if spec.secrets else None
        frontend: dict[str, Any] = {
            "componentType": "frontend",
            "replicas": 1,
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
            "extraPodSpec": {
                "mainContainer": {
                    "image": inputs.image(IMAGES[inputs.engine]),
                    "env": [{"name": "DYN_ROUTER_MODE", "value": "round-robin"}],
                }
            },
        }
        if secret:
            frontend["envFromSecret"] = secret
        services["Frontend"] = frontend
    worker = WORKER[inputs.engine]
    if not disaggregated:
        memory = spec.resources.memory if spec.resources else None
        services[f"{worker}Worker"] = _worker(inputs, inputs.replicas, inputs.gpus, memory, args, None, [])
    else:
        for role in ("prefill", "decode"):
            component = getattr(spec.scaling, role) if spec.scaling else None
            if component is None or component.gpu is None or component.gpu.count <= 0:
                raise RenderError(f"Dynamo disaggregated serving requires scaling.{role} with gpu.count > 0")
            role_args = [*args, "--disaggregation-mode", role]
            extra_env: list[dict[str, Any]] = []
            if inputs.engine == "vllm":
                role_args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
                extra_env = [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
            services[f"{worker}{role.capitalize()}Worker"] = _worker(
                inputs, component.replicas, component.gpu.count, component.memory, role_args, role, extra_env
            )
    dgd_labels = {
        **managed_labels(),
        MODEL_DEPLOYMENT: inputs.name,
        "airunway.ai/model-id": model_label(spec.model.id or ""),
        ENGINE_TYPE: inputs.engine,
    }
    body: dict[str, Any] = {"backendFramework": inputs.engine, "services": services}
    if inputs.storage is not None and inputs.storage.volumes:
        body["pvcs"] = [{"name": v["persistentVolumeClaim"]["claimName"], "create": False} for v in inputs.storage.volumes]
    return [
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoGraphDeployment",
            "metadata": metadata(inputs.name, inputs.key, inputs.uid, dgd_labels),
            "spec": body,
        }
    ]


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": f"{inputs.name}-frontend", "port": 8000}
