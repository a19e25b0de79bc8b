"""AI Runway's reconciler validation table, ported: its inputs and expected errors, run against
Jetway's pure selector, which validates a deployment (the admission rules, then provider
compatibility) before choosing its engine and provider.

Source (ai-runway/airunway b0d3fb7): controller/internal/controller/validate_spec_test.go,
TestValidateSpec. Upstream's deployments there are built without the mutating webhook, so these
are too; each row is one upstream subcase, its expected error a substring of the message.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, SelectionFailed
from contracts.providerconfig import InferenceProviderConfigSpec
from services.selector.decide import Provider, select

QWEN = {"id": "Qwen/Qwen3-0.6B", "source": "huggingface"}
ONE_GPU = {"gpu": {"count": 1, "type": "nvidia.com/gpu"}}
DISAGG = {"mode": "disaggregated"}
GPU_COMPONENTS = {"prefill": {"gpu": {"count": 1}, "replicas": 1}, "decode": {"gpu": {"count": 1}, "replicas": 1}}
CPU_COMPONENTS = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}
MOCKER = {"airunway.ai/dynamo-test-backend": "mocker"}


def config(name: str, engines: list[dict[str, Any]]) -> Provider:
    return Provider(name, InferenceProviderConfigSpec.model_validate({"capabilities": {"engines": engines}}), True)


def dynamo() -> Provider:
    both = ["aggregated", "disaggregated"]
    return config(
        "dynamo",
        [
            {"name": "vllm", "gpuSupport": True, "servingModes": both},
            {"name": "sglang", "gpuSupport": True, "servingModes": both},
            {"name": "trtllm", "gpuSupport": True, "servingModes": ["aggregated"]},
        ],
    )


def kaito() -> Provider:
    return config(
        "kaito",
        [
            {"name": "vllm", "gpuSupport": True, "servingModes": ["aggregated"]},
            {"name": "llamacpp", "gpuSupport": True, "cpuSupport": True, "servingModes": ["aggregated"]},
        ],
    )


def all_providers() -> list[Provider]:
    return [dynamo(), kaito()]


def spec(engine: str | None = None, provider: str | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": QWEN}
    if engine:
        out["engine"] = {"type": engine}
    if provider:
        out["provider"] = {"name": provider}
    return {**out, **fields}


CASES: list[Any] = [
    # (subcase, spec, annotations, providers, expected error substring or None)
    ("valid: vllm aggregated with GPU on dynamo", spec("vllm", "dynamo", resources=ONE_GPU), None, all_providers(), None),
    (
        "valid: vllm disaggregated on dynamo",
        spec("vllm", "dynamo", serving=DISAGG, scaling=GPU_COMPONENTS),
        None,
        all_providers(),
        None,
    ),
    pytest.param(
        "valid: CPU-only aggregated vllm on dynamo with mocker annotation",
        spec("vllm", "dynamo"),
        MOCKER,
        all_providers(),
        None,
    ),
    pytest.param(
        "valid: CPU-only disaggregated vllm on dynamo with mocker annotation",
        spec("vllm", "dynamo", serving=DISAGG, scaling=CPU_COMPONENTS),
        MOCKER,
        all_providers(),
        None,
    ),
    pytest.param(
        "invalid: non-vllm engine on dynamo even with mocker annotation",
        spec("sglang", "dynamo"),
        MOCKER,
        all_providers(),
        "only supports the vllm engine",
    ),
    (
        "invalid: CPU-only disaggregated vllm on dynamo WITHOUT mocker annotation",
        spec("vllm", "dynamo", serving=DISAGG, scaling=CPU_COMPONENTS),
        None,
        all_providers(),
        "scaling.prefill.gpu.count > 0",
    ),
    ("valid: llamacpp CPU-only on kaito", spec("llamacpp", "kaito"), None, all_providers(), None),
    (
        "invalid: trtllm disaggregated on dynamo",
        spec("trtllm", "dynamo", serving=DISAGG, scaling=GPU_COMPONENTS),
        None,
        all_providers(),
        "does not support disaggregated mode for engine trtllm",
    ),
    (
        "invalid: provider does not support engine at all",
        spec("sglang", "kaito", resources=ONE_GPU),
        None,
        all_providers(),
        "does not support engine sglang",
    ),
    (
        "invalid: llamacpp disaggregated on kaito",
        spec("llamacpp", "kaito", serving=DISAGG, scaling=GPU_COMPONENTS),
        None,
        all_providers(),
        "does not support disaggregated mode for engine llamacpp",
    ),
    (
        "invalid: missing model.id for huggingface source",
        {"model": {"source": "huggingface"}, "engine": {"type": "vllm"}, "resources": ONE_GPU},
        None,
        all_providers(),
        # Jetway's problems are a field path and a rule: "spec.model.id: required when source is huggingface"
        "model.id: required when source is huggingface",
    ),
    ("invalid: vllm without GPU requires GPU", spec("vllm"), None, all_providers(), "vllm engine requires GPU"),
    pytest.param(
        "invalid: disaggregated mode missing prefill/decode",
        spec("vllm", "dynamo", serving=DISAGG),
        None,
        all_providers(),
        "disaggregated mode requires scaling.prefill and scaling.decode",
    ),
    (
        "invalid: disaggregated with resources.gpu set",
        spec("vllm", "dynamo", serving=DISAGG, resources={"gpu": {"count": 2}}, scaling=GPU_COMPONENTS),
        None,
        all_providers(),
        "cannot specify both resources.gpu and scaling.prefill/decode",
    ),
    ("valid: no provider specified — skips provider compatibility check", spec("vllm", resources=ONE_GPU), None, all_providers(), None),
    (
        "valid: provider not found in configs — no error (provider may not be registered yet)",
        spec("vllm", "unknown-provider", resources=ONE_GPU),
        None,
        all_providers(),
        None,
    ),
    ("valid: empty provider configs with GPU — no provider compat check", spec("vllm", "kaito", resources=ONE_GPU), None, [], None),
    ("valid: llamacpp without GPU and empty provider configs — skips GPU check", spec("llamacpp"), None, [], None),
    (
        "invalid: pinned provider lacks CPU support even when another provider has it",
        spec("vllm", "dynamo"),
        None,
        [dynamo(), config("cpu-vllm-prov", [{"name": "vllm", "cpuSupport": True, "servingModes": ["aggregated"]}])],
        "vllm engine on provider dynamo requires GPU",
    ),
    ("valid: vllm without GPU and empty provider configs — skips GPU check", spec("vllm"), None, [], None),
]


def _id(case: Any) -> str:
    return str(case.values[0] if hasattr(case, "values") else case[0])


@pytest.mark.parametrize(("subcase", "body", "annotations", "providers", "error"), CASES, ids=[_id(c) for c in CASES])
def test_validate_spec(
    subcase: str, body: dict[str, Any], annotations: dict[str, str] | None, providers: list[Provider], error: str | None
) -> None:
    """upstream: TestValidateSpec/<subcase>"""
    metadata: dict[str, Any] = {"name": "qwen", "namespace": "default", **({"annotations": annotations} if annotations else {})}
    md = ModelDeployment.model_validate({"metadata": metadata, "spec": body})
    decision = select(md, 1, None, providers).decision
    if error is None:
        # valid: nothing the user wrote is refused (with no provider registered, selection itself may still wait)
        assert not (isinstance(decision, SelectionFailed) and decision.stage == "validation"), decision
        if providers or md.spec.provider:
            assert isinstance(decision, ProviderSelected), decision
    else:
        assert isinstance(decision, SelectionFailed) and decision.stage == "validation", decision
        assert error in decision.message
        assert decision.status.phase == "Failed"


def test_validate_spec_no_engine_type() -> None:
    """upstream: TestValidateSpec/invalid: no engine type

    Upstream's reconciler selects the engine before it validates; validation refuses a spec whose
    engine neither the user nor selection resolved. Jetway selects and validates in one step: an
    engine nothing offers stops the deployment at engine selection, and it is never validated or
    given a provider.
    """
    md = ModelDeployment.model_validate({"metadata": {"name": "qwen", "namespace": "default"}, "spec": spec(resources=ONE_GPU)})
    nothing_offers_it = [config("cpu-only", [{"name": "llamacpp", "cpuSupport": True, "servingModes": ["aggregated"]}])]
    decision = select(md, 1, None, nothing_offers_it).decision
    assert isinstance(decision, SelectionFailed) and decision.stage == "engine"
    assert decision.message.startswith("Engine selection failed: no engines available from registered providers")
    resolved = select(md, 1, None, all_providers()).decision  # with providers offering one, it is resolved and valid
    assert isinstance(resolved, ProviderSelected) and resolved.engine == "vllm"


@pytest.mark.parametrize("scaling", [None, {"replicas": 1}], ids=["no scaling", "scaling without components"])
def test_disaggregated_missing_prefill_and_decode_is_one_problem(scaling: dict[str, Any] | None) -> None:
    """upstream: TestValidateSpec/invalid: disaggregated mode missing prefill/decode: one message, at spec.scaling,
    in admission as in the reconciler (one missing component is still named at its own path)."""
    body = spec("vllm", "dynamo", serving=DISAGG, **({"scaling": scaling} if scaling else {}))
    verdict = admit({"apiVersion": "airunway.ai/v1alpha1", "kind": "ModelDeployment", "metadata": {"name": "qwen"}, "spec": body})
    assert [(p.path, p.message) for p in verdict.problems] == [
        ("spec.scaling", "disaggregated mode requires scaling.prefill and scaling.decode")
    ]
    one = spec("vllm", "dynamo", serving=DISAGG, scaling={"decode": {"gpu": {"count": 1}}})
    verdict = admit({"apiVersion": "airunway.ai/v1alpha1", "kind": "ModelDeployment", "metadata": {"name": "qwen"}, "spec": one})
    assert [p.path for p in verdict.problems] == ["spec.scaling.prefill"]
