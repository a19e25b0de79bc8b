"""AI Runway's InferenceProviderConfig tests, ported: the capability helpers and the legacy
capability migration, with their inputs and expected outcomes, run against Jetway's contract
(`contracts/providerconfig.py`), its admission and the selection that reads it.

Sources (ai-runway/airunway b0d3fb7): controller/api/v1alpha1/inferenceproviderconfig_test.go and
controller/internal/controller/migration_test.go. Upstream rewrites legacy objects once, at start-up,
through the API server; Jetway migrates a legacy config wherever one is read (admission, `jetway
validate`, the watcher), so its migration tests here are of the pure function and of admission.
The ones about the API server itself (list and update errors, conflicts, leader election) have
nothing to port.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, SelectionFailed
from contracts.providerconfig import (
    Capabilities,
    EngineCapability,
    InferenceProviderConfig,
    api_format_problem,
    migrate_legacy_capabilities,
)
from tests.support.cli import run_jetway


def capabilities(*engines: dict[str, Any]) -> Capabilities:
    return Capabilities.model_validate({"engines": list(engines)})


# --- inferenceproviderconfig_test.go

VLLM_GPU = {"name": "vllm", "gpuSupport": True}
LLAMA_BOTH = {"name": "llamacpp", "gpuSupport": True, "cpuSupport": True}


def test_has_engine() -> None:
    """upstream: TestHasEngine"""
    caps = capabilities(VLLM_GPU, LLAMA_BOTH)
    assert caps.engine("vllm") is not None and caps.engine("llamacpp") is not None
    assert caps.engine("sglang") is None and caps.engine("trtllm") is None


def test_has_engine_empty() -> None:
    """upstream: TestHasEngine_Empty"""
    assert Capabilities().engine("vllm") is None


def test_has_engine_nil() -> None:
    """upstream: TestHasEngine_Nil (a config without capabilities offers no engine)"""
    from services.selector.decide import Provider

    config = InferenceProviderConfig.model_validate({"metadata": {"name": "bare"}, "spec": {}})
    assert Provider("bare", config.spec, True).engine("vllm") is None


def test_get_engine_capability() -> None:
    """upstream: TestGetEngineCapability"""
    caps = capabilities({**VLLM_GPU, "servingModes": ["aggregated"]}, {**LLAMA_BOTH, "servingModes": ["aggregated"]})
    vllm = caps.engine("vllm")
    assert vllm is not None and vllm.name == "vllm" and vllm.gpuSupport and not vllm.cpuSupport
    llama = caps.engine("llamacpp")
    assert llama is not None and llama.cpuSupport
    assert caps.engine("sglang") is None


def test_get_engine_capability_nil() -> None:
    """upstream: TestGetEngineCapability_Nil"""
    assert Capabilities(engines=None).engine("vllm") is None


def test_supports_serving_mode() -> None:
    """upstream: TestSupportsServingMode"""
    caps = capabilities(
        {"name": "vllm", "servingModes": ["aggregated", "disaggregated"], "gpuSupport": True},
        {"name": "trtllm", "servingModes": ["aggregated"], "gpuSupport": True},
    )
    assert caps.serves("vllm", "aggregated") and caps.serves("vllm", "disaggregated")
    assert caps.serves("trtllm", "aggregated") and not caps.serves("trtllm", "disaggregated")
    assert not caps.serves("sglang", "aggregated")  # a missing engine serves no mode


def test_engine_capability_supports_serving_mode() -> None:
    """upstream: TestEngineCapability_SupportsServingMode"""
    engine = EngineCapability.model_validate({"name": "vllm", "servingModes": ["aggregated"]})
    assert engine.serves("aggregated") and not engine.serves("disaggregated")


def test_engine_capability_without_serving_modes_serves_none() -> None:
    """upstream: TestEngineCapability_SupportsServingMode (nil: no mode)

    An engine that lists no serving mode is never selected, as upstream's SupportsServingMode
    decides; admission says so in a warning.
    """
    from services.selector.decide import Provider, select
    from tests.contracts.cases import MD

    engine = EngineCapability.model_validate({"name": "vllm", "gpuSupport": True})
    assert not engine.serves("aggregated") and not engine.serves("disaggregated")
    doc = {"apiVersion": "airunway.ai/v1alpha1", "kind": "InferenceProviderConfig", "metadata": {"name": "modeless"}}
    verdict = admit({**doc, "spec": {"capabilities": {"engines": [{"name": "vllm", "gpuSupport": True}]}}})
    assert verdict.ok and any("spec.capabilities.engines[0].servingModes" in w for w in verdict.warnings), verdict.warnings
    md = admit(MD).obj
    assert isinstance(verdict.obj, InferenceProviderConfig) and isinstance(md, ModelDeployment)
    decision = select(md, 1, None, [Provider("modeless", verdict.obj.spec, True)]).decision
    assert isinstance(decision, SelectionFailed)
    assert decision.message == "Provider selection failed: no compatible provider found for this configuration"


def test_supports_gpu() -> None:
    """upstream: TestSupportsGPU"""
    caps = capabilities(VLLM_GPU, LLAMA_BOTH)
    assert caps.supports_gpu("vllm") and caps.supports_gpu("llamacpp") and not caps.supports_gpu("sglang")


def test_supports_cpu() -> None:
    """upstream: TestSupportsCPU"""
    caps = capabilities(VLLM_GPU, LLAMA_BOTH)
    assert not caps.supports_cpu("vllm") and caps.supports_cpu("llamacpp") and not caps.supports_cpu("sglang")


def test_engine_names() -> None:
    """upstream: TestEngineNames"""
    assert capabilities({"name": "vllm"}, {"name": "sglang"}, {"name": "trtllm"}).engine_names() == ["vllm", "sglang", "trtllm"]


def test_engine_names_empty() -> None:
    """upstream: TestEngineNames_Empty"""
    assert Capabilities().engine_names() == []


def test_engine_names_nil() -> None:
    """upstream: TestEngineNames_Nil (a config without capabilities advertises nothing)"""
    from services.selector.decide import Provider, select_engine
    from tests.contracts.cases import DELETE, MD, changed

    bare = Provider("bare", InferenceProviderConfig.model_validate({"metadata": {"name": "bare"}, "spec": {}}).spec, True)
    md = admit(changed(MD, {"spec.engine": DELETE})).obj
    assert isinstance(md, ModelDeployment)
    assert select_engine(md, None, [bare]) == (
        "no engines available from registered providers (hasGPU=true, servingMode=aggregated, advertised={})"
    )


ALL = ["openai-chat", "openai-responses", "anthropic-messages"]


def test_engine_capability_supports_api_format() -> None:
    """upstream: TestEngineCapability_SupportsAPIFormat"""
    engine = EngineCapability.model_validate({"name": "vllm", "apiFormats": ALL})
    assert all(engine.supports_api_format(f) for f in ALL)


def test_engine_capability_supports_api_format_empty_defaults_to_chat() -> None:
    """upstream: TestEngineCapability_SupportsAPIFormat_EmptyDefaultsToChat"""
    engine = EngineCapability.model_validate({"name": "vllm", "apiFormats": []})
    assert engine.supports_api_format("openai-chat")
    assert not engine.supports_api_format("openai-responses") and not engine.supports_api_format("anthropic-messages")


def test_engine_capability_supports_api_format_nil_formats() -> None:
    """upstream: TestEngineCapability_SupportsAPIFormat_NilFormats"""
    engine = EngineCapability.model_validate({"name": "vllm"})
    assert engine.supports_api_format("openai-chat") and not engine.supports_api_format("anthropic-messages")


def test_engine_capability_supports_api_format_nil() -> None:
    """upstream: TestEngineCapability_SupportsAPIFormat_Nil (a missing engine supports no format)"""
    assert not capabilities(VLLM_GPU).supports_api_format("sglang", "openai-chat")


def test_engine_capability_effective_api_formats() -> None:
    """upstream: TestEngineCapability_EffectiveAPIFormats"""
    engine = EngineCapability.model_validate({"name": "vllm", "apiFormats": ["openai-chat", "anthropic-messages"]})
    assert engine.effective_api_formats() == ["openai-chat", "anthropic-messages"]


def test_engine_capability_effective_api_formats_empty_materializes_chat() -> None:
    """upstream: TestEngineCapability_EffectiveAPIFormats_EmptyMaterializesChat"""
    assert EngineCapability.model_validate({"name": "vllm"}).effective_api_formats() == ["openai-chat"]


def test_engine_capability_effective_api_formats_nil() -> None:
    """upstream: TestEngineCapability_EffectiveAPIFormats_Nil"""
    assert capabilities(VLLM_GPU).effective_api_formats("sglang") is None


def test_provider_capabilities_supports_api_format() -> None:
    """upstream: TestProviderCapabilities_SupportsAPIFormat"""
    caps = capabilities({"name": "vllm", "apiFormats": ALL}, {"name": "llamacpp", "apiFormats": ["openai-chat"]})
    assert caps.supports_api_format("vllm", "anthropic-messages")
    assert not caps.supports_api_format("llamacpp", "anthropic-messages")
    assert not caps.supports_api_format("sglang", "openai-chat")


def test_provider_capabilities_effective_api_formats() -> None:
    """upstream: TestProviderCapabilities_EffectiveAPIFormats"""
    caps = capabilities({"name": "vllm"})
    assert caps.effective_api_formats("vllm") == ["openai-chat"]
    assert caps.effective_api_formats("sglang") is None


VALID_FORMATS = [
    ("vllm", ALL),
    ("sglang", ["openai-chat", "anthropic-messages"]),
    ("llamacpp", ["openai-chat"]),
    ("trtllm", ["openai-chat", "openai-responses"]),
    ("vllm", []),
]


@pytest.mark.parametrize(("engine", "formats"), VALID_FORMATS)
def test_validate_api_formats_for_engine(engine: str, formats: list[str]) -> None:
    """upstream: TestValidateAPIFormatsForEngine"""
    assert api_format_problem(engine, formats) is None


INVALID_FORMATS = [
    ("trtllm", ["openai-chat", "anthropic-messages"], 'engine "trtllm" does not support API format "anthropic-messages"'),
    ("sglang", ["openai-responses"], 'engine "sglang" does not support API format "openai-responses"'),
    ("llamacpp", ["openai-chat", "anthropic-messages"], 'engine "llamacpp" does not support API format "anthropic-messages"'),
]


@pytest.mark.parametrize(("engine", "formats", "problem"), INVALID_FORMATS)
def test_validate_api_formats_for_engine_invalid(engine: str, formats: list[str], problem: str) -> None:
    """upstream: TestValidateAPIFormatsForEngine_Invalid"""
    assert api_format_problem(engine, formats) == problem
    # upstream's API server accepts such a config; Jetway admits it too, and warns
    doc = {"apiVersion": "airunway.ai/v1alpha1", "kind": "InferenceProviderConfig", "metadata": {"name": "p"}}
    engines = [{"name": engine, "servingModes": ["aggregated"], "gpuSupport": True, "apiFormats": formats}]
    verdict = admit({**doc, "spec": {"capabilities": {"engines": engines}}})
    assert verdict.ok and any(problem in w for w in verdict.warnings), verdict.warnings


def test_validate_api_formats_for_engine_unknown_engine() -> None:
    """upstream: TestValidateAPIFormatsForEngine_UnknownEngine"""
    assert api_format_problem("unknown", ["openai-chat"]) == 'unknown engine type "unknown"'


# --- migration_test.go: the pure migration

FLAT_KEYS = ("servingModes", "gpuSupport", "cpuSupport", "requiresCRD", "gateway")


def ipc(name: str, capabilities: Any) -> dict[str, Any]:
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "InferenceProviderConfig",
        "metadata": {"name": name},
        "spec": {"capabilities": capabilities},
    }


def test_migrate_legacy_provider_configs_flat_to_nested() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_FlatToNested"""
    legacy = {"engines": ["vllm", "llamacpp"], "servingModes": ["aggregated"], "gpuSupport": True, "cpuSupport": True}
    before = copy.deepcopy(legacy)
    migrated, kind = migrate_legacy_capabilities(legacy)
    assert kind == "migrated" and legacy == before  # pure: the input is not changed
    assert migrated == {
        "engines": [
            {"name": "vllm", "gpuSupport": True, "cpuSupport": True, "servingModes": ["aggregated"]},
            {"name": "llamacpp", "gpuSupport": True, "cpuSupport": True, "servingModes": ["aggregated"]},
        ]
    }
    # admitted as the per-engine shape, which is what is recorded and selected on
    verdict = admit(ipc("kaito", legacy))
    assert verdict.ok, verdict.problems
    assert isinstance(verdict.obj, InferenceProviderConfig)
    wire = verdict.obj.wire()["spec"]["capabilities"]
    assert [e["name"] for e in wire["engines"]] == ["vllm", "llamacpp"]
    assert wire["engines"][0]["gpuSupport"] is True and wire["engines"][1]["cpuSupport"] is True
    assert not set(FLAT_KEYS) & set(wire)


