"""ModelDeployment: the defaults of the mutating webhook and the rules of the validating one."""

from __future__ import annotations

import re
from decimal import Decimal

from contracts.meta import is_dns1035_label, is_dns_subdomain
from contracts.modeldeployment import (
    DEFAULT_MOUNT_PATHS,
    GPUSpec,
    ModelDeployment,
    ResourceSpec,
    ScalingSpec,
    ServingSpec,
    StorageVolume,
)
from contracts.problems import PathPart, Problem, at
from contracts.quantity import parse_quantity
from contracts.rules import autoscaling as autoscaling_rules
from contracts.rules.dynamo import check as check_dynamo
from contracts.rules.overrides import check_overrides

SYSTEM_PATHS = ("/dev", "/proc", "/sys", "/etc", "/var/run")
MAX_GPUS = 64
MAX_REPLICAS = 32
MAX_CPU = Decimal(512)
MAX_MEMORY = parse_quantity("4Ti")
ARG_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
RESERVED_VLLM_FLAGS = ("host", "port")
# AI Runway's transformer words (providers/vllm/transformer.go), said by admission and the renderer alike
VLLM_NETWORKING = (
    "conflicts with Direct vLLM generated networking; Direct vLLM currently requires host 0.0.0.0 and port 8000 "
    "to keep the container, Service, and probes aligned"
)
DOWNLOAD_JOB_SUFFIX = "-model-download"
MAX_JOB_NAME = 63  # a Job's name becomes its pods' job-name label value
MAX_CLAIM_NAME = 253  # a PVC's name is a DNS subdomain


def blank(value: str | None) -> bool:
    return value is None or value == ""


def flag_key(token: str) -> str | None:
    """The flag a raw argument sets: `--max-model-len=8` → `max-model-len`; values → None."""
    if not token.startswith("--") or token.startswith("---") or len(token) == 2:
        return None
    return token[2:].split("=", 1)[0]


def reserved_vllm_flag(key: str | None) -> bool:
    """Whether a flag is one Direct vLLM owns, however it is written (`port`, `--port`, `--port=9000`)."""
    return key is not None and key.strip().lstrip("-").split("=", 1)[0].strip() in RESERVED_VLLM_FLAGS


def reserved_vllm_flag_message(written: str, *, extra: bool) -> str:
    """The rule a reserved host or port breaks, naming the args key or the extraArgs token as written."""
    return f'engine {"extraArg" if extra else "arg"} "{written}" {VLLM_NETWORKING}'


def resolved_claim_name(deployment: str, volume: StorageVolume) -> str:
    """The PVC a volume mounts: its claimName, else `<deployment>-<volume>`."""
    return volume.claimName or f"{deployment}-{volume.name}"


def volumes_of(md: ModelDeployment) -> list[StorageVolume]:
    storage = md.spec.model.storage
    return list(storage.volumes or []) if storage else []


def managed_model_cache(md: ModelDeployment) -> StorageVolume | None:
    """The writable model cache a Hugging Face model is downloaded into, if there is one."""
    if md.spec.model.source != "huggingface":
        return None
    for volume in volumes_of(md):
        if volume.purpose == "modelCache" and not volume.readOnly:
            return volume
    return None


def with_defaults(md: ModelDeployment) -> ModelDeployment:
    """The spec after the mutating webhook: what a user left out, filled the way AI Runway does."""
    md = md.model_copy(deep=True)
    spec = md.spec
    if spec.serving is None:
        spec.serving = ServingSpec()
    aggregated = spec.serving.mode == "aggregated"
    if aggregated and spec.scaling is None:
        spec.scaling = ScalingSpec()
    engine_type = spec.engine.type if spec.engine else None
    if aggregated and spec.resources is None and engine_type and engine_type != "llamacpp" and blank(spec.image):
        spec.resources = ResourceSpec(gpu=GPUSpec(count=1))
    for gpu in _gpus(md):
        if gpu.type == "":
            gpu.type = "nvidia.com/gpu"
    for volume in volumes_of(md):
        if volume.mountPath is None and volume.purpose in DEFAULT_MOUNT_PATHS:
            volume.mountPath = DEFAULT_MOUNT_PATHS[volume.purpose]
        if volume.size is not None:
            if blank(volume.claimName):
                volume.claimName = f"{md.metadata.name}-{volume.name}"
            if volume.accessMode is None:
                volume.accessMode = "ReadWriteMany"
    return md


