"""What every provider's rendering shares: labels, env, resources, engine flags, overrides."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.modeldeployment import DEFAULT_GPU_TYPE, ModelDeployment
from contracts.objects import DEPLOYMENT, ENGINE_TYPE, MODEL_DEPLOYMENT, MODEL_SOURCE, managed_labels, metadata
from contracts.pipeline import StoragePlanned
from contracts.rules.modeldeployment import ARG_KEY, flag_key, reserved_vllm_flag, reserved_vllm_flag_message
from contracts.subjects import Key

HF_TOKEN_KEY = "HF_TOKEN"


class RenderError(Exception):
    """The spec cannot be rendered for this provider; the message says what to change."""


@dataclass(frozen=True)
class Inputs:
    key: Key
    uid: str
    md: ModelDeployment
    engine: str
    storage: StoragePlanned | None = None
    gateway_available: bool = False
    # provider settings from the workload service's environment, read at start-up (KAITO's AIRUNWAY_KAITO_*)
    settings: Mapping[str, str] = field(default_factory=dict)
    default_image: str = ""  # Direct vLLM: its default image as resolved (by digest); "" for the default tag
    scaled: int | None = None  # an autoscaled deployment's count (the scaler's, services/workload/decide.py); None: the spec's

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def spec(self) -> Any:
        return self.md.spec

    @property
    def mode(self) -> str:
        return self.spec.serving.mode if self.spec.serving else "aggregated"

    @property
    def gpus(self) -> int:
        return self.spec.resources.gpu.count if self.spec.resources and self.spec.resources.gpu else 0

    @property
    def gpu_type(self) -> str:
        return (self.spec.resources.gpu.type if self.spec.resources and self.spec.resources.gpu else None) or DEFAULT_GPU_TYPE

    @property
    def replicas(self) -> int:
        """`scaling.replicas`, 0 included: a deployment scaled to zero runs no pod (AI Runway renders 1); an
        autoscaled one's, the count the scaler decided."""
        if self.scaled is not None:
            return self.scaled
        return self.spec.scaling.replicas if self.spec.scaling else 1

    def image(self, default: str) -> str:
        engine_image = self.spec.engine.image if self.spec.engine else None
        return engine_image or self.spec.image or default


def labels(inputs: Inputs) -> dict[str, str]:
    return {**managed_labels(), DEPLOYMENT: inputs.name, ENGINE_TYPE: inputs.engine, MODEL_SOURCE: inputs.spec.model.source}


