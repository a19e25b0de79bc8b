"""AI Runway's own selection and compatibility tests, ported: their inputs and expected outcomes,
run against Jetway's pure selector (`services/selector/decide.py`).

Sources (ai-runway/airunway b0d3fb7): controller/internal/controller/run_selection_algorithm_test.go
and controller/internal/validation/compatibility_test.go. Each test names the upstream test it
comes from; a table row names the upstream subcase.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, SelectionFailed
from contracts.providerconfig import InferenceProviderConfigSpec
from services.selector.decide import Provider, compatibility, rule_spec, select, select_engine


def deployment(spec: dict[str, Any]) -> ModelDeployment:
    """A ModelDeployment as upstream's tests build them: as written, without the webhook's defaults."""
    return ModelDeployment.model_validate({"metadata": {"name": "qwen", "namespace": "default"}, "spec": spec})


def provider(name: str, *engines: dict[str, Any], rules: list[dict[str, Any]] | None = None, ready: bool = True) -> Provider:
    spec = InferenceProviderConfigSpec.model_validate({"capabilities": {"engines": list(engines)}, "selectionRules": rules or []})
    return Provider(name, spec, ready)


QWEN = {"id": "Qwen/Qwen3-0.6B", "source": "huggingface"}
ONE_GPU = {"gpu": {"count": 1, "type": "nvidia.com/gpu"}}


def with_engine_rule(name: str, engine: str, priority: int) -> Provider:
    """upstream's providerWithEngineRule: one GPU, aggregated engine, chosen by a rule on spec.engine.type."""
    return provider(
        name,
        {"name": engine, "gpuSupport": True, "servingModes": ["aggregated"]},
        rules=[{"condition": f"spec.engine.type == '{engine}'", "priority": priority}],
    )


# --- run_selection_algorithm_test.go


def test_run_selection_algorithm_auto_selected_engine_visible_to_cel() -> None:
    """upstream: TestRunSelectionAlgorithm_AutoSelectedEngineVisibleToCEL"""
    md = deployment({"model": QWEN, "resources": ONE_GPU})
    decision = select(md, 1, None, [with_engine_rule("vllm-provider", "vllm", 10)]).decision
    assert isinstance(decision, ProviderSelected), decision
    assert (decision.engine, decision.provider) == ("vllm", "vllm-provider")
    assert decision.provider_reason.endswith("rule priority 10")  # the rule on spec.engine.type matched
    assert rule_spec(md, "vllm")["engine"]["type"] == "vllm"
    assert md.spec.engine is None or not md.spec.engine.type  # selection never writes the spec


def test_run_selection_algorithm_auto_selected_engine_visible_to_cel_when_sticky() -> None:
    """upstream: TestRunSelectionAlgorithm_AutoSelectedEngineVisibleToCEL (engine only in status)"""
    md = deployment({"model": QWEN, "resources": ONE_GPU})
    recorded = ProviderSelected(
        generation=1, engine="vllm", engine_reason="auto-selected", provider="", provider_reason="", explicit_engine=False
    )
    decision = select(md, 2, recorded, [with_engine_rule("vllm-provider", "vllm", 10)]).decision
    assert isinstance(decision, ProviderSelected), decision
    assert decision.provider == "vllm-provider" and decision.provider_reason.endswith("rule priority 10")
    assert md.spec.engine is None


def test_run_selection_algorithm_explicit_engine_unchanged() -> None:
    """upstream: TestRunSelectionAlgorithm_ExplicitEngineUnchanged"""
    md = deployment({"model": QWEN, "engine": {"type": "vllm"}, "resources": ONE_GPU})
    providers = [with_engine_rule("vllm-provider", "vllm", 10), with_engine_rule("sglang-provider", "sglang", 100)]
    decision = select(md, 1, None, providers).decision
    assert isinstance(decision, ProviderSelected), decision
    assert decision.provider == "vllm-provider"
    assert md.spec.engine is not None and md.spec.engine.type == "vllm"


def test_validate_spec_uses_provided_engine_type() -> None:
    """upstream: TestValidateSpec_UsesProvidedEngineType"""
    md = deployment({"model": QWEN, "resources": ONE_GPU})
    # nothing resolves an engine: the deployment goes no further
    unresolved = select(md, 1, None, []).decision
    assert isinstance(unresolved, SelectionFailed) and unresolved.stage == "engine"
    assert isinstance(select_engine(md, None, []), str)
    # the caller's resolved engine is what validation checks; the spec is left as written
    assert compatibility(md, "vllm", []) is None
    assert md.spec.engine is None


