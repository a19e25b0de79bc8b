"""The named provider at admission, ported from AI Runway's webhook tests (ai-runway/airunway b0d3fb7,
controller/internal/webhook/v1alpha1/modeldeployment_webhook_test.go, "provider compatibility" cases, and
controller/internal/validation/compatibility_test.go): what each lookup outcome means, in upstream's words."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.providerconfig import InferenceProviderConfig
from contracts.rules.provider import ProviderLookup, check_named_provider
from tests.contracts.cases import IPC, MD, changed

DYNAMO = changed(
    IPC,
    {
        "metadata.name": "dynamo",
        "spec.capabilities": {
            "engines": [
                {"name": "vllm", "servingModes": ["aggregated", "disaggregated"], "gpuSupport": True},
                {"name": "trtllm", "servingModes": ["aggregated"], "gpuSupport": True},
                {"name": "llamacpp", "servingModes": ["aggregated"], "gpuSupport": False, "cpuSupport": True},
            ]
        },
    },
)


def deployment(**changes: Any) -> ModelDeployment:
    verdict = admit(changed(MD, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return verdict.obj


def found(config: dict[str, Any] = DYNAMO) -> ProviderLookup:
    ipc = admit(config).obj
    assert isinstance(ipc, InferenceProviderConfig)
    return ProviderLookup("found", spec=ipc.spec)


def judged(md: ModelDeployment, lookup: ProviderLookup) -> tuple[list[str], list[str]]:
    problems, warnings = check_named_provider(md, lookup)
    return [str(p) for p in problems], warnings


def test_should_skip_check_when_no_provider_specified() -> None:
    """upstream: "Should skip check when no provider specified" (auto-selection judges it later)."""
    assert judged(deployment(), ProviderLookup("not-found")) == ([], [])


def test_should_reject_when_provider_not_found_in_cluster() -> None:
    """upstream: "Should reject when provider not found in cluster"."""
    md = deployment(**{"spec.provider": {"name": "nonexistent"}})
    assert judged(md, ProviderLookup("not-found")) == (['spec.provider.name: InferenceProviderConfig "nonexistent" not found'], [])


def test_should_skip_check_when_inference_provider_config_crd_is_not_installed() -> None:
    """upstream: "Should skip check when InferenceProviderConfig CRD is not installed" (a cluster mid-bootstrap)."""
    md = deployment(**{"spec.provider": {"name": "dynamo"}})
    assert judged(md, ProviderLookup("not-installed")) == ([], [])


def test_should_surface_a_warning_when_provider_lookup_fails_transiently() -> None:
    """upstream: "Should surface a warning when provider lookup fails transiently": admitted, with a warning naming
    the provider and saying the controller re-validates."""
    md = deployment(**{"spec.provider": {"name": "dynamo"}})
    problems, warnings = judged(md, ProviderLookup("unavailable", reason="etcdserver: request timed out"))
    assert problems == [] and len(warnings) == 1
    assert "dynamo" in warnings[0] and "controller will re-validate" in warnings[0] and "request timed out" in warnings[0]


def test_should_reject_admission_when_provider_lookup_is_forbidden() -> None:
    """upstream: "Should reject admission when provider lookup is Forbidden (webhook RBAC misconfigured)"."""
    md = deployment(**{"spec.provider": {"name": "dynamo"}})
    problems, _ = judged(md, ProviderLookup("forbidden", reason="403 Forbidden"))
    assert problems == ['spec.provider.name: cannot verify provider "dynamo": 403 Forbidden']


@pytest.mark.parametrize(
    ("upstream", "changes", "expected"),
    [
        (
            "Should reject engine the provider does not support",
            {"spec.engine.type": "sglang"},
            ["spec.engine.type: provider dynamo does not support engine sglang"],
        ),
        (
            "Should reject disaggregated mode the engine capability lacks",
            {
                "spec.engine.type": "trtllm",
                "spec.resources": {},
                "spec.serving": {"mode": "disaggregated"},
                "spec.scaling": {"prefill": {"replicas": 1, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 1}}},
            },
            ["spec.serving.mode: provider dynamo does not support disaggregated mode for engine trtllm"],
        ),
        (
            "TestCheckProviderCompatibility named provider without CPU support",
            {"spec.resources": {"gpu": {"count": 0}}},
            ["spec.resources.gpu.count: vllm engine on provider dynamo requires GPU (set resources.gpu.count > 0)"],
        ),
        ("TestCheckProviderCompatibility named provider with CPU support", {"spec.engine.type": "llamacpp", "spec.resources": {}}, []),
        ("Should admit a supported combination", {}, []),
    ],
)
def test_provider_compatibility(upstream: str, changes: dict[str, Any], expected: list[str]) -> None:
    """upstream: the webhook's CheckProviderCompatibility cases, field path and words."""
    md = deployment(**{"spec.provider": {"name": "dynamo"}, **changes})
    assert judged(md, found()) == (expected, []), upstream


def test_the_dynamo_mocker_backend_skips_the_lookup() -> None:
    """upstream: the webhook does not look the provider up for `airunway.ai/dynamo-test-backend: mocker` on dynamo:
    the GPU-less mocker must not be refused by the GPU capability check."""
    md = deployment(**{"spec.provider": {"name": "dynamo"}, "metadata.annotations": {"airunway.ai/dynamo-test-backend": "mocker"}})
    assert judged(md, ProviderLookup("not-found")) == ([], [])
