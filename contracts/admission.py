"""Admission: a raw manifest in, a defaulted typed object or every problem with it out.

The one door every manifest passes through: `judge` is the whole pipeline, called by the apply API
(the watcher), the Kubernetes admission webhook, cluster ingest, the cluster console and `jetway validate`
/ `jetway render`, so they accept and refuse exactly the same things with the same words. Each caller
passes only what it may know (`Known`): offline, nothing; the watcher, what is stored and the providers
it folded; the webhook, the old object and the provider the API server gave it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.kinds import AIRDRESS_GROUP, KINDS, KindInfo
from contracts.meta import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX, WireModel, is_dns_label, is_dns_subdomain
from contracts.modeldeployment import ModelDeployment
from contracts.poolmember import InferencePoolMember
from contracts.problems import PathPart, Problem, at, field_path, from_validation_error, show, type_name
from contracts.providerconfig import InferenceProviderConfig
from contracts.rules import agents as agent_rules
from contracts.rules import modeldeployment as md_rules
from contracts.rules import poolmember as member_rules
from contracts.rules import providerconfig as ipc_rules
from contracts.rules.provider import ProviderLookup, check_named_provider, provider_to_check
from contracts.rules.urls import refused_address, url_host

PLACEHOLDER_PREFIX = "PLACEHOLDER-"


@dataclass
class Admission:
    """The verdict on one manifest."""

    kind: str | None
    name: str | None
    obj: WireModel | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.obj is not None

    def refuse(self, problems: list[Problem]) -> None:
        """Add problems found beside admission; one already reported is not said twice (the update rules and
        the provider recorded in status both refuse a provider switch)."""
        self.problems += [p for p in problems if p not in self.problems]

    @property
    def label(self) -> str:
        return f"{self.kind or '(unknown kind)'}/{self.name or '(unnamed)'}"


Checker = Callable[[Any, bool], tuple[list[Problem], list[str]]]
Defaulter = Callable[[Any], Any]
UpdateChecker = Callable[[Any, Any], list[Problem]]


def _identity(obj: Any) -> Any:
    return obj


_DEFAULTS: dict[str, Defaulter] = {
    "ModelDeployment": md_rules.with_defaults,
    "InferencePoolMember": member_rules.with_defaults,
}
_CHECKS: dict[str, Checker] = {
    "ModelDeployment": lambda obj, creating: md_rules.check(obj, creating=creating),
    "InferencePoolMember": lambda obj, creating: member_rules.check(obj),
    "InferenceProviderConfig": lambda obj, creating: ipc_rules.check(obj),
    "AgentProviderConfig": lambda obj, creating: agent_rules.check_provider_config(obj),
    "AgentDeployment": lambda obj, creating: agent_rules.check_deployment(obj, creating=creating),
}
_UPDATE_CHECKS: dict[str, UpdateChecker] = {
    "ModelDeployment": md_rules.check_update,
    "AgentProviderConfig": agent_rules.check_provider_config_update,
    "AgentDeployment": agent_rules.check_deployment_update,
}


def placeholders(value: Any, path: tuple[PathPart, ...] = ()) -> list[Problem]:
    """Every `PLACEHOLDER-*` value still in a manifest copied from the spec's minimal example."""
    if isinstance(value, str) and value.startswith(PLACEHOLDER_PREFIX):
        return [at(path, f'"{value}" is a placeholder value still to be replaced with your own')]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in placeholders(item, (*path, str(key)))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in placeholders(item, (*path, i))]
    return []


def _kind_of(doc: dict[str, Any]) -> tuple[KindInfo | None, list[Problem]]:
    kind = doc.get("kind")
    if kind is None:
        return None, [at(["kind"], f"required (one of {', '.join(KINDS)})")]
    if not isinstance(kind, str):
        return None, [at(["kind"], f"must be a string (got {type_name(kind)})")]
    info = KINDS.get(kind)
    if info is None:
        return None, [at(["kind"], f'unknown kind "{kind}" (this operator serves {", ".join(KINDS)})')]
    api_version = doc.get("apiVersion")
    if api_version is None:
        return info, [at(["apiVersion"], f"required ({info.api_version})")]
    if api_version != info.api_version:
        return info, [at(["apiVersion"], f"unsupported apiVersion '{api_version}'; this operator speaks '{info.api_version}'")]
    return info, []


def admit(doc: Any, *, old: WireModel | None = None) -> Admission:
    """Parse, default and check one manifest; `old` makes it an update (immutability rules)."""
    if not isinstance(doc, dict):
        return Admission(
            None,
            None,
            problems=[
                Problem(path="", message=f"a manifest must be an object with apiVersion, kind, metadata and spec (got {type_name(doc)})")
            ],
        )
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    info, problems = _kind_of(doc)
    verdict = Admission(
        info.kind if info else doc.get("kind") if isinstance(doc.get("kind"), str) else None,
        name if isinstance(name, str) else None,
        problems=problems,
    )
    if info is None:
        return verdict
    marked = placeholders(doc)
    identity = identity_problems(info, metadata)
    body = {**doc, "apiVersion": info.api_version, "kind": info.kind}
    try:
        parsed = info.model.model_validate(body)
    except ValidationError as exc:
        verdict.problems += from_validation_error(exc, info.model)
        verdict.problems += _at_new_paths(identity, verdict.problems)
        verdict.problems = _without_placeholder_paths(verdict.problems, marked) + marked
        return verdict
    obj = _DEFAULTS.get(info.kind, _identity)(parsed)
    found, warnings = _CHECKS[info.kind](obj, old is None)
    if old is not None and info.kind in _UPDATE_CHECKS:
        found += _UPDATE_CHECKS[info.kind](_DEFAULTS.get(info.kind, _identity)(old), obj)
    found = _at_new_paths(identity, found) + found
    verdict.problems += _without_placeholder_paths(found, marked) + marked
    verdict.warnings = warnings
    verdict.obj = obj
    return verdict