def test_migrate_legacy_provider_configs_hoists_requires_crd_and_gateway() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_HoistsRequiresCRDAndGateway"""
    gateway = {"inferencePoolNamePattern": "{name}-pool", "inferencePoolNamespace": "{namespace}"}
    legacy = {"engines": ["vllm", "llamacpp"], "servingModes": ["aggregated"], "gpuSupport": True, "requiresCRD": True, "gateway": gateway}
    migrated, kind = migrate_legacy_capabilities(legacy)
    assert kind == "migrated"
    engines = migrated["engines"]
    assert len(engines) == 2
    for engine in engines:
        assert engine["requiresCRD"] is True
        assert engine["gateway"] == gateway
    engines[0]["gateway"]["inferencePoolNamePattern"] = "mutated"
    assert engines[1]["gateway"]["inferencePoolNamePattern"] == "{name}-pool"  # each engine has its own copy
    assert gateway["inferencePoolNamePattern"] == "{name}-pool"
    assert not set(FLAT_KEYS) & set(migrated)
    verdict = admit(ipc("dynamo", legacy))
    assert verdict.ok, verdict.problems
    assert isinstance(verdict.obj, InferenceProviderConfig) and verdict.obj.spec.capabilities is not None
    for engine_capability in verdict.obj.spec.capabilities.engines or []:
        assert engine_capability.requiresCRD is True
        assert engine_capability.gateway is not None and engine_capability.gateway.inferencePoolNamePattern == "{name}-pool"


def test_migrate_legacy_provider_configs_already_migrated() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_AlreadyMigrated"""
    current = {"engines": [{"name": "vllm", "gpuSupport": True, "servingModes": ["aggregated", "disaggregated"]}]}
    migrated, kind = migrate_legacy_capabilities(current)
    assert kind is None and migrated == current


