"""Problems: one field path and one rule in words, the only error shape users ever see.

pydantic's own messages ("Input should be 'a' or 'b'") are translated here into the words of
our validator, so `jetway validate`, the apply API and the admission webhook all say the same
thing about the same mistake.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from contracts.meta import PATTERN_WORDS

PathPart = str | int


class Problem(BaseModel):
    """One thing wrong with one manifest, at one field path (`spec.models[0].name`)."""

    model_config = {"frozen": True}

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def field_path(parts: Iterable[PathPart]) -> str:
    """`("spec", "volumes", 2, "name")` → `spec.volumes[2].name`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out


def show(value: Any) -> str:
    """A value as the user wrote it, short enough for one line."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # pragma: no cover - default=str makes this unreachable
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_EXPECTS = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
    "none_required": "must be null",
}


def _model_fields_at(model: type[BaseModel], loc: Sequence[PathPart]) -> list[str]:
    """The field names allowed where an unknown field was found, for a "did you mean"."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = _innermost_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _innermost_model(annotation: Any) -> Any:
    """The BaseModel inside `X | None`, `list[X]` or `dict[str, X]`, if there is one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _innermost_model(arg)
        if found is not None:
            return found
    return None


def _unknown_field(model: type[BaseModel], loc: Sequence[PathPart]) -> str:
    name = str(loc[-1])
    allowed = _model_fields_at(model, loc)
    if not allowed:
        return "unknown field"
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown field{hint} (allowed: {', '.join(allowed)})"


def not_supported(value: Any, supported: Sequence[str]) -> str:
    """A value outside an enum, in the words of Kubernetes' field.NotSupported, which the API server
    uses for every CRD enum: `Unsupported value: "banana": supported values: "a", "b"`."""
    return f"Unsupported value: {show(value)}: supported values: {', '.join(show(s) for s in supported)}"


def _is_custom_resource(model: type[BaseModel]) -> bool:
    """AI Runway's kinds are Kubernetes custom resources (airunway.ai): their enums are refused as the
    API server refuses them. The Airdress member keeps its operator's own words."""
    api_version = model.model_fields.get("apiVersion")
    return api_version is not None and str(api_version.default).startswith("airunway.ai/")


def _number(bound: Any) -> str:
    """A bound as a user would write it: 0, not the 0.0 of a float field's."""
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def words(error: dict[str, Any], model: type[BaseModel]) -> str:
    """One pydantic error as the rule in words."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    loc = tuple(error["loc"])
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return _unknown_field(model, loc)
    if kind == "literal_error":
        options = re.findall(r"'((?:[^'\\]|\\.)*)'", str(ctx.get("expected", "")))
        if _is_custom_resource(model):
            return not_supported(given, options)
        return f"must be one of {', '.join(options)} (got {show(given)})"
    if kind in _EXPECTS:
        return f"{_EXPECTS[kind]} (got {type_name(given)}: {show(given)})"
    if kind == "string_pattern_mismatch":
        rule = PATTERN_WORDS.get(str(ctx.get("pattern")), f"must match {ctx.get('pattern')}")
        return f"{rule} (got {show(given)})"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters (got {len(str(given))})"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"must be at least {ctx['min_length']} characters"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} items (got {ctx.get('actual_length')})"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} items"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']} (got {show(given)})"
    if kind == "greater_than":
        return f"must be greater than {_number(ctx['gt'])} (got {show(given)})"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']} (got {show(given)})"
    if kind in ("value_error", "assertion_error"):
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return str(error["msg"])


def from_validation_error(exc: ValidationError, model: type[BaseModel], prefix: Sequence[PathPart] = ()) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = [part for part in error["loc"] if part != "[key]"]
        problems.append(Problem(path=field_path([*prefix, *loc]), message=words(dict(error), model)))
    return problems


def at(path: Sequence[PathPart], message: str) -> Problem:
    return Problem(path=field_path(path), message=message)