def _gpus(md: ModelDeployment) -> list[GPUSpec]:
    spec = md.spec
    gpus = []
    if spec.resources and spec.resources.gpu:
        gpus.append(spec.resources.gpu)
    if spec.scaling:
        gpus += [c.gpu for c in (spec.scaling.prefill, spec.scaling.decode) if c and c.gpu]
    return gpus


def check(md: ModelDeployment, *, creating: bool = True) -> tuple[list[Problem], list[str]]:
    """Problems and warnings of a (defaulted) ModelDeployment, as admission reports them."""
    problems: list[Problem] = []
    warnings: list[str] = []
    spec = md.spec
    name = md.metadata.name
    if not creating:
        pass  # names never change; an existing object is not refused for its name
    elif "." in name:
        problems.append(
            at(["metadata", "name"], "name must not contain dots (dots are invalid in derived Kubernetes volume and service names)")
        )
    elif not is_dns1035_label(name):
        problems.append(
            at(
                ["metadata", "name"],
                "must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, "
                "at most 63 characters): it names the model's Service and labels",
            )
        )
    if spec.model.source == "huggingface" and blank(spec.model.id):
        problems.append(at(["spec", "model", "id"], "required when source is huggingface"))
    if spec.model.source == "custom" and not blank(spec.model.servedName):
        warnings.append("spec.model.servedName is only advisory when source is custom")
    engine = spec.engine
    if engine and not blank(engine.image) and not blank(spec.image) and engine.image != spec.image:
        problems.append(
            at(
                ["spec", "engine", "image"],
                f'spec.image "{spec.image}" conflicts with spec.engine.image "{engine.image}"; '
                "remove spec.image or set both fields to the same value (spec.engine.image is preferred)",
            )
        )
    if engine:
        problems += _check_engine_args(md)
        if engine.trustRemoteCode:
            warnings.append("trustRemoteCode=true allows execution of arbitrary code from HuggingFace")
        if engine.type == "trtllm" and engine.contextLength is not None:
            warnings.append("contextLength is ignored for TensorRT-LLM (must be configured at engine build time)")
    problems += check_storage(md, warnings)
    if spec.provider and spec.provider.overrides is not None:
        problems += check_overrides(spec.provider.overrides, ["spec", "provider", "overrides"])
    problems += _check_serving(md, warnings)
    scaled, scaling_warnings = autoscaling_rules.check(md)
    problems += scaled
    warnings += scaling_warnings
    problems += _check_ceilings(md)
    problems += _check_pod_fields(md)
    problems = check_dynamo(md, problems)
    return problems, warnings


def _check_engine_args(md: ModelDeployment) -> list[Problem]:
    engine = md.spec.engine
    assert engine is not None
    problems: list[Problem] = []
    args = engine.args or {}
    base: list[PathPart] = ["spec", "engine"]
    for key in args:
        if not ARG_KEY.match(key):
            problems.append(
                at(
                    [*base, "args", key],
                    f'invalid engine arg key "{key}": must contain only alphanumeric characters, hyphens, and underscores',
                )
            )
    for i, token in enumerate(engine.extraArgs or []):
        flag = flag_key(token)
        if flag is not None and flag in args:
            problems.append(
                at(
                    [*base, "extraArgs", i],
                    f'launch flag "{flag}" is set in both spec.engine.args and spec.engine.extraArgs '
                    f'("{token}"); set it in exactly one place so the engine does not receive conflicting values',
                )
            )
    provider = md.spec.provider.name if md.spec.provider else None
    if provider == "vllm":
        problems += reserved_vllm_flags(md)
    return problems


