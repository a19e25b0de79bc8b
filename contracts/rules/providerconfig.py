"""InferenceProviderConfig rules: CEL selection rules that compile, well-formed annotations."""

from __future__ import annotations

import json
import re
from typing import Any

import cel
from pydantic import BaseModel, ValidationError

from contracts.documents import MAX_DEPTH, TooDeep, check_depth
from contracts.problems import PathPart, Problem, at, field_path, from_validation_error, type_name
from contracts.providerconfig import (
    ANNOTATION_CAPABILITIES,
    ANNOTATION_HEALTH,
    ANNOTATION_INSTALLATION,
    Capabilities,
    HealthInfo,
    InferenceProviderConfig,
    InstallationInfo,
    api_format_problem,
)
from contracts.rules.agents import annotation_path

_JSON_ANNOTATIONS: dict[str, type[BaseModel]] = {
    ANNOTATION_INSTALLATION: InstallationInfo,
    ANNOTATION_CAPABILITIES: Capabilities,
    ANNOTATION_HEALTH: HealthInfo,
}
PLACEHOLDER = re.compile(r"\{([^}]*)\}")


def cel_problem(expression: str) -> str | None:
    """Why a selection rule does not compile, in one line; None when it does."""
    try:
        cel.compile(expression)
    except (ValueError, RuntimeError) as exc:
        first = str(exc).splitlines()[0]
        return f"does not compile as CEL: {first}"
    return None


def check(config: InferenceProviderConfig) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    spec = config.spec
    engines = (spec.capabilities.engines or []) if spec.capabilities else []
    seen: dict[str, int] = {}
    for i, engine in enumerate(engines):
        here: list[PathPart] = ["spec", "capabilities", "engines", i]
        if engine.name in seen:
            problems.append(at([*here, "name"], f'duplicate engine "{engine.name}" (also engines[{seen[engine.name]}])'))
        seen[engine.name] = i
        modes = engine.servingModes or []
        if len(set(modes)) != len(modes):
            problems.append(at([*here, "servingModes"], "must not repeat a serving mode"))
        if not modes:
            warnings.append(
                f"{field_path([*here, 'servingModes'])}: lists no serving mode, so no ModelDeployment is served by engine "
                f"{engine.name} on this provider (list aggregated and/or disaggregated)"
            )
        formats = api_format_problem(engine.name, list(engine.apiFormats or []))
        if formats:
            warnings.append(f"{field_path([*here, 'apiFormats'])}: {formats}, which {engine.name} servers do not speak")
        gateway = engine.gateway
        if gateway:
            for field in ("inferencePoolNamePattern", "inferencePoolNamespace"):
                pattern = getattr(gateway, field)
                unknown = [p for p in PLACEHOLDER.findall(pattern or "") if p not in ("name", "namespace")]
                if unknown:
                    problems.append(
                        at([*here, "gateway", field], f"unknown placeholder {{{unknown[0]}}} (allowed: {{name}}, {{namespace}})")
                    )
    for i, rule in enumerate(spec.selectionRules or []):
        why = cel_problem(rule.condition)
        if why:
            problems.append(at(["spec", "selectionRules", i, "condition"], why))
    annotations = config.metadata.annotations or {}
    for key, model in _JSON_ANNOTATIONS.items():
        if key in annotations:
            problems += _check_json_annotation(key, annotations[key], model)
    return problems, warnings


def _check_json_annotation(key: str, text: str, model: type[BaseModel]) -> list[Problem]:
    base = annotation_path(key)
    try:
        value: Any = json.loads(text)
        check_depth(value)  # pydantic and our messages recurse into it: bounded like every document
    except (RecursionError, TooDeep):
        return [Problem(path=base, message=f"must be JSON nested at most {MAX_DEPTH} levels deep")]
    except json.JSONDecodeError as exc:
        return [Problem(path=base, message=f"must be valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")]
    if not isinstance(value, dict):
        return [Problem(path=base, message=f"must be a JSON object (got {type_name(value)})")]
    try:
        model.model_validate(value)
    except ValidationError as exc:
        return [Problem(path=f"{base}.{p.path}" if p.path else base, message=p.message) for p in from_validation_error(exc, model)]
    return []
