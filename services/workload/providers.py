"""The five providers Jetway renders for, as the InferenceProviderConfigs they register.

Capabilities and selection rules are AI Runway's own (each provider's config.go), so
selection picks what AI Runway would; annotations carry the display, documentation,
installation and health metadata dashboards read.
"""

from __future__ import annotations

import json
from typing import Any

from contracts.objects import managed_labels
from contracts.providerconfig import (
    ANNOTATION_CAPABILITIES,
    ANNOTATION_DEFAULT_NAMESPACE,
    ANNOTATION_DESCRIPTION,
    ANNOTATION_DISPLAY_NAME,
    ANNOTATION_DOCUMENTATION,
    ANNOTATION_DOCUMENTATION_URL,
    ANNOTATION_HEALTH,
    ANNOTATION_INSTALLATION,
)

VERSION = "jetway-workload:0.1.0"
ALL_FORMATS = ["openai-chat", "openai-responses", "anthropic-messages"]
LLMD_EPP_CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
- type: decode-filter
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
"""
_DYNAMO_POOL = {"managesInferencePool": True, "inferencePoolNamePattern": "{name}-pool", "inferencePoolNamespace": "{namespace}"}

CAPABILITIES: dict[str, dict[str, Any]] = {
    "vllm": {
        "engines": [
            {
                "name": "vllm",
                "servingModes": ["aggregated"],
                "gpuSupport": True,
                "cpuSupport": False,
                "apiFormats": ALL_FORMATS,
                "requiresCRD": False,
            }
        ]
    },
    "dynamo": {
        "engines": [
            {
                "name": "vllm",
                "servingModes": ["aggregated", "disaggregated"],
                "gpuSupport": True,
                "apiFormats": ALL_FORMATS,
                "gateway": _DYNAMO_POOL,
            },
            {
                "name": "sglang",
                "servingModes": ["aggregated", "disaggregated"],
                "gpuSupport": True,
                "apiFormats": ["openai-chat", "anthropic-messages"],
                "gateway": _DYNAMO_POOL,
            },
            {
                "name": "trtllm",
                "servingModes": ["aggregated"],
                "gpuSupport": True,
                "apiFormats": ["openai-chat", "openai-responses"],
                "gateway": _DYNAMO_POOL,
            },
        ]
    },
    "kaito": {
        "engines": [
            {"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True, "apiFormats": ALL_FORMATS},
            {
                "name": "llamacpp",
                "servingModes": ["aggregated"],
                "gpuSupport": True,
                "cpuSupport": True,
                "apiFormats": ["openai-chat"],
                "gateway": {"ignoresServedName": True},
            },
        ]
    },
    "kuberay": {
        "engines": [{"name": "vllm", "servingModes": ["aggregated", "disaggregated"], "gpuSupport": True, "apiFormats": ["openai-chat"]}]
    },
    "llmd": {
        "engines": [
            {
                "name": "vllm",
                "servingModes": ["aggregated", "disaggregated"],
                "gpuSupport": True,
                "apiFormats": ALL_FORMATS,
                "requiresCRD": False,
                "gateway": {"endpointPicker": {"image": "ghcr.io/llm-d/llm-d-inference-scheduler:v0.6.0", "configData": LLMD_EPP_CONFIG}},
            }
        ]
    },
}

RULES: dict[str, list[dict[str, Any]]] = {
    "vllm": [],  # explicit-only in intent; still a candidate at priority 0
    "dynamo": [
        {"condition": "spec.engine.type == 'trtllm'", "priority": 100},
        {"condition": "spec.engine.type == 'sglang'", "priority": 100},
        {"condition": "has(spec.serving) && spec.serving.mode == 'disaggregated'", "priority": 90},
        {"condition": "has(spec.resources.gpu) && spec.resources.gpu.count > 0 && spec.engine.type == 'vllm'", "priority": 50},
    ],
    "kaito": [
        {"condition": "!has(spec.resources.gpu) || spec.resources.gpu.count == 0", "priority": 100},
        {"condition": "spec.engine.type == 'llamacpp'", "priority": 100},
    ],
    "kuberay": [{"condition": "has(spec.resources.gpu) && spec.resources.gpu.count > 1 && spec.engine.type == 'vllm'", "priority": 80}],
    "llmd": [],
}

_DISPLAY = {
    "vllm": ("Direct vLLM", "vLLM's OpenAI server as a plain Deployment and Service: no operator to install", ""),
    "dynamo": ("NVIDIA Dynamo", "NVIDIA Dynamo for high-performance GPU inference, aggregated or disaggregated", "dynamo-system"),
    "kaito": ("KAITO", "Kubernetes AI Toolchain Operator: vLLM presets on GPUs, llama.cpp on CPUs", "kaito-workspace"),
    "kuberay": ("KubeRay", "Ray Serve with vLLM, for multi-GPU and multi-node serving", "kuberay-system"),
    "llmd": ("llm-d", "vLLM in the llm-d shape, with the llm-d inference scheduler as endpoint picker", ""),
}
_CRDS = {
    "dynamo": [{"name": "dynamographdeployments.nvidia.com", "displayName": "DynamoGraphDeployment"}],
    "kaito": [{"name": "workspaces.kaito.sh", "displayName": "Workspace"}],
    "kuberay": [{"name": "rayservices.ray.io", "displayName": "RayService"}],
}
_INSTALL = {
    "vllm": {  # AI Runway's (providers/vllm/config.go GetInstallationInfo): no operator, but GPUs and a token
        "description": "vLLM provider: deploys vLLM Deployments + Services directly. Requires GPU nodes with the NVIDIA device plugin.",
        "steps": [
            {
                "title": "Install NVIDIA GPU Device Plugin",
                "command": "kubectl apply -f "
                "https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.17.0/deployments/static/nvidia-device-plugin.yml",
                "description": "Install the NVIDIA device plugin so GPU nodes advertise nvidia.com/gpu resources.",
            },
            {
                "title": "Create HuggingFace Token Secret",
                "command": "kubectl create secret generic vllm-hf-token --from-literal=HF_TOKEN=<your-token> -n <model-namespace>",
                "description": "Create the HuggingFace token secret in the same namespace as your ModelDeployment.",
            },
        ],
    },
    "llmd": {
        "description": "Nothing to install for serving; the Gateway API Inference Extension is needed for its endpoint picker.",
        "steps": [],
    },
    "dynamo": {
        "description": "NVIDIA Dynamo for high-performance GPU inference",
        "defaultNamespace": "dynamo-system",
        "helmRepos": [{"name": "nvidia-ai-dynamo", "url": "https://helm.ngc.nvidia.com/nvidia/ai-dynamo"}],
        "helmCharts": [
            {
                "name": "dynamo-platform",
                "chart": "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform-1.1.1.tgz",
                "namespace": "dynamo-system",
                "createNamespace": True,
                "values": {"global.grove.install": True},
            }
        ],
        "steps": [
            {
                "title": "Install Dynamo Platform",
                "command": "helm upgrade --install dynamo-platform "
                "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform-1.1.1.tgz "
                "--namespace dynamo-system --create-namespace --set-json global.grove.install=true",
                "description": "Install the Dynamo platform operator with bundled Grove and CRDs",
            }
        ],
    },
    "kaito": {
        "description": "KAITO workspace operator",
        "defaultNamespace": "kaito-workspace",
        "helmRepos": [{"name": "kaito", "url": "https://kaito-project.github.io/kaito/charts/kaito"}],
        "helmCharts": [
            {
                "name": "kaito-workspace",
                "chart": "kaito/workspace",
                "version": "0.10.0",
                "namespace": "kaito-workspace",
                "createNamespace": True,
            }
        ],
        "steps": [
            {
                "title": "Install the KAITO workspace operator",
                "command": "helm upgrade --install kaito-workspace kaito/workspace --version 0.10.0 "
                "--namespace kaito-workspace --create-namespace",
            }
        ],
    },
    "kuberay": {
        "description": "KubeRay operator",
        "defaultNamespace": "kuberay-system",
        "helmRepos": [{"name": "kuberay", "url": "https://ray-project.github.io/kuberay-helm/"}],
        "helmCharts": [
            {"name": "kuberay-operator", "chart": "kuberay/kuberay-operator", "namespace": "kuberay-system", "createNamespace": True}
        ],
        "steps": [
            {
                "title": "Install the KubeRay operator",
                "command": "helm upgrade --install kuberay-operator kuberay/kuberay-operator --namespace kuberay-system --create-namespace",
            }
        ],
    },
}
DOCS = "https://github.com/ai-runway/airunway/tree/main/docs/providers/{}.md"


def builtin_configs() -> list[dict[str, Any]]:
    """The InferenceProviderConfig manifests the workload service registers at start-up."""
    configs = []
    for name, capabilities in CAPABILITIES.items():
        display, description, namespace = _DISPLAY[name]
        annotations = {
            ANNOTATION_DISPLAY_NAME: display,
            ANNOTATION_DESCRIPTION: description,
            ANNOTATION_DOCUMENTATION: DOCS.format(name),
            ANNOTATION_DOCUMENTATION_URL: DOCS.format(name),
            ANNOTATION_INSTALLATION: json.dumps(_INSTALL[name], sort_keys=True),
            ANNOTATION_CAPABILITIES: json.dumps(capabilities, sort_keys=True),
            ANNOTATION_HEALTH: json.dumps({"crds": _CRDS.get(name, [])}, sort_keys=True),
        }
        if namespace:
            annotations[ANNOTATION_DEFAULT_NAMESPACE] = namespace
        configs.append(
            {
                "apiVersion": "airunway.ai/v1alpha1",
                "kind": "InferenceProviderConfig",
                "metadata": {"name": name, "labels": managed_labels(), "annotations": annotations},
                "spec": {"capabilities": capabilities, "selectionRules": RULES[name]},
            }
        )
    return configs


BUILTIN = tuple(CAPABILITIES)