def test_migrate_legacy_provider_configs_preserves_per_engine_requires_crd_when_flat_also_present() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_PreservesPerEngineRequiresCRDWhenFlatAlsoPresent"""
    hybrid = {
        "engines": [
            {"name": "vllm", "gpuSupport": True, "requiresCRD": False},
            {"name": "llamacpp", "gpuSupport": False, "requiresCRD": True},
        ],
        "requiresCRD": True,
    }
    migrated, kind = migrate_legacy_capabilities(hybrid)
    assert kind == "hoisted"
    assert [(e["name"], e["requiresCRD"]) for e in migrated["engines"]] == [("vllm", False), ("llamacpp", True)]
    assert "requiresCRD" not in migrated


def test_migrate_legacy_provider_configs_hoists_flat_keys_from_partial_migration() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_HoistsFlatKeysFromPartialMigration"""
    partial = {
        "engines": [{"name": "vllm"}, {"name": "llamacpp", "gateway": {"inferencePoolNamePattern": "engine-owned"}}],
        "servingModes": ["aggregated"],
        "gpuSupport": True,
        "requiresCRD": True,
        "gateway": {"inferencePoolNamePattern": "{name}-pool", "inferencePoolNamespace": "{namespace}"},
    }
    migrated, kind = migrate_legacy_capabilities(partial)
    assert kind == "hoisted"
    first, second = migrated["engines"]
    assert first["gpuSupport"] is True and first["requiresCRD"] is True
    assert first["gateway"]["inferencePoolNamePattern"] == "{name}-pool"
    assert second["gateway"] == {"inferencePoolNamePattern": "engine-owned"}  # the engine's own, verbatim, not merged
    first["gateway"]["inferencePoolNamePattern"] = "mutated"
    assert second["gateway"]["inferencePoolNamePattern"] == "engine-owned"
    assert not set(FLAT_KEYS) & set(migrated)
    assert admit(ipc("partial", partial)).ok


