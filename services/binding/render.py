"""An agent's workload, purely: the container backend (a Deployment and Service, or a Job) and the
kagent CRD backend (ModelConfig and Agent, with a per-agent no-auth Secret when keyless).

Container agents run locked down: non-root, no privilege escalation, every capability dropped,
a read-only root filesystem (unless the framework asks for a writable one); the only
overrides allowed are the allow-listed `podSecurityContext` and `securityContext` fields of
`spec.provider.overrides.workload` and `.container`, which admission has already checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.objects import managed_labels, metadata
from contracts.rules.agents import parse_catalog
from contracts.subjects import Key

AGENT = "airunway.ai/agent"
FRAMEWORK = "airunway.ai/framework"
KAGENT_API = "kagent.dev/v1alpha2"
CONFIG_PATH = "/etc/airunway"
NO_KEY = "not-required"
ENV_FAMILIES = {  # apiType → (base URL, model, key) variables
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "ANTHROPIC_API_KEY"),
    "azureOpenAI": ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_MODEL", "AZURE_OPENAI_API_KEY"),
}
OPENAI_ENV = ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY")
KAGENT_PROVIDERS = {"anthropic": "Anthropic", "azureOpenAI": "AzureOpenAI"}


class RenderError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Rendered:
    objects: list[dict[str, Any]]
    workload: dict[str, str]  # status.runtime.workloadRef
    address: str  # status.runtime.address ("" when none)


def _labels(agent: AgentDeployment) -> dict[str, str]:
    return {**managed_labels(), AGENT: agent.metadata.name, FRAMEWORK: agent.spec.framework.name}


def _key(agent: AgentDeployment) -> Key:
    return Key("AgentDeployment", agent.metadata.namespace or "default", agent.metadata.name)


def image(agent: AgentDeployment, config: AgentProviderConfig) -> str:
    chosen = (agent.spec.config or {}).get("image")
    if isinstance(chosen, str) and chosen:
        return chosen
    catalog_text = (config.metadata.annotations or {}).get("airunway.ai/agent-catalog")
    images = sorted({e.image for e in parse_catalog(catalog_text)[0] if e.image}) if catalog_text else []
    if len(images) > 1:
        raise RenderError(
            "AmbiguousImage", "framework catalog annotation advertises multiple images; set spec.config.image explicitly to select one"
        )
    if not images:
        raise RenderError("MissingImage", "No container image: set spec.config.image or a framework catalog image")
    return images[0]


def model_env(binding: dict[str, Any]) -> list[dict[str, Any]]:
    base, model, key = ENV_FAMILIES.get(str(binding.get("apiType")), OPENAI_ENV)
    env: list[dict[str, Any]] = [{"name": base, "value": binding["baseURL"]}, {"name": model, "value": binding["modelName"]}]
    credentials = binding.get("credentialsRef")
    if credentials:
        env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": credentials["name"], "key": credentials["key"]}}})
    else:
        env.append({"name": key, "value": NO_KEY})  # keyless in-cluster model: the SDKs still want a key
    return env


def container_objects(agent: AgentDeployment, config: AgentProviderConfig, uid: str, binding: dict[str, Any]) -> Rendered:
    key, name = _key(agent), agent.metadata.name
    labels = _labels(agent)
    settings = agent.spec.config or {}
    port = int(settings.get("port") or 8080)
    writable = bool(config.spec.capabilities.writableRootFilesystem)
    overrides = (agent.spec.provider.overrides if agent.spec.provider else None) or {}
    env = [{"name": "AIRUNWAY_AGENT_CONFIG", "value": f"{CONFIG_PATH}/agent.json"}, *model_env(binding)]
    otlp = agent.spec.observability.otlp if agent.spec.observability else None
    if otlp is not None:
        env.append({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": otlp.endpoint})
        if otlp.protocol:
            env.append({"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": otlp.protocol})
    security = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": not writable,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        **((overrides.get("container") or {}).get("securityContext") or {}),
    }
    container: dict[str, Any] = {
        "name": "agent",
        "image": image(agent, config),
        "ports": [{"name": "http", "containerPort": port}],
        "env": env,
        "securityContext": security,
        "volumeMounts": [{"name": "agent-config", "mountPath": CONFIG_PATH, "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    for field in ("command", "args"):
        if isinstance(settings.get(field), list):
            container[field] = settings[field]
    if agent.spec.resources is not None:
        container["resources"] = agent.spec.resources.wire()
    pod_security = {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        **((overrides.get("workload") or {}).get("podSecurityContext") or {}),
    }
    pod: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": {
            "securityContext": pod_security,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [{"name": "agent-config", "configMap": {"name": f"{name}-config"}}, {"name": "tmp", "emptyDir": {}}],
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(f"{name}-config", key, uid, labels),
        "data": {"agent.json": json.dumps(settings, sort_keys=True)},
    }
    if agent.spec.lifecycle == "job":
        pod["spec"]["restartPolicy"] = "Never"
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata(name, key, uid, labels),
            "spec": {"backoffLimit": 3, "template": pod},
        }
        return Rendered([configmap, job], {"apiVersion": "batch/v1", "kind": "Job", "name": name, "namespace": key.namespace}, "")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, key, uid, labels),
        "spec": {"replicas": 1, "selector": {"matchLabels": {AGENT: name}}, "template": pod},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, key, uid, labels),
        "spec": {"selector": {AGENT: name}, "ports": [{"name": "http", "port": 80, "targetPort": port}]},
    }
    return Rendered(
        [configmap, deployment, service],
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": key.namespace},
        f"http://{name}.{key.namespace}.svc.cluster.local",
    )


def kagent_objects(agent: AgentDeployment, uid: str, binding: dict[str, Any]) -> Rendered:
    key, name = _key(agent), agent.metadata.name
    labels = _labels(agent)
    settings = agent.spec.config or {}
    objects: list[dict[str, Any]] = []
    credentials = binding.get("credentialsRef")
    if not credentials:  # keyless: kagent still wants a Secret to read a key from
        secret = f"{name}-model-noauth"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": metadata(secret, key, uid, labels),
                "stringData": {"token": NO_KEY},
            }
        )
        credentials = {"name": secret, "key": "token"}
    api_type = str(binding.get("apiType") or "openai")
    provider = KAGENT_PROVIDERS.get(api_type, "OpenAI")
    spec: dict[str, Any] = {
        "provider": provider,
        "model": binding["modelName"],
        "apiKeySecret": credentials["name"],
        "apiKeySecretKey": credentials["key"],
    }
    if provider == "AzureOpenAI":
        spec["azureOpenAI"] = {"azureEndpoint": binding["baseURL"], "apiVersion": "2024-02-01"}
    elif provider == "Anthropic":
        spec["anthropic"] = {"baseUrl": binding["baseURL"]}
    else:
        spec["openAI"] = {"baseUrl": binding["baseURL"]}
    objects.append({"apiVersion": KAGENT_API, "kind": "ModelConfig", "metadata": metadata(f"{name}-model", key, uid, labels), "spec": spec})
    declarative: dict[str, Any] = {"modelConfig": f"{name}-model", "runtime": settings.get("runtime") or "python"}
    if settings.get("systemPrompt"):
        declarative["systemMessage"] = settings["systemPrompt"]
    objects.append(
        {
            "apiVersion": KAGENT_API,
            "kind": "Agent",
            "metadata": metadata(name, key, uid, labels),
            "spec": {
                "type": "Declarative",
                "description": settings.get("description") or f"airunway agent {name}",
                "declarative": declarative,
            },
        }
    )
    return Rendered(objects, {"apiVersion": KAGENT_API, "kind": "Agent", "name": name, "namespace": key.namespace}, "")


def render(agent: AgentDeployment, config: AgentProviderConfig, uid: str, binding: dict[str, Any]) -> Rendered:
    if config.spec.capabilities.backend == "container":
        return container_objects(agent, config, uid, binding)
    if agent.spec.framework.name == "kagent":
        return kagent_objects(agent, uid, binding)
    raise RenderError(
        "UnsupportedFramework",
        f"framework {agent.spec.framework.name} has a crd backend Jetway does not render (supported: kagent, and any container backend)",
    )
