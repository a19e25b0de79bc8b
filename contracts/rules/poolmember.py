"""InferencePoolMember rules the published schema cannot express (the operator's validate())."""

from __future__ import annotations

import re

from contracts.poolmember import InferencePoolMember, MemberTraits
from contracts.problems import Problem, at
from contracts.rules.urls import base_url_problem

MAX_NAME = 253
SECRET_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
SECRET_NAME_WORDS = "must be a secret name: letters, digits, '.', '_' and '-', starting and ending with a letter or digit"


def is_secret_name(name: str) -> bool:
    return SECRET_NAME.match(name) is not None and ".." not in name


def with_defaults(member: InferencePoolMember) -> InferencePoolMember:
    member = member.model_copy(deep=True)
    if member.spec.transport is None:
        member.spec.transport = "http-direct"
    if member.spec.traits is None:
        member.spec.traits = MemberTraits()
    member.metadata.namespace = None  # accepted and ignored: one operator, one namespace
    return member


def check(member: InferencePoolMember) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    name = member.metadata.name
    if "/" in name or any(ch.isspace() or ord(ch) < 0x20 for ch in name):
        problems.append(at(["metadata", "name"], "must not contain '/', whitespace or control characters"))
    spec = member.spec
    transport = spec.transport or "http-direct"
    if transport == "operator-signal":
        if not spec.computeOperatorRef:
            problems.append(at(["spec", "computeOperatorRef"], "required when transport is operator-signal"))
        elif len(spec.computeOperatorRef) > MAX_NAME:  # it becomes a NATS subject token: bounded like a name
            problems.append(
                at(["spec", "computeOperatorRef"], f"must be at most {MAX_NAME} characters (got {len(spec.computeOperatorRef)})")
            )
    elif spec.computeOperatorRef is not None:
        problems.append(
            at(
                ["spec", "computeOperatorRef"],
                "must not be set when transport is http-direct (it names the compute operator of an operator-signal member)",
            )
        )
    dials = spec.backend == "vllm-openai" and transport == "http-direct"
    if dials and spec.url == "":
        problems.append(at(["spec", "url"], "required for backend vllm-openai over transport http-direct"))
    elif spec.url != "":
        why = base_url_problem(spec.url)
        if why is not None:
            problems.append(at(["spec", "url"], why))
        elif not dials:
            warnings.append(f"spec.url is ignored for a {spec.backend} member over {transport}")
    for field in ("authSecretRef", "caFileRef"):
        ref = getattr(spec, field)
        if ref and not is_secret_name(ref):
            problems.append(at(["spec", field], f"{SECRET_NAME_WORDS} (got {ref!r})"))
    seen: dict[str, int] = {}
    for i, model in enumerate(spec.models):
        if model.name == "":
            problems.append(at(["spec", "models", i, "name"], "must not be empty"))
        elif model.name in seen:
            problems.append(at(["spec", "models", i, "name"], f'duplicate model "{model.name}" (also models[{seen[model.name]}])'))
        else:
            seen[model.name] = i
    return problems, warnings