def test_migrate_legacy_provider_configs_strips_stale_flat_keys_with_empty_engines() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_StripsStaleFlatKeysWithEmptyEngines"""
    ghost = {
        "engines": [],
        "servingModes": ["aggregated"],
        "gpuSupport": True,
        "cpuSupport": False,
        "requiresCRD": True,
        "gateway": {"inferencePoolNamePattern": "{name}-pool"},
    }
    migrated, kind = migrate_legacy_capabilities(ghost)
    assert kind == "cleaned" and migrated == {"engines": []}
    assert admit(ipc("ghost", ghost)).ok


def test_migrate_legacy_provider_configs_no_update_when_clean() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_NoUpdateWhenClean"""
    assert migrate_legacy_capabilities({"engines": []}) == ({"engines": []}, None)


def test_migrate_legacy_provider_configs_retries_after_conflict() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_RetriesAfterConflict (what the retried write holds)"""
    migrated, kind = migrate_legacy_capabilities({"engines": ["vllm"], "gpuSupport": True})
    assert kind == "migrated" and migrated == {"engines": [{"name": "vllm", "gpuSupport": True, "cpuSupport": False}]}


def test_migrate_legacy_provider_configs_update_error_propagates() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_UpdateErrorPropagates (the legacy object it writes)"""
    migrated, kind = migrate_legacy_capabilities({"engines": ["vllm"]})
    assert kind == "migrated" and migrated == {"engines": [{"name": "vllm", "gpuSupport": False, "cpuSupport": False}]}


