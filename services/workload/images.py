"""Direct vLLM's image, decided purely: which image, how it was chosen, whether a registry must be
asked for its digest, and the `status.image` and conditions that say so.

The requested image is `spec.engine.image`, else `spec.image`, else the provider's default. A
reference with a tag and no digest is resolved to `<repository>@<digest>` by a registry (the
workload service's I/O edge, `services/workload/registry.py`), once: while `requested` stays the
same, the last resolution is reused. Only the default image is run by its digest; a user's image
runs as written, so a registry that cannot resolve it is reported, not fatal. A default image that
cannot be resolved renders nothing (AI Runway's rule: no pods until the registry answers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from contracts.events import StatusCondition
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ImageResolution

OFFICIAL_REPOSITORY = "vllm/vllm-openai"
VERIFICATION_MESSAGE = "Image attestation/signature verification is not implemented by this controller"
RECIPE_GENERATED_BY = "airunway.ai/generated-by"
RECIPE_RESOLVER = "vllm-recipe-resolver"
RECIPE_PREFIX = "airunway.ai/recipe."
# the provenance annotations a recipe carries, in the order the summary lists them
RECIPE_FIELDS = (
    (RECIPE_GENERATED_BY, "generated-by"),
    *((RECIPE_PREFIX + name, name) for name in ("source", "id", "strategy", "hardware", "variant", "precision", "revision", "features")),
)
CONTINUING = "Continuing with the user-specified image reference."


@dataclass(frozen=True)
class Reference:
    """An image reference split as AI Runway splits it: the digest after `@`, the tag after the last `:`
    that follows the last `/` (so a registry's port is not a tag)."""

    repository: str
    tag: str = ""
    digest: str = ""


def split(reference: str) -> Reference:
    text = reference.strip()
    name, _, digest = text.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        return Reference(name[:colon], name[colon + 1 :], digest)
    return Reference(name, "", digest)


def _normalized(repository: str) -> str:
    repository = repository.strip()
    for prefix in ("docker.io/", "index.docker.io/"):
        repository = repository.removeprefix(prefix)
    return repository


def source_of(requested: str, reference: Reference, default_image: str) -> str:
    """launch, nightly, stable or custom: what kind of image this is for the provider's image policy."""
    repository, tag = _normalized(reference.repository), reference.tag.lower()
    if "launch" in tag:
        return "launch"
    if requested == default_image or (repository == OFFICIAL_REPOSITORY and "nightly" in tag):
        return "nightly"
    if repository == OFFICIAL_REPOSITORY and reference.tag == "latest":
        return "stable"
    return "custom"


@dataclass(frozen=True)
class Plan:
    """The image a deployment asks for, before any registry is asked."""

    requested: str
    default: bool  # the provider's default image, not the user's
    reference: Reference
    source: str

    @property
    def by_tag(self) -> bool:
        """A tag and no digest: only a registry can say which image it names."""
        return bool(self.reference.tag.strip()) and not self.reference.digest.strip()


def plan(md: ModelDeployment, default_image: str) -> Plan:
    engine_image = md.spec.engine.image if md.spec.engine else None
    requested = engine_image or md.spec.image or ""
    default = not requested
    requested = requested or default_image
    reference = split(requested)
    return Plan(requested, default, reference, source_of(requested, reference, default_image))


def reusable(plan_: Plan, previous: ImageResolution | None) -> bool:
    """The last resolution still answers: it was for the same requested image and found a digest."""
    return (
        previous is not None
        and previous.requested.strip() == plan_.requested.strip()
        and bool(previous.resolved.strip())
        and bool(previous.digest.strip())
    )


def needs_lookup(plan_: Plan, previous: ImageResolution | None) -> bool:
    return plan_.by_tag and not reusable(plan_, previous)


_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time (any fraction of a second, `Z` or an offset), or None."""
    text = text.strip()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text):
        return None
    try:
        moment = datetime.fromisoformat(_FRACTION.sub(r"\1", text).replace("z", "Z").replace("t", "T"))
    except ValueError:
        return None
    return moment


def created_at(config_created: str, labels: Mapping[str, Any]) -> str:
    """When the image was built: the config's `created` (unless it is unset or the zero time), else
    the `org.opencontainers.image.created` label as written."""
    moment = parse_time(config_created) if isinstance(config_created, str) else None
    if moment is not None and moment.astimezone(UTC).year > 1:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    label = labels.get("org.opencontainers.image.created")
    return label.strip() if isinstance(label, str) else ""


def revision_of(labels: Mapping[str, Any]) -> str:
    label = labels.get("org.opencontainers.image.revision")
    return label.strip() if isinstance(label, str) else ""


def age(created: str, now: datetime) -> str:
    """How old the image is, coarsely: whole days, else hours, else minutes (`0m` when newer, or
    created in the future); "" when the creation time is unknown or not RFC 3339."""
    moment = parse_time(created)
    if moment is None:
        return ""
    seconds = max((now.astimezone(UTC) - moment.astimezone(UTC)).total_seconds(), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return "0m"


def recipe_provenance(annotations: Mapping[str, str]) -> str:
    """`generated-by=…, source=…, id=…` from a recipe's annotations; "" when the deployment came from no recipe."""
    if annotations.get(RECIPE_GENERATED_BY) != RECIPE_RESOLVER and not any(k.startswith(RECIPE_PREFIX) for k in annotations):
        return ""
    parts = [f"{label}={annotations[key].strip()}" for key, label in RECIPE_FIELDS if annotations.get(key, "").strip()]
    return ", ".join(parts)


@dataclass(frozen=True)
class ImageDecision:
    """What the render records about the image."""

    status: dict[str, Any]  # status.image
    conditions: tuple[StatusCondition, ...]
    fact: ImageResolution
    default_image: str  # the pod's image when the user named none: the default's digest once resolved
    failure: str | None = None  # the default image could not be resolved: nothing may render


def _policy(source: str, generation: int) -> StatusCondition:
    if source == "custom":
        message = "User-specified custom vLLM image is not verified as a supported provider image"
        return StatusCondition.of("UnsupportedImage", "True", "CustomImage", message, generation)
    message = "Selected vLLM image is supported by provider image policy"
    return StatusCondition.of("UnsupportedImage", "False", "SupportedImage", message, generation)


def decide(
    plan_: Plan,
    previous: ImageResolution | None,
    looked_up: ImageResolution | None,
    *,
    generation: int,
    annotations: Mapping[str, str],
    default_image: str,
) -> ImageDecision:
    """The image's status and conditions, from the plan, the last resolution and a fresh lookup.

    A digest reference needs no registry; a tag reference reuses `previous` when it answers the same
    requested image, else takes `looked_up` (the registry's answer, or why there was none). With
    neither, image resolution is off (offline rendering, or standalone without a registry): the tag
    is used as written and the status says so."""
    requested, source, reference = plan_.requested, plan_.source, plan_.reference
    shown = f'Direct vLLM image "{requested}"'
    failure: str | None = None
    fresh = looked_up if looked_up is not None and looked_up.requested.strip() == requested.strip() else None
    if not plan_.by_tag:
        fact = ImageResolution(requested=requested, resolved=requested, digest=reference.digest, generation=generation)
        state, reason, message = "True", "ImageResolved", f"Resolved {shown} from {source} selection."
    elif previous is not None and reusable(plan_, previous):
        fact = previous
        again = previous.generation == generation  # this generation's own lookup, decided again (a restart, a resync)
        verb, reason = ("Resolved", "ImageResolved") if again else ("Reused resolved", "ImageResolutionReused")
        state, message = "True", f'{verb} {shown} to "{previous.resolved}" from {source} selection.'
    elif fresh is not None and fresh.resolved.strip() and fresh.digest.strip() and not fresh.error:
        fact = msgspec.structs.replace(fresh, generation=generation)
        state, reason, message = "True", "ImageResolved", f'Resolved {shown} to "{fresh.resolved}" from {source} selection.'
    elif fresh is not None:
        error = fresh.error or "the registry returned no digest"
        fact = ImageResolution(requested=requested, error=error, generation=generation)
        state, reason, message = "False", "ImageResolutionFailed", f"Failed to resolve {shown} from {source} selection: {error}."
        if plan_.default:
            failure = f'failed to resolve default vLLM image "{requested}": {error}'
        else:
            message += " " + CONTINUING
    else:
        fact = ImageResolution(requested=requested, generation=generation)
        state, reason = "Unknown", "ImageResolutionOff"
        message = f"{shown} from {source} selection is used by its tag: image resolution is off."
    conditions: list[StatusCondition] = []
    provenance = recipe_provenance(annotations)
    if provenance:
        message += f" Recipe provenance: {provenance}."
        conditions.append(StatusCondition.of("RecipeResolved", "True", "RecipeProvenanceResolved", provenance, generation))
    conditions += [
        _policy(source, generation),
        StatusCondition.of("ImageResolved", state, reason, message, generation),
        StatusCondition.of("ImageVerified", "Unknown", "VerificationNotImplemented", VERIFICATION_MESSAGE, generation),
    ]
    status: dict[str, Any] = {
        "requested": requested,
        "resolved": fact.resolved,
        "repository": reference.repository,
        "tag": reference.tag,
        "digest": fact.digest or reference.digest,
        "source": source,
        "createdAt": fact.created_at,
        "revision": fact.revision,
        "age": fact.age,
        "inNightly": source == "nightly",
        "verificationMessage": VERIFICATION_MESSAGE,
        "message": message,
    }
    return ImageDecision(
        status={k: v for k, v in status.items() if v != "" and v is not False},
        conditions=tuple(conditions),
        fact=fact,
        default_image=fact.resolved if plan_.default and fact.resolved else default_image,
        failure=failure,
    )
