"""Base manifests and a helper to derive broken variants from them by field path; a routing record with every field set."""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

from contracts.routing import RoutingRecord

DELETE = object()

MEMBER: dict[str, Any] = {
    "apiVersion": "airdress.co/v1alpha1",
    "kind": "InferencePoolMember",
    "metadata": {"name": "gpu-a"},
    "spec": {"backend": "vllm-openai", "url": "https://gpu-a.lab:8000", "models": [{"name": "qwen", "contextWindow": 4096}]},
}

MD: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "qwen", "namespace": "default"},
    "spec": {"model": {"id": "Qwen/Qwen3-0.6B"}, "engine": {"type": "vllm"}, "resources": {"gpu": {"count": 1}}},
}

IPC: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "InferenceProviderConfig",
    "metadata": {"name": "acme"},
    "spec": {
        "capabilities": {"engines": [{"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True}]},
        "selectionRules": [{"condition": "spec.engine.type == 'vllm'", "priority": 10}],
    },
}

APC: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "AgentProviderConfig",
    "metadata": {"name": "kagent", "annotations": {"airunway.ai/agent-catalog": '[{"name": "sre", "title": "SRE"}]'}},
    "spec": {"capabilities": {"backend": "crd", "requiresOperator": True, "operatorAPIGroup": "kagent.dev"}},
}

AD: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "AgentDeployment",
    "metadata": {"name": "sre-bot", "namespace": "default"},
    "spec": {"framework": {"name": "kagent"}, "model": {"deploymentRef": {"name": "qwen"}}},
}


RECORD = RoutingRecord(
    at=1_764_979_200.5,
    model="qwen",
    status=200,
    member="gpu-a",
    candidates=("gpu-a", "gpu-b"),
    policy="prefix-cache",
    reason="prefix",
    score=1.25,
    prefix=0.75,
    blocks=(3_000_000_001, 42),
    block_chars=64,
    session=2**63 + 5,
    key="team-a",
    tokens_in=120,
    tokens_out=16,
    ttft=0.08,
    elapsed=0.4,
    router="router-0",
)


def _parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return parts


def changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `base` with each `a.b[0].c` path set (or deleted with DELETE)."""
    doc = copy.deepcopy(base)
    for path, value in changes.items():
        parts = _parts(path)
        node: Any = doc
        for part, following in itertools.pairwise(parts):
            if isinstance(part, str) and part not in node:
                node[part] = [] if isinstance(following, int) else {}
            node = node[part]
        last = parts[-1]
        if value is DELETE:
            del node[last]
        elif isinstance(last, int) and isinstance(node, list) and last == len(node):
            node.append(copy.deepcopy(value))
        else:
            node[last] = copy.deepcopy(value)  # a copy: whoever changes the document must not change the caller's value
    return doc