def reserved_vllm_flags(md: ModelDeployment) -> list[Problem]:
    """Direct vLLM owns --host and --port: the Service and probes depend on them."""
    engine = md.spec.engine
    problems: list[Problem] = []
    if engine is None:
        return problems
    for key in engine.args or {}:
        if key in RESERVED_VLLM_FLAGS:  # a dashed key is refused as an invalid key already
            problems.append(at(["spec", "engine", "args", key], reserved_vllm_flag_message(key, extra=False)))
    for i, token in enumerate(engine.extraArgs or []):
        if reserved_vllm_flag(flag_key(token)):
            problems.append(at(["spec", "engine", "extraArgs", i], reserved_vllm_flag_message(token, extra=True)))
    return problems


def check_storage(md: ModelDeployment, warnings: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    volumes = volumes_of(md)
    base: list[PathPart] = ["spec", "model", "storage", "volumes"]
    seen: dict[str, dict[str, int]] = {"name": {}, "mountPath": {}, "claimName": {}, "purpose": {}}
    for i, volume in enumerate(volumes):
        here = [*base, i]
        sized = volume.size is not None
        if not sized and blank(volume.claimName):
            problems.append(at([*here, "claimName"], "claimName is required when size is not set (must reference a pre-existing PVC)"))
        if sized and volume.readOnly:
            problems.append(
                at([*here, "readOnly"], "readOnly must not be true when size is set (controller-created PVCs need write access)")
            )
        if not sized and volume.accessMode is not None:
            problems.append(at([*here, "accessMode"], "accessMode is only applicable when size is set (controller-created PVCs)"))
        if not sized and volume.storageClassName is not None:
            problems.append(
                at([*here, "storageClassName"], "storageClassName is only applicable when size is set (controller-created PVCs)")
            )
        claim = resolved_claim_name(md.metadata.name, volume) if (sized or not blank(volume.claimName)) else None
        problems += _check_claim_name(md.metadata.name, volume, here)
        if volume.mountPath is None:
            if volume.purpose == "custom":
                problems.append(at([*here, "mountPath"], "mountPath is required when purpose is custom"))
        else:
            for system in SYSTEM_PATHS:
                if volume.mountPath == system or volume.mountPath.startswith(system + "/"):
                    problems.append(at([*here, "mountPath"], f"mountPath must not overlap with system path {system}"))
        for field, value in (("name", volume.name), ("mountPath", volume.mountPath), ("claimName", claim)):
            if value is None:
                continue
            if value in seen[field]:
                problems.append(at([*here, field], f'duplicate {_FIELD_WORDS[field]} "{value}" (also volumes[{seen[field][value]}])'))
            else:
                seen[field][value] = i
        if volume.purpose in ("modelCache", "compilationCache"):
            if volume.purpose in seen["purpose"]:
                problems.append(
                    at(
                        [*here, "purpose"],
                        f"at most one volume with purpose={volume.purpose} is allowed (also volumes[{seen['purpose'][volume.purpose]}])",
                    )
                )
            else:
                seen["purpose"][volume.purpose] = i
        if volume.readOnly and volume.purpose == "compilationCache":
            warnings.append(
                f'storage volume "{volume.name}" has purpose=compilationCache with readOnly=true; compilation cache requires write access'
            )
        if volume.readOnly and volume.purpose == "modelCache" and md.spec.model.source == "huggingface":
            warnings.append(
                f'storage volume "{volume.name}" has purpose=modelCache with readOnly=true; model download will be skipped '
                "(ensure the PVC already contains the model data)"
            )
    job = md.metadata.name + DOWNLOAD_JOB_SUFFIX
    if managed_model_cache(md) is not None and len(job) > MAX_JOB_NAME:
        problems.append(
            at(
                ["metadata", "name"],
                f'auto-generated download Job name "{job}" exceeds the {MAX_JOB_NAME}-character limit of a Job name '
                f"(it becomes its pods' job-name label; got {len(job)} characters); "
                f"use a ModelDeployment name of at most {MAX_JOB_NAME - len(DOWNLOAD_JOB_SUFFIX)} characters",
            )
        )
    return problems


def _check_claim_name(deployment: str, volume: StorageVolume, here: list[PathPart]) -> list[Problem]:
    """A controller-created PVC is always `<deployment>-<volume>`: any other claimName could make the
    controller take over, and on deletion remove, a PVC it did not create. A pre-existing one's name
    must be one Kubernetes can have."""
    if volume.size is None:
        if blank(volume.claimName) or is_dns_subdomain(volume.claimName or ""):
            return []
        return [at([*here, "claimName"], f'claim name "{volume.claimName}" must be a DNS subdomain of at most {MAX_CLAIM_NAME} characters')]
    generated = f"{deployment}-{volume.name}"
    if not blank(volume.claimName) and volume.claimName != generated:
        return [at([*here, "claimName"], f'claimName must not be set when size is set (auto-generated as "{generated}")')]
    if len(generated) > MAX_CLAIM_NAME:
        return [
            at(
                [*here, "name"],
                f'auto-generated PVC claim name "{generated}" exceeds the {MAX_CLAIM_NAME}-character Kubernetes name limit '
                f"(got {len(generated)} characters); use a shorter ModelDeployment or volume name",
            )
        ]
    if not is_dns_subdomain(generated):
        return [at([*here, "name"], f'claim name "{generated}" must be a DNS subdomain of at most {MAX_CLAIM_NAME} characters')]
    return []


_FIELD_WORDS = {"name": "volume name", "mountPath": "mount path", "claimName": "claim name"}


def _check_serving(md: ModelDeployment, warnings: list[str]) -> list[Problem]:
    spec = md.spec
    problems: list[Problem] = []
    mode = spec.serving.mode if spec.serving else "aggregated"
    scaling = spec.scaling
    if mode == "disaggregated":
        if spec.resources and spec.resources.gpu and spec.resources.gpu.count > 0:
            problems.append(
                at(["spec", "resources", "gpu"], "cannot specify both resources.gpu and scaling.prefill/decode in disaggregated mode")
            )
        if scaling is None or (scaling.prefill is None and scaling.decode is None):
            # both missing: one problem with AI Runway's reconciler message, not one per component
            problems.append(at(["spec", "scaling"], "disaggregated mode requires scaling.prefill and scaling.decode"))
            return problems
        for part in ("prefill", "decode"):
            component = getattr(scaling, part)
            if component is None:
                problems.append(at(["spec", "scaling", part], f"disaggregated mode requires scaling.{part}"))
            elif component.gpu is None or component.gpu.count <= 0:
                problems.append(at(["spec", "scaling", part, "gpu", "count"], f"disaggregated mode requires scaling.{part}.gpu.count > 0"))
    elif scaling and (scaling.prefill or scaling.decode):
        warnings.append("spec.scaling.prefill/decode are ignored unless serving.mode is disaggregated")
    return problems


def _check_ceilings(md: ModelDeployment) -> list[Problem]:
    spec = md.spec
    problems: list[Problem] = []

    def ceiling(path: list[PathPart], value: int | Decimal, limit: int | Decimal, shown: str) -> None:
        if value > limit:
            problems.append(at(path, f"exceeds maximum allowed ({shown})"))

    if spec.resources:
        if spec.resources.gpu:
            ceiling(["spec", "resources", "gpu", "count"], spec.resources.gpu.count, MAX_GPUS, str(MAX_GPUS))
        if spec.resources.cpu is not None:
            ceiling(["spec", "resources", "cpu"], parse_quantity(spec.resources.cpu), MAX_CPU, "512")
        if spec.resources.memory is not None:
            ceiling(["spec", "resources", "memory"], parse_quantity(spec.resources.memory), MAX_MEMORY, "4Ti")
    if spec.scaling:
        ceiling(["spec", "scaling", "replicas"], spec.scaling.replicas, MAX_REPLICAS, str(MAX_REPLICAS))
        for part in ("prefill", "decode"):
            component = getattr(spec.scaling, part)
            if component is None:
                continue
            ceiling(["spec", "scaling", part, "replicas"], component.replicas, MAX_REPLICAS, str(MAX_REPLICAS))
            if component.gpu:
                ceiling(["spec", "scaling", part, "gpu", "count"], component.gpu.count, MAX_GPUS, str(MAX_GPUS))
            if component.memory is not None:
                ceiling(["spec", "scaling", part, "memory"], parse_quantity(component.memory), MAX_MEMORY, "4Ti")
    return problems


def _check_pod_fields(md: ModelDeployment) -> list[Problem]:
    spec = md.spec
    problems: list[Problem] = []
    for i, env in enumerate(spec.env or []):
        source = env.valueFrom
        if source is not None:
            chosen = [n for n in ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef") if getattr(source, n) is not None]
            if len(chosen) != 1:
                problems.append(
                    at(["spec", "env", i, "valueFrom"], "must set exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef")
                )
    for i, toleration in enumerate(spec.tolerations or []):
        if toleration.operator == "Exists" and not blank(toleration.value):
            problems.append(at(["spec", "tolerations", i, "value"], "must be empty when operator is Exists"))
        if blank(toleration.key) and toleration.operator != "Exists":
            problems.append(at(["spec", "tolerations", i, "operator"], "must be Exists when key is empty"))
    return problems


def check_update(old: ModelDeployment, new: ModelDeployment) -> list[Problem]:
    """Update-time immutability: identity fields and controller-created storage."""
    problems: list[Problem] = []

    def immutable(path: list[PathPart], before: object, after: object) -> None:
        if before != after:
            field = ".".join(str(p) for p in path[1:])
            problems.append(at(path, f"{field} is immutable (changing it requires delete and recreate)"))

    immutable(["spec", "model", "id"], old.spec.model.id or "", new.spec.model.id or "")
    immutable(["spec", "model", "source"], old.spec.model.source, new.spec.model.source)
    old_engine = old.spec.engine.type if old.spec.engine else None
    new_engine = new.spec.engine.type if new.spec.engine else None
    if old_engine and new_engine:
        immutable(["spec", "engine", "type"], old_engine, new_engine)
    problems += check_provider_switch(_effective_provider(old), new)
    old_mode = old.spec.serving.mode if old.spec.serving else "aggregated"
    new_mode = new.spec.serving.mode if new.spec.serving else "aggregated"
    immutable(["spec", "serving", "mode"], old_mode, new_mode)
    new_volumes = {v.name: v for v in volumes_of(new)}
    for volume in volumes_of(old):
        if volume.size is None:
            continue
        index = next((i for i, v in enumerate(volumes_of(new)) if v.name == volume.name), None)
        if index is None:
            problems.append(
                at(
                    ["spec", "model", "storage", "volumes"],
                    f'managed storage volume "{volume.name}" cannot be removed (it has an '
                    "associated PVC; delete the ModelDeployment to clean up managed storage)",
                )
            )
        elif not _same_managed_volume(volume, new_volumes[volume.name]):
            problems.append(
                at(
                    ["spec", "model", "storage", "volumes", index],
                    "managed storage volume is immutable once created (delete the ModelDeployment to change managed storage configuration)",
                )
            )
    return problems


def _same_managed_volume(a: StorageVolume, b: StorageVolume) -> bool:
    if b.size is None or parse_quantity(a.size or "0") != parse_quantity(b.size):
        return False
    fields = ("name", "claimName", "mountPath", "purpose", "readOnly", "accessMode", "storageClassName")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def _effective_provider(md: ModelDeployment) -> str | None:
    """The provider a ModelDeployment is pinned to: its spec's, else the one selection recorded in status."""
    if md.spec.provider and md.spec.provider.name:
        return md.spec.provider.name
    if md.status and md.status.provider and md.status.provider.name:
        return md.status.provider.name
    return None


def check_provider_switch(recorded: str | None, new: ModelDeployment) -> list[Problem]:
    """`spec.provider.name` may not move away from the provider already pinned (set in the old spec, or
    selected and recorded in status.provider.name): the old provider's objects would be orphaned, so AI
    Runway refuses it; delete and recreate instead. Clearing the name is no change (selection is sticky)."""
    wanted = new.spec.provider.name if new.spec.provider else None
    if recorded and wanted and wanted != recorded:
        return [at(["spec", "provider", "name"], "provider.name is immutable (changing it requires delete and recreate)")]
    return []
