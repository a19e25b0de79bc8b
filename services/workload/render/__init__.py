"""Rendering a ModelDeployment into each provider's objects (pure: inputs in, manifests out)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from services.workload.render import dynamo, kaito, kuberay, llmd, vllm
from services.workload.render.common import Inputs, RenderError

PROVIDERS: dict[str, ModuleType] = {"vllm": vllm, "llmd": llmd, "dynamo": dynamo, "kaito": kaito, "kuberay": kuberay}


def render(provider: str, inputs: Inputs) -> list[dict[str, Any]]:
    module = PROVIDERS.get(provider)
    if module is None:
        raise RenderError(f"Jetway does not render for provider {provider!r}; its own controller does")
    objects: list[dict[str, Any]] = module.render(inputs)
    return objects


def endpoint(provider: str, inputs: Inputs) -> dict[str, Any]:
    function: Callable[[Inputs], dict[str, Any]] = PROVIDERS[provider].endpoint
    return function(inputs)


__all__ = ["PROVIDERS", "Inputs", "RenderError", "endpoint", "render"]
