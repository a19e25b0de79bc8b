"""NVIDIA Dynamo: a DynamoGraphDeployment; one worker (aggregated) or prefill and decode workers.

In front of the workers, one of two things, as the Dynamo operator (1.1.x) takes them:
- with gateway integration on (`spec.gateway.enabled`, by default whenever the Inference Extension is
  served; never for the mocker): the endpoint picker `Epp`, for which the operator creates the
  InferencePool `<name>-pool`, and a frontend sidecar on every worker pod that serves the requests
  the picker routes to it;
- otherwise a standalone `Frontend` that routes to the workers itself (`DYN_ROUTER_MODE`).

The worker services are named `VllmWorker`, `VllmPrefillWorker` and `VllmDecodeWorker` whatever the
engine, as AI Runway names them. The mocker test backend (annotation
`airunway.ai/dynamo-test-backend: mocker`) swaps the engine for `python3 -m dynamo.mocker` on small CPU
requests, so the whole path runs without a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contracts.objects import ENGINE_TYPE, MODEL_DEPLOYMENT, managed_labels, metadata
from contracts.rules import dynamo as dynamo_rules
from contracts.rules.modeldeployment import volumes_of
from services.workload.render.common import (
    HF_TOKEN_KEY,
    Inputs,
    RenderError,
    apply_overrides,
    env,
    merge_overrides,
    pod_labels,
    scheduling,
)

DYNAMO = "1.1.1"
IMAGES = {
    "vllm": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO}",
    "sglang": f"nvcr.io/nvidia/ai-dynamo/sglang-runtime:{DYNAMO}",
    "trtllm": f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{DYNAMO}",
}
EPP_IMAGE = f"nvcr.io/nvidia/ai-dynamo/dynamo-frontend:{DYNAMO}"
SIDECAR_IMAGE = IMAGES["vllm"]  # the frontend sidecar's image, whatever the engine (AI Runway's, Dynamo's example)
MOCKER_IMAGE = f"nvcr.io/nvidia/ai-dynamo/dynamo-planner:{DYNAMO}"  # the only image with dynamo.mocker
MOCKER_CPU = "100m"
MOCKER_MEMORY = "256Mi"
KV_CACHE_BLOCK_SIZE = "16"  # vLLM's default block size, which the endpoint picker assumes
KV_TRANSFER_CONFIG = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))
WORKERS = {None: "VllmWorker", "prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker"}
# Dynamo's typed overrides (AI Runway's DynamoOverrides): consumed here, never merged into the DGD as they are
TYPED = ("routerMode", "frontend", "epp")


@dataclass(frozen=True)
class Overrides:
    """`spec.provider.overrides`' typed part; None leaves the default."""

    router_mode: str | None = None
    frontend_replicas: int | None = None
    frontend_cpu: str | None = None
    frontend_memory: str | None = None
    epp_replicas: int | None = None
    epp_image: str | None = None


def _section(overrides: dict[str, Any], name: str) -> dict[str, Any]:
    value = overrides.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RenderError(f'provider override "{name}" must be an object')
    return value


def _text(value: Any, path: str) -> str | None:
    if value is None or value == "":
        return None  # AI Runway treats an empty string as unset
    if not isinstance(value, str):
        raise RenderError(f'provider override "{path}" must be a string')
    return value


