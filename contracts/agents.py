"""AgentProviderConfig (cluster-scoped) and AgentDeployment with its model binding."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from contracts.meta import DNS_LABEL, DNS_SUBDOMAIN, Condition, ObjectMeta, WireModel
from contracts.modeldeployment import Overrides

ANNOTATION_AGENT_CATALOG = "airunway.ai/agent-catalog"
ANNOTATION_INSTALL_INSTRUCTIONS = "airunway.ai/install-instructions"

Backend = Literal["crd", "container"]
BindingMode = Literal["deploymentRef", "gatewayEndpoint", "externalAPI"]
Protocol = Literal["mcp", "a2a", "openaiTools"]
ExternalAPIType = Literal["openai", "anthropic", "azureOpenAI", "custom"]
AgentPhase = Literal["Pending", "Deploying", "Running", "Completed", "Failed", "Terminating"]


class AgentCapabilities(WireModel):
    backend: Backend = Field(description="crd (an operator's custom resources) or container. Immutable.")
    requiresOperator: bool | None = None
    operatorAPIGroup: str | None = Field(default=None, description="API group (or group/version) the operator serves.")
    modelBindingModes: list[BindingMode] | None = None
    protocols: list[Protocol] | None = None
    writableRootFilesystem: bool | None = Field(default=None, description="Container backend only.")


class AgentProviderConfigSpec(WireModel):
    capabilities: AgentCapabilities


class AgentProviderConfigStatus(WireModel):
    ready: bool | None = None
    version: str | None = None
    lastHeartbeat: str | None = None
    conditions: list[Condition] | None = None


class AgentProviderConfig(WireModel):
    apiVersion: Literal["airunway.ai/v1alpha1"] = "airunway.ai/v1alpha1"
    kind: Literal["AgentProviderConfig"] = "AgentProviderConfig"
    metadata: ObjectMeta
    spec: AgentProviderConfigSpec
    status: AgentProviderConfigStatus | None = None


class CatalogEntry(WireModel):
    """One item of the `airunway.ai/agent-catalog` annotation."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    title: Annotated[str, Field(min_length=1)]
    description: str | None = None
    icon: str | None = None
    tags: list[str] | None = None
    image: str | None = None
    template: dict[str, Any] | None = None


class FrameworkRef(WireModel):
    name: Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=63)] = Field(
        description="The AgentProviderConfig to run this agent. Immutable."
    )


class AgentProviderSpec(WireModel):
    overrides: Overrides = Field(
        default=None,
        description="Validated security-context overrides: sections workload and container, each with "
        "podSecurityContext and securityContext.",
    )


class DeploymentRef(WireModel):
    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = Field(default=None, description="Defaults to the agent's namespace.")


class GatewayRef(WireModel):
    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = None
    listenerName: Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)] | None = Field(
        default=None,
        description="Required when the Gateway has more than one HTTPRoute-capable HTTP(S) listener.",
    )


class GatewayEndpoint(WireModel):
    gatewayRef: GatewayRef
    modelName: Annotated[str, Field(min_length=1)]


class CredentialsRef(WireModel):
    name: Annotated[str, Field(min_length=1)]
    key: Annotated[str, Field(min_length=1)]


class ExternalAPI(WireModel):
    type: ExternalAPIType
    # bounded so that the API server's CEL cost estimate of the URL rule stays in budget
    baseURL: Annotated[str, Field(min_length=1, max_length=2048)] = Field(
        description="Absolute http(s) URL with a host, no user info, port 1-65535 when present."
    )
    modelName: Annotated[str, Field(min_length=1)]
    credentialsRef: CredentialsRef | None = None


class ModelBinding(WireModel):
    deploymentRef: DeploymentRef | None = None
    gatewayEndpoint: GatewayEndpoint | None = None
    externalAPI: ExternalAPI | None = None


class ResourceRequirements(WireModel):
    requests: dict[str, str] | None = None
    limits: dict[str, str] | None = None


class OTLP(WireModel):
    endpoint: Annotated[str, Field(min_length=1)]
    protocol: str | None = None


class Observability(WireModel):
    otlp: OTLP | None = None


class AgentDeploymentSpec(WireModel):
    framework: FrameworkRef
    provider: AgentProviderSpec | None = None
    lifecycle: Literal["deployment", "job"] = Field(default="deployment", description="Container backend only.")
    model: ModelBinding = Field(description="Exactly one of deploymentRef, gatewayEndpoint or externalAPI.")
    config: dict[str, Any] | None = None
    resources: ResourceRequirements | None = None
    observability: Observability | None = None


class FrameworkStatus(WireModel):
    name: str | None = None
    providerVersion: str | None = None


class ModelBindingStatus(WireModel):
    bindingMode: BindingMode | None = None
    apiType: str | None = None
    baseURL: str | None = None
    modelName: str | None = None
    credentialsRef: CredentialsRef | None = None
    observedResourceUID: str | None = None


class WorkloadRef(WireModel):
    apiVersion: str
    kind: str
    name: str
    namespace: str | None = None


class AgentRuntime(WireModel):
    workloadRef: WorkloadRef | None = None
    address: str | None = None


class AgentReplicas(WireModel):
    desired: int = 0
    ready: int = 0
    available: int = 0


class AgentDeploymentStatus(WireModel):
    phase: AgentPhase | None = None
    framework: FrameworkStatus | None = None
    modelBinding: ModelBindingStatus | None = None
    runtime: AgentRuntime | None = None
    replicas: AgentReplicas | None = None
    conditions: list[Condition] | None = None
    observedGeneration: int | None = None


class AgentDeployment(WireModel):
    apiVersion: Literal["airunway.ai/v1alpha1"] = "airunway.ai/v1alpha1"
    kind: Literal["AgentDeployment"] = "AgentDeployment"
    metadata: ObjectMeta
    spec: AgentDeploymentSpec
    status: AgentDeploymentStatus | None = None
