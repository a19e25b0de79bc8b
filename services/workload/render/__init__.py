"""Rendering a ModelDeployment into each provider's objects (pure: inputs in, manifests out)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


def replicas(provider: str, inputs: Inputs) -> int:
    """The replicas the provider's objects ask for: `scaling.replicas`, unless the provider cannot run that
    many (KAITO and KubeRay cannot scale to zero: their `replicas`)."""
    function: Callable[[Inputs], int] | None = getattr(PROVIDERS[provider], "replicas", None)
    return function(inputs) if function else inputs.replicas


def settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The provider settings (each renderer's `SETTINGS` names) set in `environ`, for `Inputs.settings`:
    a process reads its environment once, and rendering stays pure."""
    return {name: environ[name] for module in PROVIDERS.values() for name in getattr(module, "SETTINGS", ()) if name in environ}


__all__ = ["PROVIDERS", "Inputs", "RenderError", "endpoint", "render", "replicas", "settings"]
