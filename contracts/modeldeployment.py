"""ModelDeployment (airunway.ai/v1alpha1): one model, served by one provider's workload."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from contracts.meta import (
    ABSOLUTE_PATH,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENV_VAR_NAME,
    LABEL_VALUE,
    Condition,
    ObjectMeta,
    OptionalQuantity,
    Quantity,
    WireModel,
)

EngineType = Literal["vllm", "sglang", "trtllm", "llamacpp"]
ServingMode = Literal["aggregated", "disaggregated"]
ModelSource = Literal["huggingface", "custom"]
VolumePurpose = Literal["modelCache", "compilationCache", "custom"]
AccessMode = Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"]
Phase = Literal["Pending", "Deploying", "Running", "Failed", "Terminating"]
APIFormat = Literal["openai-chat", "openai-responses", "anthropic-messages"]
AutoscalingSignal = Literal["waitingPerReplica", "inFlightPerReplica", "kvCacheUsage"]

ENGINE_PREFERENCE: tuple[EngineType, ...] = ("vllm", "sglang", "trtllm", "llamacpp")
DEFAULT_MOUNT_PATHS: dict[str, str] = {"modelCache": "/model-cache", "compilationCache": "/compilation-cache"}
DEFAULT_GPU_TYPE = "nvidia.com/gpu"


class StorageVolume(WireModel):
    name: Annotated[
        str,
        Field(pattern=DNS_LABEL, max_length=63, description="Unique volume identifier, a DNS label."),
    ]
    purpose: VolumePurpose = Field(
        default="custom",
        description="modelCache, compilationCache or custom. Controls mount path defaults and engine "
        "behaviour. Only one volume of each cache purpose is allowed.",
    )
    claimName: str | None = Field(
        default=None,
        description="A pre-existing PVC in the same namespace. Required when size is not set; "
        "defaults to <deployment>-<volume> when size is set.",
    )
    # bounded so that the API server's CEL cost estimate of the duplicate-path rule stays in budget
    mountPath: Annotated[str, Field(pattern=ABSOLUTE_PATH, max_length=4096)] | None = Field(
        default=None,
        description="Absolute path in the container. Required for custom; defaults to /model-cache "
        "or /compilation-cache for the cache purposes.",
    )
    readOnly: bool = Field(default=False, description="Mount the volume read-only.")
    size: Quantity | None = Field(default=None, description="Requested size (e.g. 100Gi). When set, the controller creates the PVC.")
    storageClassName: str | None = Field(
        default=None,
        description="StorageClass of a controller-created PVC. Omit for the cluster default; "
        '"" disables dynamic provisioning. Only with size.',
    )
    accessMode: AccessMode | None = Field(
        default=None, description="Access mode of a controller-created PVC; default ReadWriteMany. Only with size."
    )


class ModelStorage(WireModel):
    volumes: Annotated[list[StorageVolume], Field(max_length=8)] | None = Field(default=None, description="At most 8 volumes.")


class ModelSpec(WireModel):
    id: str | None = Field(default=None, description='Hugging Face model id, e.g. "Qwen/Qwen3-0.6B".')
    servedName: str | None = Field(default=None, description="API-facing model name.")
    source: ModelSource = Field(default="huggingface", description="huggingface or custom.")
    storage: ModelStorage | None = None


class EngineSpec(WireModel):
    type: EngineType | None = Field(default=None, description="vllm, sglang, trtllm or llamacpp; auto-selected when omitted.")
    image: str | None = Field(default=None, description="Engine image override; preferred for Direct vLLM.")
    contextLength: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="Maximum context length (vLLM --max-model-len, SGLang --context-length)."
    )
    trustRemoteCode: bool = Field(default=False, description="Allow remote Hugging Face model code.")
    enablePrefixCaching: bool = Field(default=True, description="Enable prefix caching where supported.")
    enforceEager: bool = Field(default=False, description="Force eager execution where supported.")
    args: dict[str, str] | None = Field(default=None, description='Named engine flags: --key value, or a bare --key for "".')
    extraArgs: list[str] | None = Field(default=None, description="Raw engine flags, appended verbatim.")


def _json_object(value: Any) -> Any:
    # AI Runway's wording, and never the value: overrides may hold data nobody expects in an error or a log.
    if value is not None and not isinstance(value, dict):
        raise ValueError("overrides must be a JSON object")
    return value


Overrides = Annotated[dict[str, Any] | None, BeforeValidator(_json_object)]


class ProviderSpec(WireModel):
    name: str | None = Field(default=None, description="Explicit provider selection.")
    overrides: Overrides = Field(
        default=None,
        description="Validated security-context overrides in the sections workload and container (each "
        "with podSecurityContext and securityContext); any other key is deep-merged into the provider's "
        "rendered object (maps merge, other values replace), except privilege and sizing keys at any depth.",
    )


class ServingSpec(WireModel):
    mode: ServingMode = Field(default="aggregated", description="aggregated or disaggregated.")


class GPUSpec(WireModel):
    count: Annotated[int, Field(ge=0)] = Field(default=0, description="GPUs per replica.")
    type: str = Field(default=DEFAULT_GPU_TYPE, description="Extended resource name of the GPU.")


class ResourceSpec(WireModel):
    gpu: GPUSpec | None = None
    memory: OptionalQuantity = None
    cpu: OptionalQuantity = None


class ComponentScaling(WireModel):
    replicas: Annotated[int, Field(ge=0)] = 1
    gpu: GPUSpec | None = None
    memory: OptionalQuantity = None


class AutoscalingSpec(WireModel):
    """Jetway's own field (docs/autoscaling.md): a range of replicas the scaler keeps the deployment in, following one
    load signal the router measures. A manifest without it behaves as it does under AI Runway."""

    minReplicas: Annotated[int, Field(ge=0, le=32)] = Field(
        default=1, description="Fewest replicas; 0 lets an idle deployment scale to zero (not every provider can)."
    )
    maxReplicas: Annotated[int, Field(ge=1, le=32)] = Field(description="Most replicas.")
    signal: AutoscalingSignal = Field(
        default="waitingPerReplica",
        description="The load followed: waitingPerReplica (requests queued in the engine), inFlightPerReplica "
        "(requests the router has in flight) or kvCacheUsage (the engine's KV cache in use, 0..1).",
    )
    target: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="The signal's value per replica to hold; default 4 (waitingPerReplica), 8 (inFlightPerReplica) "
        "or 0.8 (kvCacheUsage, at most 1).",
    )
    scaleDownDelaySeconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=300, description="How long fewer replicas must have sufficed before scaling down (and to zero)."
    )


class ScalingSpec(WireModel):
    replicas: Annotated[int, Field(ge=0)] = Field(
        default=1, description="Replicas; 0 scales to zero. With autoscaling: the starting count, kept within its range."
    )
    prefill: ComponentScaling | None = None
    decode: ComponentScaling | None = None
    autoscaling: AutoscalingSpec | None = Field(
        default=None, description="Scale between minReplicas and maxReplicas on a load signal (aggregated mode only)."
    )


class KeySelector(WireModel):
    name: str | None = None
    key: str
    optional: bool | None = None


class FieldSelector(WireModel):
    apiVersion: str | None = None
    fieldPath: str


class ResourceFieldSelector(WireModel):
    containerName: str | None = None
    resource: str
    divisor: Quantity | None = None


class EnvVarSource(WireModel):
    secretKeyRef: KeySelector | None = None
    configMapKeyRef: KeySelector | None = None
    fieldRef: FieldSelector | None = None
    resourceFieldRef: ResourceFieldSelector | None = None


class EnvVar(WireModel):
    name: Annotated[str, Field(pattern=ENV_VAR_NAME)]
    value: str | None = None
    valueFrom: EnvVarSource | None = None


class Toleration(WireModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None


class PodTemplateMeta(WireModel):
    labels: dict[str, Annotated[str, Field(pattern=LABEL_VALUE, max_length=63)]] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateSpec(WireModel):
    metadata: PodTemplateMeta | None = None


class SecretsSpec(WireModel):
    huggingFaceToken: Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)] | None = Field(
        default=None, description="Name of a Secret with key HF_TOKEN."
    )


class GatewaySpec(WireModel):
    enabled: bool | None = Field(default=None, description="Defaults to true when a Gateway is detected.")
    modelName: str | None = Field(default=None, description="Model name used for routing.")
    httpRouteRef: Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)] | None = Field(
        default=None, description="A user-managed HTTPRoute in the same namespace; Jetway then creates none."
    )


class ModelDeploymentSpec(WireModel):
    model: ModelSpec = Field(description="The model to serve.")
    engine: EngineSpec | None = None
    provider: ProviderSpec | None = None
    serving: ServingSpec | None = None
    resources: ResourceSpec | None = None
    scaling: ScalingSpec | None = None
    image: str | None = Field(default=None, description="Legacy provider-level image; prefer engine.image.")
    env: list[EnvVar] | None = None
    podTemplate: PodTemplateSpec | None = None
    secrets: SecretsSpec | None = None
    gateway: GatewaySpec | None = None
    nodeSelector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None


class SelectedProvider(WireModel):
    name: str | None = None
    selectedReason: str | None = None
    resourceName: str | None = None
    resourceKind: str | None = None


class SelectedEngine(WireModel):
    type: EngineType | None = None
    selectedReason: str | None = None


class GatewayStatus(WireModel):
    endpoint: str | None = None
    modelName: str | None = None
    gatewayName: str | None = None
    gatewayNamespace: str | None = None
    apiFormats: list[APIFormat] | None = None


class ImageStatus(WireModel):
    """Direct vLLM's image: what was asked for, what the registry resolved it to, and its provenance."""

    requested: str | None = Field(default=None, description="spec.engine.image, else spec.image, else the provider's default.")
    resolved: str | None = Field(default=None, description="<repository>@<digest> the requested image resolved to.")
    repository: str | None = None
    tag: str | None = None
    digest: str | None = None
    source: str | None = Field(default=None, description="How the image was chosen: stable, nightly, launch or custom.")
    createdAt: str | None = Field(default=None, description="When the image was built, when its config or labels say.")
    revision: str | None = Field(default=None, description="The source revision the image was built from (OCI label).")
    age: str | None = Field(default=None, description="The image's age when it was resolved (e.g. 3d, 5h, 0m).")
    inNightly: bool | None = Field(default=None, description="Whether the image is a nightly build.")
    verified: bool | None = Field(default=None, description="Whether the image's signature was verified (never, yet).")
    verificationMessage: str | None = None
    message: str | None = None


class ReplicaStatus(WireModel):
    desired: int = 0
    ready: int = 0
    available: int = 0


class EndpointStatus(WireModel):
    service: str
    port: int


class ModelDeploymentStatus(WireModel):
    phase: Phase | None = None
    message: str | None = None
    provider: SelectedProvider | None = None
    engine: SelectedEngine | None = None
    gateway: GatewayStatus | None = None
    image: ImageStatus | None = None
    replicas: ReplicaStatus | None = None
    endpoint: EndpointStatus | None = None
    conditions: list[Condition] | None = None
    observedGeneration: int | None = None


class ModelDeployment(WireModel):
    apiVersion: Literal["airunway.ai/v1alpha1"] = "airunway.ai/v1alpha1"
    kind: Literal["ModelDeployment"] = "ModelDeployment"
    metadata: ObjectMeta
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus | None = None
