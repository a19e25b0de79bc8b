"""Engine and provider selection, pure: AI Runway's algorithm.

Engine: the explicit `spec.engine.type`, else the one already selected (sticky), else the
first of vllm > sglang > trtllm > llamacpp that a ready provider offers for the wanted
hardware (GPU when `resources.gpu.count > 0` or serving is disaggregated) and serving mode.

Provider: the explicit `spec.provider.name`, else the one already selected (sticky), else
among ready providers offering the engine for that hardware and mode, the highest priority of
a selection rule whose CEL condition holds for the spec (a rule that fails to compile or
evaluate counts as false), ties to the first name.

A pinned provider never changes: admission refuses a new `spec.provider.name` once one is named
or recorded in status (`provider.name is immutable (changing it requires delete and recreate)`),
as AI Runway does, since the old provider's objects would be orphaned. A spec that reaches
selection anyway (written without admission) is followed as written.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cel
import msgspec

from contracts.events import StatusCondition, StatusSlice
from contracts.modeldeployment import ENGINE_PREFERENCE, ModelDeployment
from contracts.pipeline import ProviderSelected, RuleFailure, SelectionFailed
from contracts.providerconfig import EngineCapability, InferenceProviderConfigSpec
from contracts.rules import dynamo as dynamo_rules
from contracts.rules import modeldeployment as md_rules
from contracts.rules.provider import compatibility_problems


@dataclass(frozen=True)
class Provider:
    name: str
    spec: InferenceProviderConfigSpec
    ready: bool

    def engine(self, name: str) -> EngineCapability | None:
        return self.spec.capabilities.engine(name) if self.spec.capabilities else None


@dataclass
class Outcome:
    decision: ProviderSelected | SelectionFailed
    rule_failures: dict[str, list[RuleFailure]] = field(default_factory=dict)  # provider → failed rules while scoring


@functools.lru_cache(maxsize=1024)
def _program(condition: str) -> tuple[Any, str | None]:
    try:
        return cel.compile(condition), None
    except (ValueError, RuntimeError) as exc:
        return None, f"does not compile: {str(exc).splitlines()[0]}"


def evaluate(condition: str, spec: dict[str, Any]) -> tuple[bool, str | None]:
    """(holds, error): an error counts as false."""
    program, error = _program(condition)
    if program is None:
        return False, error
    try:
        value = program.execute({"spec": spec})
    except (KeyError, ValueError, RuntimeError, TypeError) as exc:
        return False, f"failed to evaluate: {exc}"
    if not isinstance(value, bool):
        return False, f"returned {value!r}, not a boolean"
    return value, None


def wants_gpu(md: ModelDeployment) -> bool:
    spec = md.spec
    gpus = spec.resources.gpu.count if spec.resources and spec.resources.gpu else 0
    return gpus > 0 or mode_of(md) == "disaggregated"


def mode_of(md: ModelDeployment) -> str:
    return md.spec.serving.mode if md.spec.serving else "aggregated"


def _offers(capability: EngineCapability, gpu: bool, mode: str) -> bool:
    if gpu and not capability.gpuSupport:
        return False
    if not gpu and not capability.cpuSupport:
        return False
    return capability.serves(mode)


def failed(stage: str, message: str, generation: int, engine: tuple[str, str] | None = None) -> SelectionFailed:
    """A selection failure with the conditions AI Runway sets for it."""
    conditions: tuple[StatusCondition, ...]
    phase: str | None = None
    if stage == "validation":
        conditions = (StatusCondition.of("Validated", False, "ValidationFailed", message, generation),)
        phase = "Failed"
    elif stage == "engine":
        conditions = (StatusCondition.of("EngineSelected", False, "SelectionFailed", message, generation),)
    else:
        conditions = (
            StatusCondition.of("Validated", True, "ValidationPassed", "Schema validation passed", generation),
            StatusCondition.of("ProviderSelected", False, "SelectionFailed", message, generation),
        )
    fields = {"engine": {"type": engine[0], "selectedReason": engine[1]}} if engine else {}
    return SelectionFailed(
        generation=generation,
        stage=stage,
        message=message,
        status=StatusSlice(conditions=conditions, phase=phase, message=message if phase else None, fields=fields),
    )


IMAGE_PATH = "spec.engine.image"


def image_conflict(md: ModelDeployment, message: str, generation: int) -> SelectionFailed:
    """`spec.image` and `spec.engine.image` differ (an object that bypassed admission): Validated=False and
    ImageResolved=False/ConflictingImageFields, with the requested image (engine.image first) in status.image."""
    base = failed("validation", f"Validation failed: {message}", generation)
    requested = (md.spec.engine.image if md.spec.engine else None) or md.spec.image or ""
    conditions = (*base.status.conditions, StatusCondition.of("ImageResolved", False, "ConflictingImageFields", message, generation))
    status = msgspec.structs.replace(base.status, conditions=conditions, fields={"image": {"requested": requested, "message": message}})
    return msgspec.structs.replace(base, status=status)


def _advertised(providers: list[Provider]) -> str:
    """What the ready providers with capabilities advertise (those selection looked at, as AI Runway says)."""
    shown = [(p.name, p.spec.capabilities.engine_names()) for p in providers if p.ready and p.spec.capabilities is not None]
    return "{" + ", ".join(f"{name}: [{', '.join(engines)}]" for name, engines in shown) + "}"


def select_engine(md: ModelDeployment, previous: ProviderSelected | None, providers: list[Provider]) -> tuple[str, str, bool] | str:
    """(engine, reason, explicit), or why none could be chosen."""
    explicit = md.spec.engine.type if md.spec.engine else None
    if explicit:
        return explicit, "explicit engine selection", True
    if previous is not None and previous.engine:
        return previous.engine, previous.engine_reason, False
    if not providers:
        return "no providers registered (InferenceProviderConfig resources not found)"
    gpu, mode = wants_gpu(md), mode_of(md)
    offered: dict[str, str] = {}
    for provider in sorted(providers, key=lambda p: p.name):
        if not provider.ready or provider.spec.capabilities is None:
            continue
        for capability in provider.spec.capabilities.engines or []:
            if _offers(capability, gpu, mode):
                offered.setdefault(capability.name, provider.name)
    for engine in ENGINE_PREFERENCE:
        if engine in offered:
            return engine, f"auto-selected from provider {offered[engine]} capabilities", False
    return (
        f"no engines available from registered providers (hasGPU={str(gpu).lower()}, servingMode={mode}, "
        f"advertised={_advertised(providers)})"
    )


def compatibility(md: ModelDeployment, engine: str, providers: list[Provider]) -> str | None:
    """AI Runway's CheckProviderCompatibility: why this spec cannot run, or None."""
    if dynamo_rules.mocker(md):  # Dynamo's GPU-less test backend: AI Runway skips this check for it, vLLM only
        return dynamo_rules.engine_problem(engine)
    mode, gpu = mode_of(md), wants_gpu(md)
    named = md.spec.provider.name if md.spec.provider and md.spec.provider.name else None
    if named:
        config = next((p for p in providers if p.name == named), None)
        if config is None:
            return None  # an external provider not registered yet: nothing to check against
        gpus = md.spec.resources.gpu.count if md.spec.resources and md.spec.resources.gpu else 0
        problems = compatibility_problems(named, config.spec, engine, mode, gpus)
        return problems[0].message if problems else None
    cpu_offered = any((c := p.engine(engine)) is not None and c.cpuSupport for p in providers)
    if mode == "aggregated" and not gpu and providers and not cpu_offered:
        return f"{engine} engine requires GPU (set resources.gpu.count > 0)"
    return None


