"""The Dynamo provider's own admission rule: its GPU-less test backend, the mocker.

A ModelDeployment annotated `airunway.ai/dynamo-test-backend: mocker` and naming the `dynamo`
provider runs `python3 -m dynamo.mocker` instead of a real engine: it simulates serving without a
GPU, so the GPU rules are waived for it (admission's per-component `gpu.count` here, the provider's
GPU requirement at selection), and it simulates vLLM only, which is its own rule. The
prefill/decode blocks of a disaggregated deployment stay required: the renderer builds both workers.
"""

from __future__ import annotations

from contracts.modeldeployment import ModelDeployment
from contracts.objects import DYNAMO_TEST_BACKEND
from contracts.problems import Problem, at, field_path

MOCKER = "mocker"
MOCKER_ENGINE = "the dynamo mocker test backend only supports the vllm engine"
# admission's rules a GPU-less deployment cannot meet, waived for the mocker
WAIVED = tuple(field_path(["spec", "scaling", part, "gpu", "count"]) for part in ("prefill", "decode"))


def mocker_requested(md: ModelDeployment) -> bool:
    """The annotation asks for the mocker (what the Dynamo renderer follows, as AI Runway's provider does)."""
    return (md.metadata.annotations or {}).get(DYNAMO_TEST_BACKEND) == MOCKER


def mocker(md: ModelDeployment) -> bool:
    """The mocker on the Dynamo provider, named explicitly: only then are the GPU rules waived."""
    return mocker_requested(md) and md.spec.provider is not None and md.spec.provider.name == "dynamo"


def engine_problem(engine: str | None) -> str | None:
    """Why the mocker cannot run this engine (None: it can, or the engine is still to be chosen)."""
    return MOCKER_ENGINE if engine and engine != "vllm" else None


def check(md: ModelDeployment, problems: list[Problem]) -> list[Problem]:
    """`problems` with the mocker's waivers applied and its own rule added; unchanged for anything else."""
    if not mocker(md):
        return problems
    kept = [p for p in problems if p.path not in WAIVED]
    message = engine_problem(md.spec.engine.type if md.spec.engine else None)
    if message:
        kept.append(at(["spec", "engine", "type"], message))
    return kept
