"""The named provider at admission: AI Runway's webhook looks `spec.provider.name` up and checks the
spec against its capabilities, so a wrong name or an engine it cannot run is refused at once instead
of failing later in reconciliation.

What the lookup found is the caller's I/O (the watcher's projection, then the API server); what it
means is decided here, purely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contracts.modeldeployment import ModelDeployment
from contracts.problems import Problem, at
from contracts.providerconfig import InferenceProviderConfigSpec
from contracts.rules import dynamo as dynamo_rules

Found = Literal["found", "not-found", "not-installed", "forbidden", "unavailable"]


@dataclass(frozen=True)
class ProviderLookup:
    """What looking the named InferenceProviderConfig up gave: its spec, or why there is none."""

    outcome: Found
    spec: InferenceProviderConfigSpec | None = None
    reason: str = ""  # for forbidden and unavailable: the error, already free of secrets


def provider_to_check(md: ModelDeployment) -> str | None:
    """The provider name admission must look up, or None when AI Runway skips the check: no name, no
    engine type yet, or Dynamo's GPU-less mocker test backend (its provider re-validates it)."""
    spec = md.spec
    name = spec.provider.name if spec.provider and spec.provider.name else None
    engine = spec.engine.type if spec.engine else None
    if not name or not engine:
        return None
    if dynamo_rules.mocker(md):
        return None
    return name


def check_named_provider(md: ModelDeployment, lookup: ProviderLookup) -> tuple[list[Problem], list[str]]:
    """Problems and warnings, with AI Runway's words and field paths (CheckProviderCompatibility)."""
    name = provider_to_check(md)
    if name is None:
        return [], []
    if lookup.outcome == "not-found":
        return [at(["spec", "provider", "name"], f'InferenceProviderConfig "{name}" not found')], []
    if lookup.outcome == "not-installed":
        return [], []  # a cluster mid-bootstrap: reconciliation catches it
    if lookup.outcome == "forbidden":
        # Skipping would switch admission-time checks off cluster-wide without anyone noticing.
        return [at(["spec", "provider", "name"], f'cannot verify provider "{name}": {lookup.reason}')], []
    if lookup.outcome == "unavailable":
        return [], [
            f'could not verify provider "{name}" compatibility at admission time ({lookup.reason}); '
            "the controller will re-validate during reconciliation"
        ]
    spec = md.spec
    mode = spec.serving.mode if spec.serving and spec.serving.mode else "aggregated"
    gpus = spec.resources.gpu.count if spec.resources and spec.resources.gpu else 0
    return compatibility_problems(name, lookup.spec, spec.engine.type if spec.engine else None, mode, gpus), []


def compatibility_problems(
    name: str, config: InferenceProviderConfigSpec | None, engine: str | None, mode: str, gpus: int
) -> list[Problem]:
    """AI Runway's CheckProviderCompatibility for a named provider: admission reports every problem, the
    selector the first (it also runs it with the engine it resolved)."""
    if config is None or config.capabilities is None or not engine:
        return []
    capability = config.capabilities.engine(engine)
    if capability is None:
        return [at(["spec", "engine", "type"], f"provider {name} does not support engine {engine}")]
    problems: list[Problem] = []
    if not capability.serves(mode):
        problems.append(at(["spec", "serving", "mode"], f"provider {name} does not support {mode} mode for engine {engine}"))
    if mode == "aggregated" and gpus == 0 and not capability.cpuSupport:
        problems.append(
            at(["spec", "resources", "gpu", "count"], f"{engine} engine on provider {name} requires GPU (set resources.gpu.count > 0)")
        )
    return problems
