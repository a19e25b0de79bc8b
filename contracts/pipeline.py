"""Decisions of the ModelDeployment pipeline: selector → storage → workload.

Each service owns one decision and records it on its facet of the deployment; the next
service reads it from the stream. `objects` are the Kubernetes manifests the decision stands
for: standalone they are only recorded (this event is the record); in a cluster the service
also writes them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from contracts.events import Decision, Event, register


class ProviderSelected(Decision, frozen=True, tag="ProviderSelected.v1"):
    """The selector chose an engine and a provider (explicitly, stickily, or by rules)."""

    engine: str = ""
    engine_reason: str = ""
    provider: str = ""
    provider_reason: str = ""
    explicit_engine: bool = False
    explicit_provider: bool = False

    def describe(self) -> str:
        return f"engine {self.engine} ({self.engine_reason}), provider {self.provider} ({self.provider_reason})"


class SelectionFailed(Decision, frozen=True, tag="SelectionFailed.v1"):
    """Validation, engine selection or provider selection failed; the message says what to change."""

    stage: str = ""  # validation | engine | provider
    message: str = ""

    def describe(self) -> str:
        return f"{self.stage}: {self.message}"


class StoragePlanned(Decision, frozen=True, tag="StoragePlanned.v1"):
    """The storage a deployment's pods mount: PVCs to create, volumes and mounts, the download Job."""

    objects: tuple[dict[str, Any], ...] = ()  # PVCs, then the download Job
    volumes: tuple[dict[str, Any], ...] = ()  # pod volumes
    mounts: tuple[dict[str, Any], ...] = ()  # container volume mounts
    model_cache: str = ""  # mount path of the model cache (HF_HOME), "" when none
    download_job: str = ""

    def describe(self) -> str:
        kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in self.objects)
        return f"{len(self.volumes)} volume(s)" + (f"; creates {kinds}" if kinds else "")

    @property
    def held(self) -> tuple[dict[str, Any], ...]:
        return self.objects


class StorageInvalid(Decision, frozen=True, tag="StorageInvalid.v1"):
    problems: tuple[str, ...] = ()

    def describe(self) -> str:
        return "; ".join(self.problems)


class ImageResolution(msgspec.Struct, frozen=True, omit_defaults=True):
    """What Jetway knows of a Direct vLLM image: the digest a registry gave its tag and the image's
    provenance, or why the registry could not say (`error`). Recorded with the workload's decision, so
    a restart or a replay reuses it while `requested` is unchanged instead of asking again."""

    requested: str = ""
    resolved: str = ""  # <repository>@<digest>; "" when unknown
    digest: str = ""
    created_at: str = ""  # RFC 3339, from the image config (or its org.opencontainers.image.created label)
    revision: str = ""  # the org.opencontainers.image.revision label
    age: str = ""  # the image's age when it was resolved (Nd, Nh, Nm, 0m)
    error: str = ""  # why the lookup failed, in Jetway's words (never a credential)
    generation: int = 0  # the spec generation it was looked up for


class WorkloadRendered(Decision, frozen=True, tag="WorkloadRendered.v1"):
    """The provider's objects for the deployment, as rendered for this generation."""

    provider: str = ""
    objects: tuple[dict[str, Any], ...] = ()
    image: ImageResolution | None = None  # Direct vLLM: the image it was rendered with

    def describe(self) -> str:
        return f"{self.provider}: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in self.objects)

    @property
    def held(self) -> tuple[dict[str, Any], ...]:
        return self.objects

    def holds_objects(self) -> bool:
        return True


class WorkloadWithdrawn(Decision, frozen=True, tag="WorkloadWithdrawn.v1"):
    """A provider's objects are no longer wanted (the provider changed, or the deployment went)."""

    provider: str = ""
    objects: tuple[dict[str, Any], ...] = ()  # what to remove: apiVersion, kind, namespace, name

    def describe(self) -> str:
        return f"{self.provider}: removed " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in self.objects)


class RenderFailed(Decision, frozen=True, tag="RenderFailed.v1"):
    provider: str = ""
    message: str = ""
    image: ImageResolution | None = None  # Direct vLLM: the image lookup, when it is why nothing rendered

    def describe(self) -> str:
        return f"{self.provider}: {self.message}"


register(ProviderSelected, SelectionFailed, StoragePlanned, StorageInvalid, WorkloadRendered, WorkloadWithdrawn, RenderFailed)


# --- the selector's verdict on a provider config's selection rules ------------------------------


class RuleFailure(msgspec.Struct, frozen=True):
    """A selection rule that failed to evaluate against a deployment's spec (it counted as false)."""

    index: int
    condition: str
    error: str


class SelectionRulesChecked(Decision, frozen=True, tag="SelectionRulesChecked.v1"):
    """The selector's `SelectionRulesValid` condition on an InferenceProviderConfig, with the rules that
    failed to evaluate the last time a deployment was scored against it. The failures are recorded (not
    only the message) so that a restart or another replica folds them back: they come from scoring
    deployments, which a provider's own reconcile does not repeat. Streams written before it hold a
    `StatusReported` on the facet instead: read as no failures."""

    failures: tuple[RuleFailure, ...] = ()

    def describe(self) -> str:
        return f"{len(self.failures)} rule(s) failed to evaluate" if self.failures else ""


register(SelectionRulesChecked)


class ProviderRegistered(Event, frozen=True, tag="ProviderRegistered.v1"):
    """Standalone, the workload service asks for one of its built-in InferenceProviderConfigs (`manifest`, as
    `jetway apply` would take it) to exist. The watcher, the one writer of specs, records it as applied when there
    is none yet, or when the one there came from an earlier registration and differs (an upgrade of the built-in
    config); a config a user applied is left alone. In a cluster the workload applies it to the API server, and
    the watcher records what the cluster shows, as for any other resource. A request, not a decision: it holds
    no slice of the provider's status."""

    manifest: dict[str, Any] = msgspec.field(default_factory=dict)

    def describe(self) -> str:
        return f"asks for InferenceProviderConfig {self.manifest.get('metadata', {}).get('name', '?')}"


register(ProviderRegistered)
