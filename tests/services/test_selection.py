"""Engine and provider selection, table-driven (pure: no NATS)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, SelectionFailed
from contracts.providerconfig import InferenceProviderConfigSpec
from services.selector.decide import Provider, rules_status, select
from services.workload.providers import builtin_configs
from tests.contracts.cases import DELETE, MD, changed


def builtins(*, unready: tuple[str, ...] = ()) -> list[Provider]:
    return [
        Provider(c["metadata"]["name"], InferenceProviderConfigSpec.model_validate(c["spec"]), c["metadata"]["name"] not in unready)
        for c in builtin_configs()
    ]


def provider(name: str, engines: list[dict[str, Any]], rules: list[dict[str, Any]] | None = None, ready: bool = True) -> Provider:
    spec = InferenceProviderConfigSpec.model_validate({"capabilities": {"engines": engines}, "selectionRules": rules or []})
    return Provider(name, spec, ready)


GPU_VLLM = {"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True}


def md(changes: dict[str, Any]) -> ModelDeployment:
    verdict = admit(changed(MD, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return verdict.obj


BASE = {"spec.engine": DELETE, "spec.resources": DELETE}

OUTCOMES: list[tuple[str, dict[str, Any], list[Provider], str, str]] = [
    # AI Runway's worked outcomes with the five built-in providers ready
    ("model id only: CPU, so llama.cpp on KAITO", BASE, builtins(), "llamacpp", "kaito"),
    ("vllm with the default GPU: Dynamo (50)", {"spec.resources": DELETE}, builtins(), "vllm", "dynamo"),
    ("vllm on two GPUs: KubeRay (80)", {"spec.resources.gpu.count": 2}, builtins(), "vllm", "kuberay"),
    (
        "vllm disaggregated: Dynamo (90)",
        {
            "spec.resources": DELETE,
            "spec.serving": {"mode": "disaggregated"},
            "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 1}}},
        },
        builtins(),
        "vllm",
        "dynamo",
    ),
    ("sglang: Dynamo (100)", {"spec.engine.type": "sglang"}, builtins(), "sglang", "dynamo"),
    ("trtllm: Dynamo (100)", {"spec.engine.type": "trtllm"}, builtins(), "trtllm", "dynamo"),
    ("Dynamo not installed: the first name at priority 0", {}, builtins(unready=("dynamo",)), "vllm", "kaito"),
    ("explicit provider wins", {"spec.provider": {"name": "llmd"}}, builtins(), "vllm", "llmd"),
    ("auto engine prefers vllm on GPU", {"spec.engine": DELETE}, builtins(), "vllm", "dynamo"),
    (
        "rules see the resolved engine",
        {"spec.engine": DELETE},
        [provider("a", [GPU_VLLM]), provider("b", [GPU_VLLM], [{"condition": "spec.engine.type == 'vllm'", "priority": 10}])],
        "vllm",
        "b",
    ),
    (
        "explicit engine picks among providers offering it",
        {},
        [
            provider("vllm-provider", [GPU_VLLM], [{"condition": "true", "priority": 10}]),
            provider(
                "sglang-provider",
                [{"name": "sglang", "servingModes": ["aggregated"], "gpuSupport": True}],
                [{"condition": "true", "priority": 100}],
            ),
        ],
        "vllm",
        "vllm-provider",
    ),
    ("ties go to the first name", {}, [provider("zeta", [GPU_VLLM]), provider("alpha", [GPU_VLLM])], "vllm", "alpha"),
    (
        "highest matching rule wins",
        {},
        [
            provider("a", [GPU_VLLM], [{"condition": "true", "priority": 50}]),
            provider("b", [GPU_VLLM], [{"condition": "true", "priority": 80}]),
        ],
        "vllm",
        "b",
    ),
    (
        "a non-matching rule scores 0",
        {},
        [
            provider("a", [GPU_VLLM], [{"condition": "false", "priority": 99}]),
            provider("b", [GPU_VLLM], [{"condition": "true", "priority": 1}]),
        ],
        "vllm",
        "b",
    ),
    (
        "a rule that fails to compile counts as false",
        {},
        [
            provider("a", [GPU_VLLM], [{"condition": "spec.(", "priority": 99}]),
            provider("b", [GPU_VLLM], [{"condition": "true", "priority": 1}]),
        ],
        "vllm",
        "b",
    ),
    (
        "a rule that fails to evaluate counts as false",
        {},
        [
            provider("a", [GPU_VLLM], [{"condition": "spec.nowhere.count > 1", "priority": 99}]),
            provider("b", [GPU_VLLM], [{"condition": "true", "priority": 1}]),
        ],
        "vllm",
        "b",
    ),
    ("unready providers are not candidates", {}, [provider("a", [GPU_VLLM], ready=False), provider("b", [GPU_VLLM])], "vllm", "b"),
    (
        "CPU deployments skip GPU-only engines",
        {"spec.engine": DELETE, "spec.resources": DELETE},
        [provider("gpu", [GPU_VLLM]), provider("cpu", [{"name": "llamacpp", "servingModes": ["aggregated"], "cpuSupport": True}])],
        "llamacpp",
        "cpu",
    ),
    (
        "serving modes filter",
        {
            "spec.resources": DELETE,
            "spec.serving": {"mode": "disaggregated"},
            "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 1}}},
        },
        [
            provider("agg", [GPU_VLLM]),
            provider("disagg", [{"name": "vllm", "servingModes": ["aggregated", "disaggregated"], "gpuSupport": True}]),
        ],
        "vllm",
        "disagg",
    ),
    ("an external provider can be explicit", {"spec.provider": {"name": "acme"}}, [provider("acme", [GPU_VLLM])], "vllm", "acme"),
]


@pytest.mark.parametrize(("case", "changes", "providers", "engine", "chosen"), OUTCOMES, ids=[o[0] for o in OUTCOMES])
def test_selection(case: str, changes: dict[str, Any], providers: list[Provider], engine: str, chosen: str) -> None:
    decision = select(md(changes), 1, None, providers).decision
    assert isinstance(decision, ProviderSelected), decision
    assert (decision.engine, decision.provider) == (engine, chosen)
    assert [c.status for c in decision.status.conditions] == ["True", "True", "True"]


FAILURES: list[tuple[str, dict[str, Any], list[Provider], str, str]] = [
    (
        "no providers registered",
        {},
        [],
        "provider",
        "Provider selection failed: no providers registered (InferenceProviderConfig resources not found)",
    ),
    (
        "no healthy providers",
        {},
        [provider("a", [GPU_VLLM], ready=False)],
        "provider",
        "Provider selection failed: no healthy providers available",
    ),
    (
        "no compatible provider",
        {"spec.engine.type": "sglang"},
        [provider("a", [GPU_VLLM])],
        "provider",
        "Provider selection failed: no compatible provider found for this configuration",
    ),
    (
        "no engine at all",
        {"spec.engine": DELETE},
        [],
        "engine",
        "Engine selection failed: no providers registered (InferenceProviderConfig resources not found)",
    ),
    (
        "no engine for the hardware",
        {"spec.engine": DELETE, "spec.resources": DELETE},
        [provider("gpu", [GPU_VLLM])],
        "engine",
        "Engine selection failed: no engines available from registered providers "
        "(hasGPU=false, servingMode=aggregated, advertised={gpu: [vllm]})",
    ),
    (
        "named provider lacks the engine",
        {"spec.engine.type": "sglang", "spec.provider": {"name": "kaito"}},
        builtins(),
        "validation",
        "Validation failed: provider kaito does not support engine sglang",
    ),
    (
        "named provider lacks the mode",
        {
            "spec.engine.type": "trtllm",
            "spec.provider": {"name": "dynamo"},
            "spec.resources": DELETE,
            "spec.serving": {"mode": "disaggregated"},
            "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 1}}},
        },
        builtins(),
        "validation",
        "Validation failed: provider dynamo does not support disaggregated mode for engine trtllm",
    ),
    (
        "named provider needs a GPU",
        {"spec.provider": {"name": "dynamo"}, "spec.resources": {"gpu": {"count": 0}}},
        builtins(),
        "validation",
        "Validation failed: vllm engine on provider dynamo requires GPU (set resources.gpu.count > 0)",
    ),
    (
        "no provider runs this engine on CPU",
        {"spec.resources": {"gpu": {"count": 0}}},
        builtins(),
        "validation",
        "Validation failed: vllm engine requires GPU (set resources.gpu.count > 0)",
    ),
    (
        "disaggregated needs prefill and decode",
        {"spec.resources": DELETE, "spec.serving": {"mode": "disaggregated"}},
        builtins(),
        "validation",
        "Validation failed: spec.scaling: disaggregated mode requires scaling.prefill and scaling.decode",
    ),
]


@pytest.mark.parametrize(("case", "changes", "providers", "stage", "message"), FAILURES, ids=[f[0] for f in FAILURES])
def test_selection_failures_say_what_to_change(
    case: str, changes: dict[str, Any], providers: list[Provider], stage: str, message: str
) -> None:
    doc = changed(MD, changes)
    verdict = admit(doc)
    model = verdict.obj if isinstance(verdict.obj, ModelDeployment) else ModelDeployment.model_validate(doc)  # created without the webhook
    decision = select(model, 3, None, providers).decision
    assert isinstance(decision, SelectionFailed)
    assert (decision.stage, decision.message) == (stage, message)
    reasons = {c.type: (c.status, c.reason) for c in decision.status.conditions}
    if stage == "validation":
        assert reasons["Validated"] == ("False", "ValidationFailed") and decision.status.phase == "Failed"
    elif stage == "engine":
        assert reasons["EngineSelected"] == ("False", "SelectionFailed") and decision.status.phase is None
    else:
        assert reasons["ProviderSelected"] == ("False", "SelectionFailed") and decision.status.phase is None
    assert all(c.observedGeneration == 3 for c in decision.status.conditions)


def test_selection_is_sticky() -> None:
    first = select(md({}), 1, None, builtins()).decision
    assert isinstance(first, ProviderSelected) and first.provider == "dynamo"
    better = [*builtins(), provider("aaa", [GPU_VLLM], [{"condition": "true", "priority": 1000}])]
    again = select(md({"spec.scaling": {"replicas": 3}}), 2, first, better).decision
    assert isinstance(again, ProviderSelected)
    assert (again.provider, again.provider_reason) == ("dynamo", first.provider_reason)
    assert again.generation == 2


def test_auto_selected_engine_is_sticky() -> None:
    first = select(md({"spec.engine": DELETE}), 1, None, builtins()).decision
    assert isinstance(first, ProviderSelected) and first.engine == "vllm" and not first.explicit_engine
    only_cpu = [provider("cpu", [{"name": "llamacpp", "servingModes": ["aggregated"], "cpuSupport": True, "gpuSupport": True}])]
    again = select(md({"spec.engine": DELETE}), 2, first, only_cpu).decision
    assert isinstance(again, ProviderSelected) and again.engine == "vllm"


def test_changing_the_explicit_provider_switches_providers() -> None:
    first = select(md({"spec.provider": {"name": "dynamo"}}), 1, None, builtins()).decision
    assert isinstance(first, ProviderSelected) and first.provider == "dynamo"
    switched = select(md({"spec.provider": {"name": "kuberay"}}), 2, first, builtins()).decision
    assert isinstance(switched, ProviderSelected)
    assert (switched.provider, switched.explicit_provider, switched.provider_reason) == ("kuberay", True, "explicit provider selection")


def test_status_fields_and_reasons() -> None:
    decision = select(md({"spec.engine": DELETE}), 4, None, builtins()).decision
    assert isinstance(decision, ProviderSelected)
    assert decision.status.fields == {
        "engine": {"type": "vllm", "selectedReason": "auto-selected from provider dynamo capabilities"},
        "provider": {"name": "dynamo", "selectedReason": "matched capabilities: engine=vllm, gpu=true, mode=aggregated; rule priority 50"},
    }
    reasons = {c.type: (c.reason, c.message) for c in decision.status.conditions}
    assert reasons["EngineSelected"] == ("AutoSelected", "Engine vllm auto-selected from provider capabilities")
    assert reasons["ProviderSelected"] == ("AutoSelected", "Provider dynamo auto-selected")
    explicit = select(md({"spec.provider": {"name": "vllm"}}), 1, None, builtins()).decision
    assert {c.type: c.reason for c in explicit.status.conditions} == {
        "Validated": "ValidationPassed",
        "EngineSelected": "ExplicitSelection",
        "ProviderSelected": "ExplicitSelection",
    }


def test_provider_status_names_the_failing_rule() -> None:
    broken = provider("a", [GPU_VLLM], [{"condition": "true", "priority": 1}, {"condition": "spec.(", "priority": 2}])
    status = rules_status(broken, [], 1)
    condition = status.conditions[0]
    assert (condition.type, condition.status, condition.reason) == ("SelectionRulesValid", "False", "RuleCompileFailed")
    assert condition.message.startswith("selectionRules[1] (spec.() does not compile")
    outcome = select(md({}), 1, None, [provider("b", [GPU_VLLM], [{"condition": "spec.nowhere.count > 1", "priority": 9}])])
    failures = outcome.rule_failures["b"]
    assert failures[0].index == 0 and "failed to evaluate" in failures[0].error
    evaluated = rules_status(provider("b", [GPU_VLLM], [{"condition": "spec.nowhere.count > 1", "priority": 9}]), failures, 1).conditions[0]
    assert evaluated.reason == "RuleEvaluationFailed" and "counted as false" in evaluated.message
    assert rules_status(provider("c", [GPU_VLLM], [{"condition": "true"}]), [], 1).conditions[0].status == "True"


def test_builtin_configs_are_ai_runways() -> None:
    configs = {c["metadata"]["name"]: c for c in builtin_configs()}
    assert set(configs) == {"vllm", "dynamo", "kaito", "kuberay", "llmd"}
    assert configs["kuberay"]["spec"]["selectionRules"] == [
        {"condition": "has(spec.resources.gpu) && spec.resources.gpu.count > 1 && spec.engine.type == 'vllm'", "priority": 80}
    ]
    for config in configs.values():
        annotations = config["metadata"]["annotations"]
        assert {"airunway.ai/display-name", "airunway.ai/installation", "airunway.ai/health", "airunway.ai/documentation"} <= set(
            annotations
        )
        assert admit(config).ok