def main_metadata(inputs: Inputs, name: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The metadata of a provider's main object (Deployment, Workspace, RayService): Jetway's labels over the
    user's pod-template ones, and the pod-template annotations, as AI Runway writes them."""
    labels_ = {**template_labels(inputs), **labels(inputs), **(extra_labels or {})}
    return metadata(name, inputs.key, inputs.uid, labels_, pod_annotations(inputs) or None)


def template_labels(inputs: Inputs) -> dict[str, str]:
    """The user's pod-template labels, which AI Runway also copies onto the Deployment's and RayService's
    metadata; they go first there, so Jetway's own labels (the ownership guard) cannot be replaced."""
    template = inputs.spec.podTemplate.metadata if inputs.spec.podTemplate and inputs.spec.podTemplate.metadata else None
    return dict(template.labels or {}) if template else {}


def selector(name: str) -> dict[str, str]:
    return {DEPLOYMENT: name, "app": name}


def pod_labels(inputs: Inputs, selector_labels: dict[str, str]) -> dict[str, str]:
    """The user's pod labels, then ours: selectors and the InferencePool label cannot be overridden."""
    return {**template_labels(inputs), **selector_labels, MODEL_DEPLOYMENT: inputs.name}


def pod_annotations(inputs: Inputs) -> dict[str, str]:
    template = inputs.spec.podTemplate.metadata if inputs.spec.podTemplate and inputs.spec.podTemplate.metadata else None
    return dict(template.annotations or {}) if template else {}


def env(inputs: Inputs) -> list[dict[str, Any]]:
    """spec.env (valueFrom wins over value), HF_TOKEN from the named Secret, HF_HOME at the model cache."""
    secret = inputs.spec.secrets.huggingFaceToken if inputs.spec.secrets else None
    out: list[dict[str, Any]] = []
    for variable in inputs.spec.env or []:
        if secret and variable.name == HF_TOKEN_KEY:
            continue
        if variable.valueFrom is not None:
            out.append({"name": variable.name, "valueFrom": variable.valueFrom.wire()})
        else:
            out.append({"name": variable.name, "value": variable.value or ""})
    if secret:
        out.append({"name": HF_TOKEN_KEY, "valueFrom": {"secretKeyRef": {"name": secret, "key": HF_TOKEN_KEY}}})
    if inputs.storage and inputs.storage.model_cache and not any(v["name"] == "HF_HOME" for v in out):
        out.append({"name": "HF_HOME", "value": inputs.storage.model_cache})
    return out


def resources(gpus: int, gpu_type: str, memory: str | None, cpu: str | None) -> dict[str, Any]:
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if gpus > 0:
        limits[gpu_type] = requests[gpu_type] = str(gpus)
    if memory:
        limits["memory"] = requests["memory"] = memory
    if cpu:
        requests["cpu"] = cpu
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def main_resources(inputs: Inputs) -> dict[str, Any]:
    res = inputs.spec.resources
    return resources(inputs.gpus, inputs.gpu_type, res.memory if res else None, res.cpu if res else None)


def scheduling(inputs: Inputs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if inputs.spec.nodeSelector:
        out["nodeSelector"] = dict(inputs.spec.nodeSelector)
    if inputs.spec.tolerations:
        out["tolerations"] = [t.wire() for t in inputs.spec.tolerations]
    return out


def storage_volumes(inputs: Inputs) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if inputs.storage is None:
        return [], []
    return [dict(v) for v in inputs.storage.volumes], [dict(m) for m in inputs.storage.mounts]


def vllm_args(
    inputs: Inputs,
    *,
    networking: bool,
    prefix_off_flag: bool,
    dedupe: bool = True,
    gpus: int | None = None,
    kv_transfer: str | None = None,
) -> list[str]:
    """vLLM's flags in AI Runway's order; a flag the user also set in args or extraArgs is theirs.

    `gpus` is the tensor-parallel size when it is not `spec.resources.gpu.count` (a disaggregated component's);
    `kv_transfer` is the `--kv-transfer-config` of a disaggregated role. The checks are admission's, repeated
    because a render must not emit what admission refuses (AI Runway's transformers repeat them too)."""
    engine = inputs.spec.engine
    args = dict(engine.args or {}) if engine else {}
    extra = list(engine.extraArgs or []) if engine else []
    if networking:
        for key in args:
            if reserved_vllm_flag(key):
                raise RenderError(reserved_vllm_flag_message(key, extra=False))
        for token in extra:
            if reserved_vllm_flag(flag_key(token)):
                raise RenderError(reserved_vllm_flag_message(token, extra=True))
    for token in extra:
        if flag_key(token) in args:
            raise RenderError(
                f'launch flag "{flag_key(token)}" is set in both spec.engine.args and spec.engine.extraArgs ("{token}"); '
                "set it in exactly one place so the engine does not receive conflicting values"
            )
    user = set(args) | {k for k in (flag_key(t) for t in extra) if k}
    derived: list[tuple[str, str | None]] = []
    if networking:
        derived += [("host", "0.0.0.0"), ("port", "8000")]
    if inputs.spec.model.id:
        derived.append(("model", inputs.spec.model.id))
    if inputs.spec.model.servedName:
        derived.append(("served-model-name", inputs.spec.model.servedName))
    if engine and engine.contextLength:
        derived.append(("max-model-len", str(engine.contextLength)))
    if engine and engine.trustRemoteCode:
        derived.append(("trust-remote-code", None))
    if engine and engine.enforceEager:
        derived.append(("enforce-eager", None))
    if engine is None or engine.enablePrefixCaching:
        derived.append(("enable-prefix-caching", None))
    elif prefix_off_flag:
        derived.append(("no-enable-prefix-caching", None))
    tensor_parallel = inputs.gpus if gpus is None else gpus
    if tensor_parallel > 1:
        derived.append(("tensor-parallel-size", str(tensor_parallel)))
    if kv_transfer is not None:
        derived.append(("kv-transfer-config", kv_transfer))
    out: list[str] = []
    for key, value in derived:
        if dedupe and key in user:
            continue
        out += [f"--{key}"] if value is None else [f"--{key}", value]
    for key in sorted(args):
        if not ARG_KEY.match(key):
            raise RenderError(f'invalid engine arg key "{key}": must contain only alphanumeric characters, hyphens, and underscores')
        out += [f"--{key}"] if args[key] == "" else [f"--{key}", args[key]]
    return out + extra


SECURITY_SECTIONS = ("workload", "container")  # the spec's validated security-context sections
REFUSED_TOP_LEVEL = ("apiVersion", "kind", "metadata", "status")  # what no provider lets overrides replace


def free_overrides(inputs: Inputs, typed: tuple[str, ...] = ()) -> dict[str, Any]:
    """AI Runway's free-form part of `spec.provider.overrides`: every key but the security sections (merged by
    `apply_overrides`) and the provider's own typed keys (Dynamo's `routerMode`, `frontend`, `epp`)."""
    overrides = inputs.spec.provider.overrides if inputs.spec.provider else None
    return {k: v for k, v in (overrides or {}).items() if k not in SECURITY_SECTIONS and k not in typed}


def deep_merge(into: dict[str, Any], more: dict[str, Any], *, null_deletes: bool = False) -> dict[str, Any]:
    """AI Runway's merge: maps merge recursively, any other value replaces (lists included). With
    `null_deletes` (KAITO), a null removes the key instead of writing null."""
    for key, value in more.items():
        if null_deletes and value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = deep_merge(dict(into[key]), value, null_deletes=null_deletes)
        else:
            into[key] = copy.deepcopy(value)
    return into


def merge_overrides(obj: dict[str, Any], inputs: Inputs, *, typed: tuple[str, ...] = (), null_deletes: bool = False) -> None:
    """Deep-merge the free-form overrides into the provider's main object, last, as AI Runway does.

    Admission already refused the blocked keys at any depth; the top-level check is repeated here because
    an offline render must not write another object's identity either."""
    free = free_overrides(inputs, typed)
    for key in REFUSED_TOP_LEVEL:
        if key in free:
            raise RenderError(f'overriding "{key}" is not allowed')
    deep_merge(obj, free, null_deletes=null_deletes)


def apply_overrides(inputs: Inputs, pod_spec: dict[str, Any], main: dict[str, Any], containers: list[dict[str, Any]]) -> None:
    """Merge the allow-listed security overrides last: `workload` first, then `container`.

    `podSecurityContext` goes to the pod, `securityContext` to the main container (from the
    `workload` section, to every container). Admission already refused anything else.
    """
    overrides = inputs.spec.provider.overrides if inputs.spec.provider else None
    if not overrides:
        return
    for section in ("workload", "container"):
        body = overrides.get(section) or {}
        if "podSecurityContext" in body:
            pod_spec["securityContext"] = deep_merge(dict(pod_spec.get("securityContext") or {}), body["podSecurityContext"])
        if "securityContext" in body:
            for container in containers if section == "workload" else [main]:
                container["securityContext"] = deep_merge(dict(container.get("securityContext") or {}), body["securityContext"])
