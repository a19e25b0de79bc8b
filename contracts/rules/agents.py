"""AgentProviderConfig and AgentDeployment rules: catalog annotation, binding, overrides."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from contracts.agents import ANNOTATION_AGENT_CATALOG, AgentDeployment, AgentProviderConfig, CatalogEntry
from contracts.documents import MAX_DEPTH, TooDeep, check_depth
from contracts.meta import is_dns1035_label
from contracts.problems import Problem, at, from_validation_error, type_name
from contracts.rules.overrides import check_overrides
from contracts.rules.urls import base_url_problem

BINDINGS = ("deploymentRef", "gatewayEndpoint", "externalAPI")


def annotation_path(key: str) -> str:
    return f'metadata.annotations["{key}"]'


def parse_catalog(text: str) -> tuple[list[CatalogEntry], list[Problem]]:
    """The agent catalog annotation: a JSON array of items with unique `name` and non-empty `title`."""
    base = annotation_path(ANNOTATION_AGENT_CATALOG)
    try:
        items: Any = json.loads(text)
        check_depth(items)  # pydantic and our messages recurse into it: bounded like every document
    except (RecursionError, TooDeep):
        return [], [Problem(path=base, message=f"must be JSON nested at most {MAX_DEPTH} levels deep")]
    except json.JSONDecodeError as exc:
        return [], [Problem(path=base, message=f"must be valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")]
    if not isinstance(items, list):
        return [], [Problem(path=base, message=f"must be a JSON array of catalog items (got {type_name(items)})")]
    entries: list[CatalogEntry] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        try:
            entry = CatalogEntry.model_validate(item)
        except ValidationError as exc:
            problems += [
                Problem(path=f"{base}[{i}]" + (f".{p.path}" if p.path else ""), message=p.message)
                for p in from_validation_error(exc, CatalogEntry)
            ]
            continue
        if entry.title.strip() == "":
            problems.append(Problem(path=f"{base}[{i}].title", message="must not be empty"))
        if entry.name in seen:
            problems.append(Problem(path=f"{base}[{i}].name", message=f'duplicate catalog name "{entry.name}" (also [{seen[entry.name]}])'))
        else:
            seen[entry.name] = i
        entries.append(entry)
    return entries, problems


def check_provider_config(config: AgentProviderConfig) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    annotations = config.metadata.annotations or {}
    if ANNOTATION_AGENT_CATALOG in annotations:
        problems += parse_catalog(annotations[ANNOTATION_AGENT_CATALOG])[1]
    caps = config.spec.capabilities
    if caps.backend == "container" and caps.requiresOperator:
        warnings.append("spec.capabilities.requiresOperator has no effect with backend container")
    if caps.writableRootFilesystem is not None and caps.backend != "container":
        warnings.append("spec.capabilities.writableRootFilesystem only applies to backend container")
    return problems, warnings


def check_provider_config_update(old: AgentProviderConfig, new: AgentProviderConfig) -> list[Problem]:
    if old.spec.capabilities.backend != new.spec.capabilities.backend:
        return [at(["spec", "capabilities", "backend"], "backend is immutable")]
    return []


def chosen_binding(deployment: AgentDeployment) -> list[str]:
    return [mode for mode in BINDINGS if getattr(deployment.spec.model, mode) is not None]


def check_deployment(deployment: AgentDeployment, *, creating: bool = True) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    if creating and not is_dns1035_label(deployment.metadata.name):
        problems.append(
            at(
                ["metadata", "name"],
                "must be a DNS-1035 label of at most 63 characters so derived workload names "
                "and labels stay within Kubernetes' 63-character label-value limit",
            )
        )
    if len(chosen_binding(deployment)) != 1:
        problems.append(at(["spec", "model"], "exactly one of deploymentRef, gatewayEndpoint, or externalAPI must be set"))
    external = deployment.spec.model.externalAPI
    if external is not None:
        why = base_url_problem(external.baseURL)
        if why is not None:
            problems.append(at(["spec", "model", "externalAPI", "baseURL"], why))
    provider = deployment.spec.provider
    if provider and provider.overrides is not None:
        problems += check_overrides(provider.overrides, ["spec", "provider", "overrides"], free_form=False)
    return problems, []


def check_deployment_update(old: AgentDeployment, new: AgentDeployment) -> list[Problem]:
    if old.spec.framework.name != new.spec.framework.name:
        return [at(["spec", "framework", "name"], "framework selection is immutable; create a new AgentDeployment to switch frameworks")]
    return []
