"""Events of the binding service: agent frameworks' readiness and each AgentDeployment's binding."""

from __future__ import annotations

from typing import Any

from contracts.events import Decision, register


class FrameworkAssessed(Decision, frozen=True, tag="FrameworkAssessed.v1"):
    """An AgentProviderConfig's readiness (`Ready`, `status.ready`), from its backend and what the cluster serves."""

    ready: bool = False
    reason: str = ""

    def describe(self) -> str:
        return f"{'ready' if self.ready else 'not ready'}: {self.reason}"


class AgentReconciled(Decision, frozen=True, tag="AgentReconciled.v1"):
    """An AgentDeployment's binding and workload: `FrameworkReady`, `ModelBound`, `Ready`,
    `status.modelBinding`, and the objects written for it."""

    binding: dict[str, Any] = {}  # status.modelBinding, {} when unbound
    objects: tuple[dict[str, Any], ...] = ()
    reason: str = ""

    @property
    def held(self) -> tuple[dict[str, Any], ...]:
        return self.objects

    def describe(self) -> str:
        url = self.binding.get("baseURL")
        return f"{self.status.phase or ''} {self.reason}".strip() + (f" → {url}" if url else "")


register(FrameworkAssessed, AgentReconciled)
