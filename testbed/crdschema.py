"""Validating a custom resource against a CRD's openAPIV3Schema the way an API server does.

Defaults are applied first (structural defaulting), then types, enums, patterns, bounds,
required fields, unknown fields (strict field validation), list-map key uniqueness, and the
`x-kubernetes-validations` CEL rules, transition rules (`oldSelf`) included on updates.
Used by the generated-CRD tests and by the Kubernetes API emulator.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache
from typing import Any

import cel

_MISSING = object()


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, sub in schema["properties"].items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_defaults(out[name], sub)
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: apply_defaults(v, schema["additionalProperties"]) for k, v in value.items()}
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(item, schema["items"]) for item in value]
    return value


@lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    return cel.compile(rule)


def _type_ok(value: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }.get(kind, True)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def prune(value: Any, schema: dict[str, Any], path: str = "") -> tuple[Any, list[str]]:
    """`value` without the fields its structural schema does not declare, and their paths: what an API
    server does to a custom resource unless the request asks for strict field validation."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        kept: dict[str, Any] = {}
        dropped: list[str] = []
        for name, item in value.items():
            sub = props.get(name) if props is not None else None
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None and props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                dropped.append(_join(path, name))
                continue
            kept[name], below = prune(item, sub or {}, _join(path, name))
            dropped += below
        return kept, dropped
    if isinstance(value, list) and "items" in schema:
        pruned = [prune(item, schema["items"], _join(path, i)) for i, item in enumerate(value)]
        return [p for p, _ in pruned], [d for _, below in pruned for d in below]
    return value, []


def validate(value: Any, schema: dict[str, Any], old: Any = _MISSING, path: str = "") -> list[str]:
    """Every violation, as `path: message`."""
    errors: list[str] = []
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{path}: must not be null")
        return errors
    kind = schema.get("type")
    if not _type_ok(value, kind):
        return [f"{path}: must be of type {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: must match {schema['pattern']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: less than {schema['minimum']}")
        elif schema.get("exclusiveMinimum") and value == schema.get("minimum"):  # OpenAPI v3: a flag on the bound
            errors.append(f"{path}: must be greater than {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: greater than {schema['maximum']}")
        elif schema.get("exclusiveMaximum") and value == schema.get("maximum"):
            errors.append(f"{path}: must be less than {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{_join(path, name)}: required")
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            old_item = old.get(name, _MISSING) if isinstance(old, dict) else _MISSING
            if props is not None and name in props:
                errors += validate(item, props[name], old_item, _join(path, name))
            elif isinstance(extra, dict):
                errors += validate(item, extra, old_item, _join(path, name))
            elif props is not None and not preserve:
                errors.append(f"{_join(path, name)}: unknown field")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        keys = schema.get("x-kubernetes-list-map-keys")
        if keys:
            seen = set()
            for i, item in enumerate(value):
                key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)
                if key in seen:
                    errors.append(f"{_join(path, i)}: duplicate entry for key {keys}={list(key)}")
                seen.add(key)
        for i, item in enumerate(value):
            errors += validate(item, schema.get("items", {}), _MISSING, _join(path, i))
    for rule in schema.get("x-kubernetes-validations", []):
        expression = rule["rule"]
        transition = "oldSelf" in expression
        if transition and old is _MISSING:
            continue
        variables = {"self": value}
        if transition:
            variables["oldSelf"] = old
        try:
            ok = _program(expression).execute(variables)
        except Exception as exc:  # a rule that cannot evaluate rejects, as the API server does
            errors.append(f"{path}: rule {expression!r} failed to evaluate: {exc}")
            continue
        if ok is not True:
            errors.append(f"{path}: {rule.get('message', 'failed rule: ' + expression)}")
    return errors


def validate_resource(
    obj: dict[str, Any], crd: dict[str, Any], old: dict[str, Any] | None = None, *, pruned: list[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(defaulted object, violations) for a custom resource of `crd`'s kind. With `pruned` (a list to fill)
    unknown fields are dropped and named there, as an API server does by default; without, they are
    violations (strict field validation)."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    if pruned is not None:  # apiVersion, kind and metadata are the server's own, never pruned
        identity: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
        obj, dropped = prune({k: v for k, v in obj.items() if k not in identity}, schema)
        obj.update(identity)
        pruned += dropped
    defaulted = apply_defaults(obj, schema)
    old_defaulted = apply_defaults(old, schema) if old is not None else _MISSING
    return defaulted, validate(defaulted, schema, old_defaulted)