def rule_spec(md: ModelDeployment, engine: str) -> dict[str, Any]:
    """The spec as selection rules see it: defaults filled, unset fields absent, the engine resolved."""
    spec = md.spec.wire()
    spec.setdefault("engine", {})
    if not spec["engine"].get("type"):
        spec["engine"]["type"] = engine
    return spec


def select(md: ModelDeployment, generation: int, previous: ProviderSelected | None, providers: list[Provider]) -> Outcome:
    problems, _ = md_rules.check(md, creating=False)
    conflict = next((p for p in problems if p.path == IMAGE_PATH and " conflicts with spec.engine.image " in p.message), None)
    if conflict is not None:  # AI Runway checks this first, before anything is selected, and says so in ImageResolved too
        return Outcome(image_conflict(md, conflict.message, generation))
    if problems:
        return Outcome(failed("validation", f"Validation failed: {problems[0]}", generation))
    engine_choice = select_engine(md, previous, providers)
    if isinstance(engine_choice, str):
        return Outcome(failed("engine", f"Engine selection failed: {engine_choice}", generation))
    engine, engine_reason, explicit_engine = engine_choice
    problem = compatibility(md, engine, providers)
    if problem:
        return Outcome(failed("validation", f"Validation failed: {problem}", generation))
    named = md.spec.provider.name if md.spec.provider and md.spec.provider.name else None
    rule_failures: dict[str, list[RuleFailure]] = {}
    if named:
        provider, provider_reason, explicit_provider = named, "explicit provider selection", True
    elif previous is not None and previous.provider:
        provider, provider_reason, explicit_provider = previous.provider, previous.provider_reason, previous.explicit_provider
    else:
        if not providers:
            return Outcome(
                failed(
                    "provider",
                    "Provider selection failed: no providers registered (InferenceProviderConfig resources not found)",
                    generation,
                    (engine, engine_reason),
                )
            )
        ready = [p for p in providers if p.ready]
        if not ready:
            return Outcome(
                failed("provider", "Provider selection failed: no healthy providers available", generation, (engine, engine_reason))
            )
        gpu, mode = wants_gpu(md), mode_of(md)
        spec = rule_spec(md, engine)
        scored: list[tuple[int, str]] = []
        for candidate in ready:
            capability = candidate.engine(engine)
            if capability is None or not _offers(capability, gpu, mode):
                continue
            priority = 0
            for index, rule in enumerate(candidate.spec.selectionRules or []):
                holds, error = evaluate(rule.condition, spec)
                if error:
                    rule_failures.setdefault(candidate.name, []).append(RuleFailure(index, rule.condition, error))
                elif holds:
                    priority = max(priority, rule.priority)
            scored.append((priority, candidate.name))
        if not scored:
            return Outcome(
                failed(
                    "provider",
                    "Provider selection failed: no compatible provider found for this configuration",
                    generation,
                    (engine, engine_reason),
                ),
                rule_failures,
            )
        best = max(p for p, _ in scored)
        provider = min(name for p, name in scored if p == best)
        provider_reason = f"matched capabilities: engine={engine}, gpu={str(gpu).lower()}, mode={mode}; rule priority {best}"
        explicit_provider = False
    conditions = (
        StatusCondition.of("Validated", True, "ValidationPassed", "Schema validation passed", generation),
        StatusCondition.of(
            "EngineSelected",
            True,
            "ExplicitSelection" if explicit_engine else "AutoSelected",
            "Engine explicitly specified in spec" if explicit_engine else f"Engine {engine} auto-selected from provider capabilities",
            generation,
        ),
        StatusCondition.of(
            "ProviderSelected",
            True,
            "ExplicitSelection" if explicit_provider else "AutoSelected",
            "Provider explicitly specified in spec" if explicit_provider else f"Provider {provider} auto-selected",
            generation,
        ),
    )
    fields = {
        "engine": {"type": engine, "selectedReason": engine_reason},
        "provider": {"name": provider, "selectedReason": provider_reason},
    }
    decision = ProviderSelected(
        generation=generation,
        engine=engine,
        engine_reason=engine_reason,
        provider=provider,
        provider_reason=provider_reason,
        explicit_engine=explicit_engine,
        explicit_provider=explicit_provider,
        status=StatusSlice(conditions=conditions, fields=fields),
    )
    return Outcome(decision, rule_failures)


def rules_status(provider: Provider, failures: Sequence[RuleFailure], generation: int) -> StatusSlice:
    """The `SelectionRulesValid` condition a provider config carries: which rule failed, and how."""
    compile_errors = [
        RuleFailure(i, r.condition, error) for i, r in enumerate(provider.spec.selectionRules or []) if (error := _program(r.condition)[1])
    ]
    broken = compile_errors or failures
    if not broken:
        condition = StatusCondition.of("SelectionRulesValid", True, "RulesValid", "every selection rule compiles and evaluates", generation)
    else:
        reason = "RuleCompileFailed" if compile_errors else "RuleEvaluationFailed"
        message = "; ".join(f"selectionRules[{f.index}] ({f.condition}) {f.error}" for f in broken) + " (counted as false)"
        condition = StatusCondition.of("SelectionRulesValid", False, reason, message, generation)
    return StatusSlice(conditions=(condition,))