def identity_problems(info: KindInfo, metadata: Any) -> list[Problem]:
    """Name and namespace as Kubernetes bounds them, for every kind: they become event subjects,
    object names and labels, so an unbounded one must never get past admission."""
    if not isinstance(metadata, dict):
        return []  # the model says what is wrong with it
    problems = []
    namespace = metadata.get("namespace")
    if isinstance(namespace, str) and namespace and not is_dns_label(namespace):
        problems.append(
            at(
                ["metadata", "namespace"],
                f"must be a DNS label of at most {DNS_LABEL_MAX} characters (lower-case letters, digits and '-', "
                f"starting and ending with a letter or digit), as Kubernetes namespaces are ({_got(namespace)})",
            )
        )
    name = metadata.get("name")
    # InferencePoolMember names are the Airdress operator's (any text but '/', whitespace and control
    # characters, 253 at most: rules/poolmember.py); the AI Runway kinds are Kubernetes objects.
    if info.group != AIRDRESS_GROUP and isinstance(name, str) and name and not is_dns_subdomain(name):
        problems.append(
            at(
                ["metadata", "name"],
                f"must be a DNS subdomain of at most {DNS_SUBDOMAIN_MAX} characters (lower-case letters, digits, '-' and '.', "
                f"starting and ending with a letter or digit), as Kubernetes object names are ({_got(name)})",
            )
        )
    return problems


def _got(value: str) -> str:
    return f"got {len(value)} characters" if len(value) > DNS_LABEL_MAX else f"got {show(value)}"


def _at_new_paths(extra: list[Problem], problems: list[Problem]) -> list[Problem]:
    """`extra` problems at paths `problems` do not already explain (a kind's own name rule says it better)."""
    paths = {p.path for p in problems}
    return [p for p in extra if p.path not in paths]


def _without_placeholder_paths(problems: list[Problem], marked: list[Problem]) -> list[Problem]:
    """A placeholder explains every other problem at its path; say it once."""
    paths = {p.path for p in marked}
    return [p for p in problems if p.path not in paths and not any(p.path.startswith(m + ".") for m in paths)]


@dataclass(frozen=True)
class Known:
    """What a door knows beside the manifest. A rule whose fact is missing (None) is not judged there, and is
    judged by a door that knows it (an offline `jetway validate` cannot know the stored object or the providers)."""

    old: WireModel | None = None  # the stored object, for an update: its immutable fields
    recorded_provider: str | None = None  # the provider the stored deployment's status names: no switching away
    providers: Callable[[str], ProviderLookup] | None = None  # the named provider, looked up by name
    allow_link_local: bool | None = None  # the dial policy of the server that would dial members (None: not judged)


def judge(doc: Any, known: Known = Known()) -> Admission:
    """The whole admission of one manifest: the contract and its rules (`admit`), then what the door knows:
    the addresses Jetway refuses to dial, a provider switch, the named provider's capabilities."""
    return judged(admit(doc, old=known.old), known)


def judged(verdict: Admission, known: Known) -> Admission:
    """`judge` past `admit`, for a door that admitted the manifest already to find its key (without an old
    object: with one, `judge` the manifest afresh, since an update's rules are part of `admit`)."""
    obj = verdict.obj
    if obj is None:
        return verdict
    if known.allow_link_local is not None and not verdict.problems:  # a malformed URL has no host to judge
        verdict.problems += dial_policy(obj, allow_link_local=known.allow_link_local)
    if isinstance(obj, ModelDeployment):
        verdict.refuse(md_rules.check_provider_switch(known.recorded_provider, obj))
        name = provider_to_check(obj)
        if known.providers is not None and name:
            problems, warnings = check_named_provider(obj, known.providers(name))
            verdict.problems += problems
            verdict.warnings += warnings
    return verdict


def dial_policy(obj: WireModel, *, allow_link_local: bool) -> list[Problem]:
    """Policy beyond the contract: the member addresses Jetway refuses to dial (cloud metadata, link-local)."""
    if isinstance(obj, InferencePoolMember) and obj.spec.url:
        why = refused_address(url_host(obj.spec.url), allow_link_local=allow_link_local)
        if why:
            return [Problem(path="spec.url", message=f"{why}; Jetway does not dial it unless started with --allow-link-local")]
    return []


def typed(obj: WireModel) -> tuple[str, str]:
    """(kind, name) of an admitted object."""
    meta = obj.metadata  # type: ignore[attr-defined]
    return obj.kind, meta.name  # type: ignore[attr-defined]


__all__ = [
    "Admission",
    "AgentDeployment",
    "AgentProviderConfig",
    "InferencePoolMember",
    "InferenceProviderConfig",
    "Known",
    "ModelDeployment",
    "admit",
    "dial_policy",
    "field_path",
    "judge",
    "judged",
    "placeholders",
]


def stored(
    kind: str,
    name: str,
    namespace: str,
    spec: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> WireModel:
    """The typed object of a stored desired state (already admitted: parsed, not re-checked)."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return KINDS[kind].model.model_validate({"metadata": meta, "spec": spec})
