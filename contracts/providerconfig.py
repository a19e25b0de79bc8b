"""InferenceProviderConfig (airunway.ai/v1alpha1, cluster-scoped): a provider registers itself."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from contracts.meta import Condition, ObjectMeta, WireModel
from contracts.modeldeployment import APIFormat, EngineType, ServingMode

# Annotations of the spec: display, discovery, installation and health metadata.
ANNOTATION_DISPLAY_NAME = "airunway.ai/display-name"
ANNOTATION_DESCRIPTION = "airunway.ai/description"
ANNOTATION_DEFAULT_NAMESPACE = "airunway.ai/default-namespace"
ANNOTATION_DOCUMENTATION_URL = "airunway.ai/documentation-url"
ANNOTATION_DOCUMENTATION = "airunway.ai/documentation"
ANNOTATION_CAPABILITIES = "airunway.ai/capabilities"
ANNOTATION_HEALTH = "airunway.ai/health"
ANNOTATION_INSTALLATION = "airunway.ai/installation"


class EndpointPicker(WireModel):
    image: str | None = None
    configData: str | None = None


class EngineGateway(WireModel):
    managesInferencePool: bool = Field(default=False, description="The provider creates and owns the InferencePool and endpoint picker.")
    inferencePoolNamePattern: str | None = Field(default=None, description="Pool name pattern; {name} and {namespace} are replaced.")
    inferencePoolNamespace: str | None = Field(
        default=None, description="Namespace of the provider's pool; {name} and {namespace} are replaced."
    )
    endpointPicker: EndpointPicker | None = None
    ignoresServedName: bool = False


class EngineCapability(WireModel):
    name: EngineType
    servingModes: list[ServingMode] | None = None
    apiFormats: list[APIFormat] | None = None
    gpuSupport: bool = False
    cpuSupport: bool = False
    requiresCRD: bool | None = Field(default=None, description="nil is treated as true.")
    gateway: EngineGateway | None = None


class Capabilities(WireModel):
    engines: list[EngineCapability] | None = None


class SelectionRule(WireModel):
    condition: Annotated[str, Field(min_length=1, description="A CEL expression over `spec`.")]
    priority: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0


class InferenceProviderConfigSpec(WireModel):
    capabilities: Capabilities | None = None
    selectionRules: list[SelectionRule] | None = None


class InferenceProviderConfigStatus(WireModel):
    ready: bool | None = None
    version: str | None = None
    lastHeartbeat: str | None = None
    upstreamCRDVersion: str | None = None
    upstreamSchemaHash: str | None = None
    conditions: list[Condition] | None = None


class InferenceProviderConfig(WireModel):
    apiVersion: Literal["airunway.ai/v1alpha1"] = "airunway.ai/v1alpha1"
    kind: Literal["InferenceProviderConfig"] = "InferenceProviderConfig"
    metadata: ObjectMeta
    spec: InferenceProviderConfigSpec
    status: InferenceProviderConfigStatus | None = None


# The JSON carried by the installation annotation, parsed by dashboards to show install steps.
class HelmRepo(WireModel):
    name: str
    url: str


class HelmChart(WireModel):
    name: str
    chart: str
    version: str | None = None
    namespace: str | None = None
    createNamespace: bool | None = None
    skipCrds: bool | None = None
    fetchUrl: str | None = None
    preCrdUrls: list[str] | None = None
    preInstallMissingCrds: bool | None = None
    values: dict[str, Any] | None = None


class InstallStep(WireModel):
    title: str
    command: str | None = None
    description: str | None = None


class InstallationInfo(WireModel):
    description: str | None = None
    defaultNamespace: str | None = None
    helmRepos: list[HelmRepo] | None = None
    helmCharts: list[HelmChart] | None = None
    steps: list[InstallStep] | None = None


class HealthCRD(WireModel):
    name: str
    displayName: str | None = None


class HealthOperatorPods(WireModel):
    namespace: str | None = None
    selectors: list[str]


class HealthInfo(WireModel):
    crds: list[HealthCRD] | None = None
    operatorPods: list[HealthOperatorPods] | None = None