MALFORMED = [
    ("TestMigrateLegacyProviderConfigs_FailsLoudlyOnMalformedStringEngine", {"engines": ["vllm", 42]}, "engines[1]"),
    (
        "TestMigrateLegacyProviderConfigs_FailsLoudlyOnMalformedObjectEngine",
        {"engines": [{"name": "vllm"}, "sglang"], "gpuSupport": True},
        "engines[1]",
    ),
]


@pytest.mark.parametrize(("upstream", "legacy", "where"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_migrate_legacy_provider_configs_fails_loudly_on_malformed_engine(upstream: str, legacy: dict[str, Any], where: str) -> None:
    """upstream: TestMigrateLegacyProviderConfigs_FailsLoudlyOnMalformedStringEngine, ..._FailsLoudlyOnMalformedObjectEngine"""
    with pytest.raises(ValueError, match=r"malformed engine entry at engines\[1\]"):
        migrate_legacy_capabilities(legacy)
    verdict = admit(ipc("bad", legacy))  # refused, nothing truncated or recorded
    assert not verdict.ok
    assert any(p.path == "spec.capabilities" and where in p.message for p in verdict.problems), verdict.problems


def test_migrate_legacy_provider_configs_malformed_capabilities() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_MalformedCapabilities"""
    assert migrate_legacy_capabilities("not-a-map") == ("not-a-map", None)  # left as it is ...
    verdict = admit(ipc("bad", "not-a-map"))  # ... for the schema to refuse
    assert [str(p) for p in verdict.problems] == ['spec.capabilities: must be an object (got a string: "not-a-map")']


def test_migrate_legacy_provider_configs_malformed_engines() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_MalformedEngines"""
    malformed = {"engines": {"not": "a slice"}}
    assert migrate_legacy_capabilities(malformed) == (malformed, None)
    verdict = admit(ipc("bad", malformed))
    assert [p.path for p in verdict.problems] == ["spec.capabilities.engines"]


def test_legacy_flat_values_of_the_wrong_type_are_refused() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_FlatToNested (a flat value that is not a boolean)"""
    verdict = admit(ipc("bad", {"engines": ["vllm"], "gpuSupport": "yes"}))
    assert not verdict.ok
    assert [str(p) for p in verdict.problems] == [
        'spec.capabilities: gpuSupport (legacy, now per engine) must be true or false (got a string: "yes")'
    ]


def test_legacy_capabilities_select_like_current_ones() -> None:
    """upstream: TestMigrateLegacyProviderConfigs_FlatToNested (the migrated config selects as its per-engine form)"""
    from services.selector.decide import Provider, select
    from tests.contracts.cases import MD, changed

    legacy = admit(ipc("kaito", {"engines": ["vllm", "llamacpp"], "servingModes": ["aggregated"], "gpuSupport": True, "cpuSupport": True}))
    assert isinstance(legacy.obj, InferenceProviderConfig)
    cpu = admit(changed(MD, {"spec.engine.type": "llamacpp", "spec.resources": {"cpu": "4"}})).obj
    assert isinstance(cpu, ModelDeployment)
    decision = select(cpu, 1, None, [Provider("kaito", legacy.obj.spec, True)]).decision
    assert isinstance(decision, ProviderSelected)
    assert (decision.engine, decision.provider) == ("llamacpp", "kaito")


def test_jetway_validate_accepts_legacy_flat_capabilities(tmp_path: Path) -> None:
    """upstream: TestMigrateLegacyProviderConfigs_FlatToNested (as `jetway validate` sees a legacy file)"""
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(ipc("kaito", {"engines": ["vllm", "llamacpp"], "servingModes": ["aggregated"], "gpuSupport": True})))
    result = run_jetway("validate", "-f", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "1 manifest valid" in result.stderr
