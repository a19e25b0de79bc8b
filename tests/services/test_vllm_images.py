"""Direct vLLM's image, decided without I/O: ported from AI Runway's own tests (ai-runway/airunway b0d3fb7:
providers/vllm/image_status_test.go, the image cases of transformer_test.go, TestValidateCompatibility and
TestRemoteImageResolverRejectsEmptyAndInvalidRefs of controller_test.go, and the core controller's
modeldeployment_validation_test.go), each named after the upstream test.

Upstream's tests hand a fake resolver to the reconciler. Here the decision is pure: `image_lookup` says which
reference the registry would be asked about (upstream's resolver calls), and `decide` is given the registry's
answer (upstream's fake's result) as an `ImageResolution`. The registry itself is tested for real, against a
registry on 127.0.0.1, in tests/services/test_image_registry.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.admission import admit
from contracts.events import StatusCondition
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ImageResolution, RenderFailed, SelectionFailed, StoragePlanned, WorkloadRendered
from contracts.rules.modeldeployment import with_defaults
from contracts.subjects import Key
from runtime import settings
from services.selector import decide as selection
from services.storage import decide as storage
from services.workload import decide as workload
from services.workload import images, registry
from services.workload.projection import Deployment
from services.workload.providers import BUILTIN, builtin_configs
from services.workload.render import render
from services.workload.render.common import Inputs
from services.workload.render.vllm import DEFAULT_IMAGE, compatibility
from tests.contracts.cases import DELETE, MD, changed

UID = "test-uid"
# upstream newMDForController: a Hugging Face model on one GPU, provider vllm
UPSTREAM_MD = changed(MD, {"metadata.name": "test-model", "spec.provider": {"name": "vllm"}})
PROVIDERS = [
    selection.Provider(c["metadata"]["name"], admit(c).obj.spec, True)  # type: ignore[union-attr]
    for c in builtin_configs()
]


def deployment(changes: dict[str, Any] | None = None, *, generation: int = 1, image: ImageResolution | None = None) -> Deployment:
    """A deployment as the workload service sees it once the selector and the storage service have decided."""
    verdict = admit(changed(UPSTREAM_MD, changes or {}))
    assert verdict.ok, verdict.problems
    md = verdict.obj
    assert isinstance(md, ModelDeployment)
    key = Key("ModelDeployment", "default", md.metadata.name)
    chosen = selection.select(md, generation, None, PROVIDERS).decision
    plan = storage.plan(md, key, generation, UID)
    assert isinstance(plan, StoragePlanned)
    return Deployment(key, md, generation, UID, selection=chosen, storage=plan, image=image)


def fake_resolved(requested: str, digest: str) -> ImageResolution:
    """Upstream's fakeResolvedImage: the repository with the digest, created 2026-05-01, revision abc123."""
    return ImageResolution(
        requested=requested,
        resolved=f"{images.split(requested).repository}@{digest}",
        digest=digest,
        created_at="2026-05-01T00:00:00Z",
        revision="abc123",
    )


def failing(requested: str, error: str) -> ImageResolution:
    return ImageResolution(requested=requested, error=error)


def decided(d: Deployment, answer: ImageResolution | None = None) -> WorkloadRendered | RenderFailed:
    steps = workload.decide(d, BUILTIN, image=answer)
    assert len(steps) == 1
    record = steps[0].record
    assert isinstance(record, WorkloadRendered | RenderFailed)
    return record


def image_status(record: WorkloadRendered | RenderFailed) -> dict[str, Any]:
    assert "image" in record.status.fields, "status.image was not set"
    image: dict[str, Any] = record.status.fields["image"]
    return image


def condition(record: WorkloadRendered | RenderFailed | SelectionFailed, type_: str, status: str, reason: str) -> StatusCondition:
    found = next((c for c in record.status.conditions if c.type == type_), None)
    assert found is not None, f"condition {type_} was not set"
    assert (found.status, found.reason) == (status, reason), found
    return found