# --- compatibility_test.go

VLLM_GPU_ONLY = {"name": "vllm", "servingModes": ["aggregated", "disaggregated"], "gpuSupport": True}
LLAMA_CPU_GPU = {"name": "llamacpp", "servingModes": ["aggregated"], "gpuSupport": True, "cpuSupport": True}

COMPATIBILITY: list[tuple[str, str, list[Provider], str, str, int, str | None]] = [
    # (subcase, provider name, configs, engine, mode, gpu count, problem)
    ("no provider name, no configs: skip all checks", "", [], "vllm", "aggregated", 0, None),
    (
        "no provider name + configs without CPU support: GPU required",
        "",
        [provider("kaito", VLLM_GPU_ONLY)],
        "vllm",
        "aggregated",
        0,
        "vllm engine requires GPU (set resources.gpu.count > 0)",
    ),
    ("no provider name + configs with CPU support: ok", "", [provider("any", LLAMA_CPU_GPU)], "llamacpp", "aggregated", 0, None),
    ("provider config nil: skip checks", "kaito", [], "vllm", "aggregated", 1, None),
    (
        "engine not supported by named provider",
        "kaito",
        [provider("kaito", VLLM_GPU_ONLY)],
        "llamacpp",
        "aggregated",
        1,
        "provider kaito does not support engine llamacpp",
    ),
    (
        "serving mode not supported by engine",
        "kaito",
        [provider("kaito", LLAMA_CPU_GPU)],
        "llamacpp",
        "disaggregated",
        1,
        "provider kaito does not support disaggregated mode for engine llamacpp",
    ),
    (
        "aggregated + gpu=0 + no CPU support: GPU required",
        "kaito",
        [provider("kaito", VLLM_GPU_ONLY)],
        "vllm",
        "aggregated",
        0,
        "vllm engine on provider kaito requires GPU (set resources.gpu.count > 0)",
    ),
    ("aggregated + gpu=0 + CPU support: ok", "kaito", [provider("kaito", LLAMA_CPU_GPU)], "llamacpp", "aggregated", 0, None),
    (
        "disaggregated bypasses CPU check (no GPURequired even with gpu=0)",
        "kaito",
        [provider("kaito", VLLM_GPU_ONLY)],
        "vllm",
        "disaggregated",
        0,
        None,
    ),
    ("GPU set: no GPURequired even on GPU-only engine", "kaito", [provider("kaito", VLLM_GPU_ONLY)], "vllm", "aggregated", 2, None),
]


@pytest.mark.parametrize(
    ("subcase", "named", "configs", "engine", "mode", "gpus", "problem"), COMPATIBILITY, ids=[c[0] for c in COMPATIBILITY]
)
def test_check_provider_compatibility(
    subcase: str, named: str, configs: list[Provider], engine: str, mode: str, gpus: int, problem: str | None
) -> None:
    """upstream: TestCheckProviderCompatibility/<subcase>"""
    spec: dict[str, Any] = {"model": QWEN, "engine": {"type": engine}, "serving": {"mode": mode}}
    if named:
        spec["provider"] = {"name": named}
    if gpus:
        spec["resources"] = {"gpu": {"count": gpus}}
    assert compatibility(deployment(spec), engine, configs) == problem


def test_check_provider_compatibility_is_what_selection_reports() -> None:
    """upstream: TestCheckProviderCompatibility/engine not supported by named provider (as the reconciler reports it)"""
    md = deployment({"model": QWEN, "engine": {"type": "llamacpp"}, "provider": {"name": "kaito"}, "resources": ONE_GPU})
    decision = select(md, 4, None, [provider("kaito", VLLM_GPU_ONLY)]).decision
    assert isinstance(decision, SelectionFailed)
    assert (decision.stage, decision.message) == ("validation", "Validation failed: provider kaito does not support engine llamacpp")
    assert decision.status.phase == "Failed"
    assert {c.type: (c.status, c.reason) for c in decision.status.conditions}["Validated"] == ("False", "ValidationFailed")