def _count(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RenderError(f'provider override "{path}" must be an integer')
    return value


def typed_overrides(inputs: Inputs) -> Overrides:
    overrides = (inputs.spec.provider.overrides if inputs.spec.provider else None) or {}
    frontend, epp = _section(overrides, "frontend"), _section(overrides, "epp")
    sizing = _section(frontend, "resources")
    return Overrides(
        router_mode=_text(overrides.get("routerMode"), "routerMode"),
        frontend_replicas=_count(frontend.get("replicas"), "frontend.replicas"),
        frontend_cpu=_text(sizing.get("cpu"), "frontend.resources.cpu"),
        frontend_memory=_text(sizing.get("memory"), "frontend.resources.memory"),
        epp_replicas=_count(epp.get("replicas"), "epp.replicas"),
        epp_image=_text(epp.get("image"), "epp.image"),
    )


def uses_gateway(inputs: Inputs) -> bool:
    """The Inference Extension path (`Epp` and frontend sidecars) rather than a standalone `Frontend`:
    `spec.gateway.enabled` when set, else whether the Inference Extension is served, as the gateway
    control plane decides; never for the mocker, whose Frontend needs no Inference Extension."""
    if dynamo_rules.mocker_requested(inputs.md):
        return False
    explicit = inputs.spec.gateway.enabled if inputs.spec.gateway else None
    return inputs.gateway_available if explicit is None else explicit


def model_label(model_id: str) -> str:
    """A model id as a label value: at most 63 characters of [A-Za-z0-9-_.]."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)[:63]
    return cleaned.strip("-_.")


def engine_args(inputs: Inputs) -> list[str]:
    """The engine's flags: the model, the served name, the context length, the engine's booleans (nothing
    when off: the engine's own default stands), `engine.args` sorted, then `engine.extraArgs`."""
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
            if engine.enablePrefixCaching:
                args.append("--enable-prefix-caching")
            if engine.enforceEager:
                args.append("--enforce-eager")
        elif engine.enforceEager:
            args.append("--disable-cuda-graph")  # SGLang's eager mode; its radix (prefix) cache is on by default
    for key in sorted((engine.args or {}) if engine else {}):
        if inputs.engine == "vllm" and key == "connector":
            continue  # consumed by Dynamo (NIXL), refused by vLLM
        value = engine.args[key]
        args += [f"--{key}"] if value == "" else [f"--{key}", value]
    return args + list(engine.extraArgs or [] if engine else [])


def mocker_args(inputs: Inputs) -> list[str]:
    model = inputs.spec.model
    return [
        "--model-path",
        model.id or "",
        "--model-name",
        model.servedName or model.id or "",
        "--speedup-ratio",
        "1000.0",
        "--num-gpu-blocks-override",
        "4096",
        "--block-size",
        KV_CACHE_BLOCK_SIZE,
        "--max-num-seqs",
        "64",
    ]


def _token(inputs: Inputs) -> str | None:
    return inputs.spec.secrets.huggingFaceToken if inputs.spec.secrets else None


def _resources(gpus: int, memory: str | None, cpu: str | None) -> dict[str, Any]:
    """Dynamo's shape: GPUs (as `gpu`) requested and limited, memory and CPU limited."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if gpus > 0:
        limits["gpu"] = requests["gpu"] = str(gpus)
    if memory:
        limits["memory"] = memory
    if cpu:
        limits["cpu"] = cpu
    return {"limits": limits, "requests": requests}


def _mocker_resources() -> dict[str, Any]:
    """Small CPU and memory, requested and limited alike (Guaranteed, never BestEffort), and no GPU."""
    return {"requests": {"cpu": MOCKER_CPU, "memory": MOCKER_MEMORY}, "limits": {"cpu": MOCKER_CPU, "memory": MOCKER_MEMORY}}


def _volume_mounts(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.storage is None or not inputs.storage.volumes:
        return []
    purposes = {v.name: v.purpose for v in volumes_of(inputs.md)}
    # Dynamo's VolumeMount has name, mountPoint and useAsCompilationCache only: a readOnly there is a field its
    # schema refuses under strict validation (and prunes otherwise), so the claim's readOnly cannot be passed on.
    return [
        {
            "name": v["persistentVolumeClaim"]["claimName"],
            "mountPoint": m["mountPath"],
            **({"useAsCompilationCache": True} if purposes.get(v["name"]) == "compilationCache" else {}),
        }
        for v, m in zip(inputs.storage.volumes, inputs.storage.mounts, strict=True)
    ]


def _worker(
    inputs: Inputs, role: str | None, replicas: int, resources: dict[str, Any], args: list[str], *, gateway: bool, mocker: bool
) -> dict[str, Any]:
    main: dict[str, Any] = {
        "image": MOCKER_IMAGE if mocker else inputs.image(IMAGES[inputs.engine]),
        "command": ["python3", "-m", "dynamo.mocker" if mocker else f"dynamo.{inputs.engine}"],
        "args": args,
    }
    token = _token(inputs)
    variables = [v for v in env(inputs) if not (token and v["name"] == HF_TOKEN_KEY)]  # the token comes by envFromSecret
    if inputs.engine == "vllm" and role is not None:
        # NIXL's side channel: each worker advertises its own pod's address
        variables.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if variables:
        main["env"] = variables
    pod: dict[str, Any] = {"mainContainer": main, **scheduling(inputs)}
    apply_overrides(inputs, pod, main, [main])
    worker: dict[str, Any] = {"componentType": "worker"}
    if role is not None:
        worker["subComponentType"] = role
    worker["replicas"] = replicas
    worker["resources"] = resources
    if token:
        worker["envFromSecret"] = token
    worker["extraPodMetadata"] = {"labels": pod_labels(inputs, {}), "annotations": {}}
    worker["extraPodSpec"] = pod
    if gateway:
        # aggregated: the sidecar serves its own pod's engine (the picker chose the pod); disaggregated: Dynamo's
        # default routing, so the prefill router can pair the workers
        sidecar: dict[str, Any] = {
            "image": SIDECAR_IMAGE,
            "args": ["-m", "dynamo.frontend"] + ([] if role else ["--router-mode", "direct"]),
        }
        if token:
            sidecar["envFromSecret"] = token
        worker["frontendSidecar"] = sidecar
    mounts = _volume_mounts(inputs)
    if mounts:
        worker["volumeMounts"] = mounts
    return worker


def _frontend(inputs: Inputs, overrides: Overrides, mocker: bool) -> dict[str, Any]:
    frontend: dict[str, Any] = {
        "componentType": "frontend",
        "replicas": 1 if overrides.frontend_replicas is None else overrides.frontend_replicas,
        "resources": {
            "requests": {
                "cpu": overrides.frontend_cpu or (MOCKER_CPU if mocker else "2"),
                "memory": overrides.frontend_memory or (MOCKER_MEMORY if mocker else "4Gi"),
            }
        },
        "extraPodSpec": {
            "mainContainer": {
                "image": MOCKER_IMAGE if mocker else inputs.image(IMAGES[inputs.engine]),
                "env": [{"name": "DYN_ROUTER_MODE", "value": overrides.router_mode or "round-robin"}],
            }
        },
    }
    token = _token(inputs)
    if token:
        frontend["envFromSecret"] = token
    return frontend


def _epp(disaggregated: bool, overrides: Overrides) -> dict[str, Any]:
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
        plugins.insert(
            1,
            {
                "name": "prefill-filter",
                "type": "label-filter",
                "parameters": {"label": "nvidia.com/dynamo-sub-component-type", "validValues": ["prefill"], "allowsNoLabel": False},
            },
        )
        plugins.insert(4, {"name": "dyn-prefill", "type": "dyn-prefill-scorer"})
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
        "replicas": 1 if overrides.epp_replicas is None else overrides.epp_replicas,
        "extraPodSpec": {"mainContainer": {"image": overrides.epp_image or EPP_IMAGE, "env": env_}},
        "eppConfig": {"config": {"plugins": plugins, "schedulingProfiles": profiles}},
    }


def render(inputs: Inputs) -> list[dict[str, Any]]:
    if inputs.engine not in IMAGES:
        raise RenderError(f"Dynamo does not support {inputs.engine} engine")
    mocker = dynamo_rules.mocker_requested(inputs.md)
    if mocker and inputs.engine != "vllm":
        raise RenderError("Dynamo mocker mode only supports the vllm engine")
    spec = inputs.spec
    disaggregated = inputs.mode == "disaggregated"
    if not mocker and not disaggregated and inputs.gpus <= 0:
        raise RenderError("Dynamo requires GPU (set resources.gpu.count > 0)")
    overrides = typed_overrides(inputs)
    gateway = uses_gateway(inputs)
    services: dict[str, Any] = {"Epp": _epp(disaggregated, overrides)} if gateway else {"Frontend": _frontend(inputs, overrides, mocker)}
    if not disaggregated:
        res = spec.resources
        resources = _mocker_resources() if mocker else _resources(inputs.gpus, res.memory if res else None, res.cpu if res else None)
        args = mocker_args(inputs) if mocker else engine_args(inputs)
        services[WORKERS[None]] = _worker(inputs, None, inputs.replicas, resources, args, gateway=gateway, mocker=mocker)
    else:
        for role in ("prefill", "decode"):
            component = getattr(spec.scaling, role) if spec.scaling else None
            if component is None and mocker:
                raise RenderError("Dynamo mocker disaggregated mode requires spec.scaling.prefill and spec.scaling.decode")
            if component is None or (not mocker and (component.gpu is None or component.gpu.count <= 0)):
                raise RenderError(f"Dynamo disaggregated serving requires scaling.{role} with gpu.count > 0")
            if mocker:
                resources, args = _mocker_resources(), mocker_args(inputs)  # no NIXL: the mocker transfers no KV cache
            else:
                resources = _resources(component.gpu.count if component.gpu else 0, component.memory, None)
                args = engine_args(inputs) + (["--kv-transfer-config", KV_TRANSFER_CONFIG] if inputs.engine == "vllm" else [])
            args = [*args, "--disaggregation-mode", role]
            services[WORKERS[role]] = _worker(inputs, role, component.replicas, resources, args, gateway=gateway, mocker=mocker)
    dgd_labels = {
        **managed_labels(),
        MODEL_DEPLOYMENT: inputs.name,
        "airunway.ai/model-id": model_label(spec.model.id or ""),
        ENGINE_TYPE: inputs.engine,
    }
    body: dict[str, Any] = {"backendFramework": inputs.engine, "services": services}
    if inputs.storage is not None and inputs.storage.volumes:
        body["pvcs"] = [{"name": v["persistentVolumeClaim"]["claimName"], "create": False} for v in inputs.storage.volumes]
    dgd: dict[str, Any] = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": metadata(inputs.name, inputs.key, inputs.uid, dgd_labels),
        "spec": body,
    }
    merge_overrides(dgd, inputs, typed=TYPED)
    return [dgd]


def endpoint(inputs: Inputs) -> dict[str, Any]:
    return {"service": f"{inputs.name}-frontend", "port": 8000}
