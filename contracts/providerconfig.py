"""InferenceProviderConfig (airunway.ai/v1alpha1, cluster-scoped): a provider registers itself."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from contracts.meta import Condition, ObjectMeta, WireModel
from contracts.modeldeployment import APIFormat, EngineType, ServingMode
from contracts.problems import show, type_name

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


# The most each engine's server can speak (AI Runway's ValidAPIFormatsForEngine): a provider may
# declare fewer, never more.
VALID_API_FORMATS: dict[str, tuple[APIFormat, ...]] = {
    "vllm": ("openai-chat", "openai-responses", "anthropic-messages"),
    "sglang": ("openai-chat", "anthropic-messages"),
    "trtllm": ("openai-chat", "openai-responses"),
    "llamacpp": ("openai-chat",),
}


def api_format_problem(engine: str, formats: list[str]) -> str | None:
    """Why an engine cannot serve one of these API formats (the first), or None."""
    valid = VALID_API_FORMATS.get(engine)
    if valid is None:
        return f'unknown engine type "{engine}"'
    bad = next((f for f in formats if f not in valid), None)
    return f'engine "{engine}" does not support API format "{bad}"' if bad else None


class EngineCapability(WireModel):
    name: EngineType
    servingModes: list[ServingMode] | None = Field(default=None, description="The modes it serves; none listed: it serves none.")
    apiFormats: list[APIFormat] | None = Field(default=None, description="The APIs it speaks; none listed: openai-chat.")
    gpuSupport: bool = False
    cpuSupport: bool = False
    requiresCRD: bool | None = Field(default=None, description="nil is treated as true.")
    gateway: EngineGateway | None = None

    def serves(self, mode: str) -> bool:
        """Whether it serves this mode: only a mode it lists (AI Runway's SupportsServingMode)."""
        return mode in (self.servingModes or [])

    def effective_api_formats(self) -> list[APIFormat]:
        """The API formats it speaks: those listed, or openai-chat when none are."""
        return list(self.apiFormats) if self.apiFormats else ["openai-chat"]

    def supports_api_format(self, api_format: str) -> bool:
        return api_format in self.effective_api_formats()


LEGACY_FLAT_KEYS = ("servingModes", "gpuSupport", "cpuSupport", "requiresCRD", "gateway")
_LEGACY_TYPES: dict[str, tuple[type, str]] = {
    "servingModes": (list, "a list of serving modes"),
    "gpuSupport": (bool, "true or false"),
    "cpuSupport": (bool, "true or false"),
    "requiresCRD": (bool, "true or false"),
    "gateway": (dict, "an object"),
}


def migrate_legacy_capabilities(capabilities: Any) -> tuple[Any, str | None]:
    """AI Runway's legacy flat capabilities in the per-engine shape, and how (upstream's words):

    - `migrated`: `engines` a list of names, the flat `gpuSupport`/`cpuSupport` (false when absent),
      `servingModes`, `requiresCRD` and `gateway` copied into each;
    - `hoisted`: `engines` already objects, the flat values copied into each that does not set them;
    - `cleaned`: no engines, the flat keys dropped;
    - None: nothing legacy, the input returned as it is (so is anything that is not an object with a
      list of engines, for the schema to refuse).

    Pure: the input is not changed. A legacy list that mixes names and objects, or a flat value of
    the wrong type, is a ValueError (the config is refused, never truncated).
    """
    if not isinstance(capabilities, dict):
        return capabilities, None
    found = capabilities.get("engines")
    if found is not None and not isinstance(found, list):
        return capabilities, None
    engines: list[Any] = found or []
    names = bool(engines) and isinstance(engines[0], str)
    flat = [key for key in LEGACY_FLAT_KEYS if key in capabilities]
    if not flat and not names:
        return capabilities, None
    for key in flat:
        expected, words = _LEGACY_TYPES[key]
        value: Any = capabilities[key]
        modes_ok = key != "servingModes" or (isinstance(value, list) and all(isinstance(m, str) for m in value))
        if not isinstance(value, expected) or not modes_ok:
            raise ValueError(f"{key} (legacy, now per engine) must be {words} (got {type_name(value)}: {show(value)})")
    legacy = {key: capabilities[key] for key in flat}
    migrated = {key: copy.deepcopy(value) for key, value in capabilities.items() if key not in LEGACY_FLAT_KEYS}
    if not engines:
        return migrated, "cleaned"
    wanted = str if names else dict
    for i, entry in enumerate(engines):
        if not isinstance(entry, wanted):
            form = "an engine name" if names else "an object"
            raise ValueError(f"malformed engine entry at engines[{i}]: expected {form}, like engines[0], got {type_name(entry)}")
    migrated["engines"] = [_with_legacy({"name": e} if names else copy.deepcopy(e), legacy) for e in engines]
    return migrated, "migrated" if names else "hoisted"


def _with_legacy(engine: dict[str, Any], legacy: dict[str, Any]) -> dict[str, Any]:
    """An engine with the flat values it does not set itself (a copy of each for each engine)."""
    engine.setdefault("gpuSupport", legacy.get("gpuSupport", False))
    engine.setdefault("cpuSupport", legacy.get("cpuSupport", False))
    if legacy.get("servingModes"):
        engine.setdefault("servingModes", list(legacy["servingModes"]))
    if "requiresCRD" in legacy:
        engine.setdefault("requiresCRD", legacy["requiresCRD"])
    if legacy.get("gateway"):
        engine.setdefault("gateway", copy.deepcopy(legacy["gateway"]))
    return engine


class Capabilities(WireModel):
    engines: list[EngineCapability] | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        """Legacy flat capabilities are migrated, not refused, wherever a config is read."""
        return migrate_legacy_capabilities(data)[0]

    def engine(self, name: str) -> EngineCapability | None:
        """The capability of this engine, or None when the provider does not offer it."""
        return next((e for e in self.engines or [] if e.name == name), None)

    def engine_names(self) -> list[str]:
        return [e.name for e in self.engines or []]

    def serves(self, engine: str, mode: str) -> bool:
        capability = self.engine(engine)
        return capability is not None and capability.serves(mode)

    def supports_gpu(self, engine: str) -> bool:
        capability = self.engine(engine)
        return capability is not None and capability.gpuSupport

    def supports_cpu(self, engine: str) -> bool:
        capability = self.engine(engine)
        return capability is not None and capability.cpuSupport

    def supports_api_format(self, engine: str, api_format: str) -> bool:
        capability = self.engine(engine)
        return capability is not None and capability.supports_api_format(api_format)

    def effective_api_formats(self, engine: str) -> list[APIFormat] | None:
        capability = self.engine(engine)
        return capability.effective_api_formats() if capability else None


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