def container_image(record: WorkloadRendered | RenderFailed) -> str:
    assert isinstance(record, WorkloadRendered)
    image: str = record.objects[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_set_image_resolution_status_default_image() -> None:
    """Upstream: TestSetImageResolutionStatusDefaultImage."""
    d = deployment()
    assert workload.image_lookup(d) == DEFAULT_IMAGE  # the registry is asked about the default image, once
    record = decided(d, fake_resolved(DEFAULT_IMAGE, "sha256:default"))
    image = image_status(record)
    assert image["requested"] == DEFAULT_IMAGE
    assert image["resolved"] == "vllm/vllm-openai@sha256:default"
    assert image["repository"] == "vllm/vllm-openai"
    assert image["tag"] == "cu130-nightly"
    assert image["digest"] == "sha256:default"
    assert image["createdAt"] == "2026-05-01T00:00:00Z"
    assert image["revision"] == "abc123"
    assert image["source"] == "nightly"
    assert image["inNightly"] is True
    assert "verified" not in image  # verification is not implemented
    assert image["verificationMessage"] == images.VERIFICATION_MESSAGE
    condition(record, "ImageResolved", "True", "ImageResolved")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")
    condition(record, "UnsupportedImage", "False", "SupportedImage")
    assert not any(c.type == "RecipeResolved" for c in record.status.conditions)
    # the default image runs by the digest it resolved to (upstream: TestReconcileHappyPathCreatesDeploymentAndService)
    assert container_image(record) == "vllm/vllm-openai@sha256:default"
    assert [o["kind"] for o in record.objects] == ["Deployment", "Service"]  # type: ignore[union-attr]


def test_set_image_resolution_status_reuses_cached_digest_for_same_requested_image() -> None:
    """Upstream: TestSetImageResolutionStatusReusesCachedDigestForSameRequestedImage."""
    cached = ImageResolution(
        requested=DEFAULT_IMAGE,
        resolved="vllm/vllm-openai@sha256:cached",
        digest="sha256:cached",
        created_at="2026-05-01T00:00:00Z",
        revision="abc123",
        generation=1,
    )
    d = deployment(generation=2, image=cached)
    assert workload.image_lookup(d) is None  # status.image already resolved the current request: no registry call
    record = decided(d, fake_resolved(DEFAULT_IMAGE, "sha256:fresh"))  # a fresh answer is not taken either
    image = image_status(record)
    assert image["resolved"] == "vllm/vllm-openai@sha256:cached"
    assert image["digest"] == "sha256:cached"
    condition(record, "ImageResolved", "True", "ImageResolutionReused")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")
    assert record.image == cached  # the resolution recorded again, as it was: replays reuse it too


def test_set_image_resolution_status_stable_image() -> None:
    """Upstream: TestSetImageResolutionStatusStableImage."""
    stable = "vllm/vllm-openai:latest"
    d = deployment({"spec.engine.image": stable})
    assert workload.image_lookup(d) == stable
    record = decided(d, fake_resolved(stable, "sha256:stable"))
    image = image_status(record)
    assert image["requested"] == stable
    assert image["resolved"] == "vllm/vllm-openai@sha256:stable"
    assert image["repository"] == "vllm/vllm-openai"
    assert image["tag"] == "latest"
    assert image["source"] == "stable"
    assert "inNightly" not in image
    condition(record, "ImageResolved", "True", "ImageResolved")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")
    condition(record, "UnsupportedImage", "False", "SupportedImage")


def test_set_image_resolution_status_custom_digest_image_does_not_call_resolver() -> None:
    """Upstream: TestSetImageResolutionStatusCustomDigestImageDoesNotCallResolver."""
    custom = "ghcr.io/acme/vllm-openai-custom:cuda12@sha256:abc123"
    d = deployment({"spec.engine.image": custom})
    assert workload.image_lookup(d) is None  # digest-pinned: nothing to ask
    record = decided(d)
    image = image_status(record)
    assert image["requested"] == custom
    assert image["resolved"] == custom
    assert image["repository"] == "ghcr.io/acme/vllm-openai-custom"
    assert image["tag"] == "cuda12"
    assert image["digest"] == "sha256:abc123"
    assert image["source"] == "custom"
    assert "inNightly" not in image and "verified" not in image
    condition(record, "ImageResolved", "True", "ImageResolved")
    condition(record, "UnsupportedImage", "True", "CustomImage")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")


def test_set_image_resolution_status_default_resolution_failure_returns_error() -> None:
    """Upstream: TestSetImageResolutionStatusDefaultResolutionFailureReturnsError."""
    d = deployment()
    record = decided(d, failing(DEFAULT_IMAGE, "registry unavailable"))
    assert isinstance(record, RenderFailed)  # nothing renders: no pods until the default image resolves
    assert "failed to resolve default vLLM image" in record.message
    assert record.status.phase == "Failed" and record.status.message == record.message
    image = image_status(record)
    assert image["requested"] == DEFAULT_IMAGE
    assert "resolved" not in image  # empty on resolution failure
    condition(record, "ImageResolved", "False", "ImageResolutionFailed")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")
    assert workload.decide(d, BUILTIN, image=failing(DEFAULT_IMAGE, "registry unavailable"))[0].write == []


def test_set_image_resolution_status_user_image_resolution_failure_does_not_return_error() -> None:
    """Upstream: TestSetImageResolutionStatusUserImageResolutionFailureDoesNotReturnError."""
    custom = "ghcr.io/acme/vllm-openai-custom:cuda12"
    d = deployment({"spec.engine.image": custom})
    assert workload.image_lookup(d) == custom
    record = decided(d, failing(custom, "registry unavailable"))
    assert isinstance(record, WorkloadRendered)  # not fatal: the pods run the tag as written
    image = image_status(record)
    assert image["requested"] == custom
    assert "resolved" not in image
    assert image["source"] == "custom"
    assert "Continuing with the user-specified image reference" in image["message"]
    condition(record, "ImageResolved", "False", "ImageResolutionFailed")
    condition(record, "UnsupportedImage", "True", "CustomImage")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")
    assert container_image(record) == custom
    # the failure is not reused: the next decision asks the registry again
    again = deployment({"spec.engine.image": custom}, image=record.image)
    assert workload.image_lookup(again) == custom


def test_set_image_resolution_status_recipe_provenance_is_not_verification() -> None:
    """Upstream: TestSetImageResolutionStatusRecipeProvenanceIsNotVerification."""
    stable = "vllm/vllm-openai:latest"
    annotations = {
        images.RECIPE_GENERATED_BY: images.RECIPE_RESOLVER,
        images.RECIPE_PREFIX + "source": "vllm-recipes",
        images.RECIPE_PREFIX + "id": "llama-3.1-8b",
        images.RECIPE_PREFIX + "strategy": "official-vllm-image",
        images.RECIPE_PREFIX + "hardware": "h100",
        images.RECIPE_PREFIX + "precision": "fp16",
        images.RECIPE_PREFIX + "revision": "abc123",
        images.RECIPE_PREFIX + "features": '["openai-api"]',
        "airunway.ai/unrelated-annotation": "ignored",
    }
    d = deployment({"spec.engine.image": stable, "metadata.annotations": annotations})
    record = decided(d, fake_resolved(stable, "sha256:recipe"))
    image = image_status(record)
    for want in (
        "Recipe provenance:",
        "generated-by=vllm-recipe-resolver",
        "source=vllm-recipes",
        "id=llama-3.1-8b",
        "strategy=official-vllm-image",
        "hardware=h100",
        "precision=fp16",
        "revision=abc123",
        'features=["openai-api"]',
    ):
        assert want in image["message"], want
    assert "ignored" not in image["message"]
    assert "verified" not in image  # recipe provenance is not image verification
    recipe = condition(record, "RecipeResolved", "True", "RecipeProvenanceResolved")
    assert "source=vllm-recipes" in recipe.message and "id=llama-3.1-8b" in recipe.message
    condition(record, "ImageResolved", "True", "ImageResolved")
    condition(record, "ImageVerified", "Unknown", "VerificationNotImplemented")


# --- the image the pods run (transformer_test.go) -------------------------------------------------------------


def _rendered_image(md: ModelDeployment, default_image: str = "") -> str:
    inputs = Inputs(Key("ModelDeployment", "default", md.metadata.name), UID, md, "vllm", default_image=default_image)
    image: str = render("vllm", inputs)[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_transform_aggregated_default_image() -> None:
    """Upstream: TestTransformAggregatedDefaultImage."""
    assert DEFAULT_IMAGE == "vllm/vllm-openai:cu130-nightly"
    record = decided(deployment())  # image resolution off (offline rendering): the tag as written
    assert container_image(record) == "vllm/vllm-openai:cu130-nightly"
    condition(record, "ImageResolved", "Unknown", "ImageResolutionOff")


def test_transform_aggregated_uses_resolved_default_image() -> None:
    """Upstream: TestTransformAggregatedUsesResolvedDefaultImage."""
    resolved = ImageResolution(requested=DEFAULT_IMAGE, resolved="vllm/vllm-openai@sha256:default", digest="sha256:default")
    assert container_image(decided(deployment(image=resolved))) == "vllm/vllm-openai@sha256:default"


def test_transform_aggregated_custom_image() -> None:
    """Upstream: TestTransformAggregatedCustomImage."""
    assert container_image(decided(deployment({"spec.image": "my-custom-vllm:latest"}))) == "my-custom-vllm:latest"


def test_transform_aggregated_preserves_user_image_when_status_resolved() -> None:
    """Upstream: TestTransformAggregatedPreservesUserImageWhenStatusResolved."""
    custom = "ghcr.io/acme/vllm-openai-custom:cuda12"
    resolved = ImageResolution(requested=custom, resolved="ghcr.io/acme/vllm-openai-custom@sha256:custom", digest="sha256:custom")
    record = decided(deployment({"spec.engine.image": custom}, image=resolved))
    assert container_image(record) == custom
    assert image_status(record)["resolved"] == "ghcr.io/acme/vllm-openai-custom@sha256:custom"


def test_transform_aggregated_engine_image_preferred_over_legacy_image() -> None:
    """Upstream: TestTransformAggregatedEngineImagePreferredOverLegacyImage (admission refuses the two differing,
    so the manifest is parsed and defaulted without it: the renderer's own rule)."""
    manifest = changed(UPSTREAM_MD, {"spec.image": "legacy-vllm:latest", "spec.engine.image": "engine-vllm:latest"})
    md = with_defaults(ModelDeployment.model_validate(manifest))
    assert _rendered_image(md) == "engine-vllm:latest"
    assert _rendered_image(md, default_image="vllm/vllm-openai@sha256:default") == "engine-vllm:latest"


# --- compatibility (controller_test.go) --------------------------------------------------------------------------

DISAGGREGATED = {"spec.serving": {"mode": "disaggregated"}, "spec.resources": DELETE}
PREFILL, DECODE = {"replicas": 2, "gpu": {"count": 1}}, {"replicas": 1, "gpu": {"count": 4}}


@pytest.mark.parametrize(
    ("name", "changes", "engine", "compatible"),
    [
        ("vllm with GPU is compatible", {}, "vllm", True),
        ("sglang is incompatible", {"spec.engine.type": "sglang"}, "sglang", False),
        ("trtllm is incompatible", {"spec.engine.type": "trtllm"}, "trtllm", False),
        ("no GPU resources is incompatible", {"spec.resources": DELETE}, "vllm", False),
        ("zero GPU count is incompatible", {"spec.resources.gpu.count": 0}, "vllm", False),
        (
            "disaggregated without prefill is incompatible",
            {**DISAGGREGATED, "spec.scaling": {"decode": {"replicas": 1, "gpu": {"count": 1}}}},
            "vllm",
            False,
        ),
        (
            "disaggregated without decode is incompatible",
            {**DISAGGREGATED, "spec.scaling": {"prefill": {"replicas": 2, "gpu": {"count": 1}}}},
            "vllm",
            False,
        ),
        (
            "disaggregated with both prefill and decode is rejected (aggregated-only)",
            {
                **DISAGGREGATED,
                "spec.scaling": {"prefill": {"replicas": 2, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 4}}},
            },
            "vllm",
            False,
        ),
        (
            "disaggregated without GPU on prefill is incompatible",
            {**DISAGGREGATED, "spec.scaling": {"prefill": {"replicas": 2}, "decode": {"replicas": 1, "gpu": {"count": 4}}}},
            "vllm",
            False,
        ),
        (
            "disaggregated without GPU on decode is incompatible",
            {**DISAGGREGATED, "spec.scaling": {"prefill": {"replicas": 2, "gpu": {"count": 1}}, "decode": {"replicas": 1}}},
            "vllm",
            False,
        ),
        (
            "disaggregated without top-level resources is rejected (aggregated-only)",
            {
                **DISAGGREGATED,
                "spec.scaling": {"prefill": {"replicas": 4, "gpu": {"count": 1}}, "decode": {"replicas": 1, "gpu": {"count": 4}}},
            },
            "vllm",
            False,
        ),
    ],
)
def test_validate_compatibility(name: str, changes: dict[str, Any], engine: str, compatible: bool) -> None:
    """Upstream: TestValidateCompatibility (its ModelDeployments are built in Go, undefaulted: so are these)."""
    md = ModelDeployment.model_validate(changed(UPSTREAM_MD, changes))
    problem = compatibility(Inputs(Key("ModelDeployment", "default", "test-model"), UID, md, engine))
    assert (problem is None) is compatible, (name, problem)


def test_provider_compatible_condition_before_the_image() -> None:
    """Upstream's reconcile order (controller.go): ProviderCompatible first; an incompatible deployment fails with
    the check's words and no image is looked at; a compatible one says so."""
    record = decided(deployment())
    found = condition(record, "ProviderCompatible", "True", "CompatibilityVerified")
    assert found.message == "Configuration compatible with vLLM"
    md = with_defaults(ModelDeployment.model_validate(changed(UPSTREAM_MD, {"spec.resources.gpu.count": 0})))
    d = deployment()
    d.applied = md  # an object that bypassed admission, on a provider selected before the change
    assert workload.image_lookup(d) is None
    refused = decided(d, fake_resolved(DEFAULT_IMAGE, "sha256:x"))
    assert isinstance(refused, RenderFailed)
    found = condition(refused, "ProviderCompatible", "False", "IncompatibleConfiguration")
    assert found.message == "vLLM provider requires GPU resources (spec.resources.gpu.count > 0)"
    assert refused.status.phase == "Failed" and refused.status.message == found.message
    assert not any(c.type.startswith("Image") for c in refused.status.conditions) and "image" not in refused.status.fields


# --- conflicting image fields (the core controller's modeldeployment_validation_test.go) ---------------------------


def _selected(spec: dict[str, Any]) -> SelectionFailed:
    manifest = changed(UPSTREAM_MD, {"metadata.name": "conflicting-images", **spec})
    md = with_defaults(ModelDeployment.model_validate(manifest))  # admission refuses it; the controller still guards
    outcome = selection.select(md, 1, None, PROVIDERS).decision
    assert isinstance(outcome, SelectionFailed)
    return outcome


def test_validate_spec_rejects_conflicting_image_fields() -> None:
    """Upstream: TestValidateSpecRejectsConflictingImageFields."""
    failed = _selected({"spec.image": "legacy:v1", "spec.engine.image": "engine:v2"})
    assert "spec.image" in failed.message and "spec.engine.image" in failed.message
    found = condition(failed, "ImageResolved", "False", "ConflictingImageFields")
    assert "spec.image" in found.message and "spec.engine.image" in found.message
    image = failed.status.fields["image"]
    assert image["requested"] == "engine:v2"  # spec.engine.image is preferred
    assert "spec.image" in image["message"] and "spec.engine.image" in image["message"]


def test_reconcile_rejects_conflicting_image_fields_before_selection() -> None:
    """Upstream: TestReconcileRejectsConflictingImageFieldsBeforeSelection."""
    failed = _selected({"spec.image": "legacy:v1", "spec.engine.image": "engine:v2", "spec.engine.type": DELETE, "spec.resources": DELETE})
    assert failed.status.phase == "Failed"
    assert "engine" not in failed.status.fields  # no engine selected
    condition(failed, "ImageResolved", "False", "ConflictingImageFields")
    condition(failed, "Validated", "False", "ValidationFailed")
    assert failed.message == (
        'Validation failed: spec.image "legacy:v1" conflicts with spec.engine.image "engine:v2"; '
        "remove spec.image or set both fields to the same value (spec.engine.image is preferred)"
    )


# --- the rest of the image rules ----------------------------------------------------------------------------------


def test_remote_image_resolver_rejects_empty_and_invalid_refs() -> None:
    """Upstream: TestRemoteImageResolverRejectsEmptyAndInvalidRefs (the real client edge; no registry is reached)."""
    for reference in ("   ", "::not a ref::"):
        answer = registry.lookup(reference)
        assert answer.error and not answer.digest and not answer.resolved


@pytest.mark.parametrize(
    ("reference", "source"),
    [
        (DEFAULT_IMAGE, "nightly"),
        ("docker.io/vllm/vllm-openai:nightly-x86_64", "nightly"),
        ("index.docker.io/vllm/vllm-openai:latest", "stable"),
        ("vllm/vllm-openai:v0.11.0", "custom"),
        ("ghcr.io/acme/vllm:launch-2026", "launch"),
        ("vllm/vllm-openai:gpt-oss-LAUNCH", "launch"),
        ("ghcr.io/acme/vllm:nightly", "custom"),
        ("127.0.0.1:5000/vllm/vllm-openai:latest", "custom"),
    ],
)
def test_image_source_follows_the_provider_image_policy(reference: str, source: str) -> None:
    """upstream directVLLMImageSource: launch tags, the default or an official nightly, the official latest, else custom."""
    assert images.source_of(reference, images.split(reference), DEFAULT_IMAGE) == source


def test_image_reference_split_keeps_a_registry_port_out_of_the_tag() -> None:
    assert images.split("127.0.0.1:5000/acme/vllm:cuda12") == images.Reference("127.0.0.1:5000/acme/vllm", "cuda12")
    assert images.split("127.0.0.1:5000/acme/vllm") == images.Reference("127.0.0.1:5000/acme/vllm")
    assert images.split("acme/vllm@sha256:ab") == images.Reference("acme/vllm", "", "sha256:ab")
    assert not images.Plan("x", False, images.split("127.0.0.1:5000/acme/vllm"), "custom").by_tag  # no tag: used as written


@pytest.mark.parametrize(
    ("created", "age"),
    [
        ("2026-04-28T12:00:00Z", "3d"),
        ("2026-05-01T07:00:00Z", "5h"),
        ("2026-05-01T11:58:30Z", "1m"),
        ("2026-05-01T11:59:59.999999999Z", "0m"),
        ("2026-05-01T14:00:00+02:00", "0m"),
        ("2026-05-02T00:00:00Z", "0m"),  # in the future: not negative
        ("yesterday", ""),
        ("", ""),
    ],
)
def test_image_age_is_coarse(created: str, age: str) -> None:
    """upstream imageAge: whole days, else hours, else minutes; 0m at least; "" when unknown."""
    assert images.age(created, datetime(2026, 5, 1, 12, 0, tzinfo=UTC)) == age


def test_created_at_prefers_the_config_and_falls_back_to_the_label() -> None:
    """upstream Resolve: the config's created time unless it is the zero time, else the OCI label."""
    label = {"org.opencontainers.image.created": " 2026-05-01T00:00:00Z "}
    assert images.created_at("2026-04-01T10:20:30.123456789+02:00", label) == "2026-04-01T08:20:30Z"
    assert images.created_at("0001-01-01T00:00:00Z", label) == "2026-05-01T00:00:00Z"
    assert images.created_at("", {}) == ""


def test_a_restart_decides_the_same_and_a_new_generation_reuses() -> None:
    """A resolution recorded for this generation is decided again the same way (a restart records nothing);
    the next generation with the same image reuses it without asking."""
    first = decided(deployment(), fake_resolved(DEFAULT_IMAGE, "sha256:default"))
    assert isinstance(first, WorkloadRendered) and first.image is not None and first.image.generation == 1
    restarted = decided(deployment(image=first.image))
    assert restarted.status == first.status and restarted.image == first.image
    later = decided(deployment({"spec.scaling": {"replicas": 2}}, generation=2, image=first.image))
    condition(later, "ImageResolved", "True", "ImageResolutionReused")
    assert container_image(later) == "vllm/vllm-openai@sha256:default"
    # a changed image asks again
    changed_image = deployment({"spec.engine.image": "vllm/vllm-openai:latest"}, generation=3, image=first.image)
    assert workload.image_lookup(changed_image) == "vllm/vllm-openai:latest"


@pytest.mark.parametrize(
    ("reference", "host", "path", "tag", "digest"),
    [
        ("vllm/vllm-openai:cu130-nightly", "registry-1.docker.io", "vllm/vllm-openai", "cu130-nightly", ""),
        ("ubuntu", "registry-1.docker.io", "library/ubuntu", "latest", ""),
        ("docker.io/library/busybox:1", "registry-1.docker.io", "library/busybox", "1", ""),
        ("index.docker.io/vllm/vllm-openai:latest", "registry-1.docker.io", "vllm/vllm-openai", "latest", ""),
        ("ghcr.io/acme/vllm:cuda12", "ghcr.io", "acme/vllm", "cuda12", ""),
        ("127.0.0.1:5000/acme/vllm:cuda12", "127.0.0.1:5000", "acme/vllm", "cuda12", ""),
        ("localhost/acme:1", "localhost", "acme", "1", ""),
        ("acme/vllm@sha256:" + "a" * 64, "registry-1.docker.io", "acme/vllm", "", "sha256:" + "a" * 64),
    ],
)
def test_registry_location_follows_dockers_naming(reference: str, host: str, path: str, tag: str, digest: str) -> None:
    assert registry.locate(reference) == registry.Location(host, path, tag, digest)


@pytest.mark.parametrize("reference", ["Acme/Vllm:1", "acme/vllm:bad tag", "acme/vllm@sha256:short", "", "user:secret@host/x:1"])
def test_registry_location_refuses_what_is_not_a_reference(reference: str) -> None:
    with pytest.raises(registry.Unresolvable):
        registry.locate(reference)


def test_plain_http_only_for_loopback_and_named_registries() -> None:
    assert registry.plain_http("127.0.0.1:5000") and registry.plain_http("localhost:5000") and registry.plain_http("[::1]:5000")
    assert not registry.plain_http("registry-1.docker.io") and not registry.plain_http("10.0.0.1:5000")
    assert registry.plain_http("registry.internal:5000", frozenset({"registry.internal:5000"}))


def test_resolution_settings() -> None:
    def configured(environ: dict[str, str], cluster: bool) -> registry.RegistryResolver | None:
        return registry.configured(settings.load(environ).images, cluster=cluster)

    assert configured({}, cluster=False) is None
    assert configured({}, cluster=True) == registry.RegistryResolver()
    assert configured({"JETWAY_IMAGE_RESOLUTION": "off"}, cluster=True) is None
    found = configured({"JETWAY_IMAGE_RESOLUTION": "registry", "JETWAY_REGISTRY_PLAIN_HTTP": " a:5000, b "}, cluster=False)
    assert found == registry.RegistryResolver(named_plain=frozenset({"a:5000", "b"}))
    with pytest.raises(ValueError, match="JETWAY_IMAGE_RESOLUTION must be one of registry, off"):
        configured({"JETWAY_IMAGE_RESOLUTION": "yes"}, cluster=True)
