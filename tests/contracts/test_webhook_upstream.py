"""ModelDeployment admission, ported from AI Runway's own tests (ai-runway/airunway b0d3fb7):
controller/internal/webhook/v1alpha1/modeldeployment_webhook_test.go (Describe "ModelDeployment
Webhook", its defaulting and validating contexts), storage_volume_equal_test.go, the resource
ceilings of security_validation_test.go and controller/api/v1alpha1/modeldeployment_validation_test.go.

Each test is the upstream case's input and verdict, run through `admit` (an update passes the old
object), asserting what a user is shown: accepted or refused, the words and the field path. Where
Jetway answers otherwise on purpose the test says so and docs/upstream-differences.md gives the reason.

Not here: the provider-compatibility context (the InferenceProviderConfig lookup at admission and the
Dynamo mocker backend, tested beside their own rules), `spec.provider.overrides`
(test_overrides_upstream.py) and the spec.image / spec.engine.image cases (image handling).
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import Admission, admit
from contracts.modeldeployment import ModelDeployment
from tests.contracts.cases import DELETE, changed

NAME = "my-deployment"
LLAMA = "meta-llama/Llama-2-7b-chat-hf"
VOL = "spec.model.storage.volumes"
MANAGED_IMMUTABLE = "managed storage volume is immutable once created"
PROVIDER_IMMUTABLE = "provider.name is immutable (changing it requires delete and recreate)"

BASE: dict[str, Any] = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": NAME, "namespace": "default"},
    "spec": {"model": {"id": LLAMA}},
}


def doc(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    return changed(BASE, changes or {})


def create(changes: dict[str, Any] | None = None) -> Admission:
    return admit(doc(changes))


def update(old_changes: dict[str, Any], new_changes: dict[str, Any], *, status: dict[str, Any] | None = None) -> Admission:
    old_doc = doc(old_changes)
    if status is not None:
        old_doc["status"] = status
    old = admit(old_doc).obj
    assert old is not None
    return admit(doc(new_changes), old=old)


def text(verdict: Admission) -> str:
    """The refusal as the webhook's message lists it: `path: rule` for each problem."""
    return "; ".join(str(p) for p in verdict.problems)


def refused(verdict: Admission, *words: str, path: str | None = None) -> None:
    assert not verdict.ok, "admitted"
    for word in words:
        assert word in text(verdict), text(verdict)
    if path is not None:
        assert path in {p.path for p in verdict.problems}, text(verdict)


def admitted(verdict: Admission, *, warnings: list[str] | None = None) -> None:
    assert verdict.ok, text(verdict)
    assert verdict.warnings == (warnings or []), verdict.warnings


def defaulted(changes: dict[str, Any]) -> ModelDeployment:
    md = create(changes).obj
    assert isinstance(md, ModelDeployment)
    return md


def volume(**fields: Any) -> dict[str, Any]:
    return {"name": "model-data", **fields}


def managed(**fields: Any) -> dict[str, Any]:
    """A controller-created (sized) model cache as upstream's update cases write it; DELETE drops a field."""
    written = {
        "name": "model-data",
        "claimName": f"{NAME}-model-data",
        "mountPath": "/model-cache",
        "purpose": "modelCache",
        "size": "100Gi",
        "accessMode": "ReadWriteMany",
        **fields,
    }
    return {k: v for k, v in written.items() if v is not DELETE}


def unmanaged(**fields: Any) -> dict[str, Any]:
    return {"name": "model-data", "claimName": "existing-pvc", "mountPath": "/model-cache", "purpose": "modelCache", **fields}


# --- When creating ModelDeployment under Defaulting Webhook


def test_should_default_mount_path_for_model_cache_purpose() -> None:
    """upstream: ModelDeployment Webhook/Should default mountPath for modelCache purpose"""
    md = defaulted({VOL: [volume(claimName="my-pvc", purpose="modelCache")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].mountPath == "/model-cache"


def test_should_default_mount_path_for_compilation_cache_purpose() -> None:
    """upstream: ModelDeployment Webhook/Should default mountPath for compilationCache purpose"""
    md = defaulted({VOL: [volume(name="compile-data", claimName="compile-pvc", purpose="compilationCache")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].mountPath == "/compilation-cache"


def test_should_default_purpose_to_custom_when_not_specified() -> None:
    """upstream: ModelDeployment Webhook/Should default purpose to custom when not specified"""
    md = defaulted({VOL: [volume(name="extra-data", claimName="extra-pvc", mountPath="/data")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].purpose == "custom"


def test_should_not_override_explicitly_set_mount_path() -> None:
    """upstream: ModelDeployment Webhook/Should not override explicitly set mountPath"""
    md = defaulted({VOL: [volume(claimName="my-pvc", mountPath="/custom-path", purpose="modelCache")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].mountPath == "/custom-path"


def test_should_default_claim_name_when_size_is_set_and_claim_name_is_empty() -> None:
    """upstream: ModelDeployment Webhook/Should default claimName when size is set and claimName is empty"""
    md = defaulted({VOL: [volume(purpose="modelCache", size="100Gi")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].claimName == "my-deployment-model-data"


def test_should_default_access_mode_to_read_write_many_when_size_is_set() -> None:
    """upstream: ModelDeployment Webhook/Should default accessMode to ReadWriteMany when size is set"""
    md = defaulted({VOL: [volume(purpose="modelCache", size="100Gi")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].accessMode == "ReadWriteMany"


def test_should_not_override_explicitly_set_claim_name_when_size_is_set() -> None:
    """upstream: ModelDeployment Webhook/Should not override explicitly set claimName when size is set"""
    verdict = create({VOL: [volume(claimName="custom-pvc-name", purpose="modelCache", size="100Gi")]})
    assert isinstance(verdict.obj, ModelDeployment)
    storage = verdict.obj.spec.model.storage
    assert storage and storage.volumes and storage.volumes[0].claimName == "custom-pvc-name"
    # defaulting keeps it; validation then refuses it (the case below)
    refused(verdict, "claimName must not be set when size is set", path=f"{VOL}[0].claimName")


def test_should_not_set_access_mode_defaults_when_size_is_not_set() -> None:
    """upstream: ModelDeployment Webhook/Should not set accessMode defaults when size is not set"""
    md = defaulted({VOL: [volume(claimName="existing-pvc", purpose="modelCache")]})
    assert md.spec.model.storage and md.spec.model.storage.volumes
    assert md.spec.model.storage.volumes[0].accessMode is None


def test_should_default_gpu_to_1_in_aggregated_mode_when_engine_is_explicit_and_no_custom_image_is_set() -> None:
    """upstream: ModelDeployment Webhook/Should default GPU to 1 in aggregated mode when engine is explicit and no custom image is set"""
    md = defaulted({"spec.engine": {"type": "vllm"}})
    assert md.spec.resources and md.spec.resources.gpu
    assert (md.spec.resources.gpu.count, md.spec.resources.gpu.type) == (1, "nvidia.com/gpu")


def test_should_not_default_gpu_when_a_custom_image_is_set() -> None:
    """upstream: ModelDeployment Webhook/Should not default GPU when a custom image is set"""
    md = defaulted({"spec.engine": {"type": "vllm"}, "spec.image": "my.registry.example.com/custom-runtime:latest"})
    assert md.spec.resources is None


# --- When creating or updating ModelDeployment under Validating Webhook: names


def test_should_reject_names_containing_dots() -> None:
    """upstream: ModelDeployment Webhook/Should reject names containing dots"""
    verdict = admit(changed(BASE, {"metadata.name": "qwen3-0.6b", "spec.model.id": "Qwen/Qwen3-0.6B"}))
    refused(verdict, "must not contain dots", path="metadata.name")


def test_should_admit_names_without_dots() -> None:
    """upstream: ModelDeployment Webhook/Should admit names without dots"""
    admitted(admit(changed(BASE, {"metadata.name": "qwen3-0-6b", "spec.model.id": "Qwen/Qwen3-0.6B"})))


def test_should_allow_updates_on_existing_resources_with_dots_in_name() -> None:
    """upstream: ModelDeployment Webhook/Should allow updates on existing resources with dots in name"""
    dotted = changed(BASE, {"metadata.name": "qwen3-0.6b", "spec.model.id": "Qwen/Qwen3-0.6B"})
    old = admit(dotted).obj  # created before the rule (or without the webhook)
    assert old is not None
    admitted(admit(dotted, old=old))


# --- provider.name


def test_should_reject_changing_an_explicitly_set_provider_name() -> None:
    """upstream: ModelDeployment Webhook/Should reject changing an explicitly-set provider.name"""
    verdict = update(
        {"spec.model.id": "Qwen/Qwen2.5-0.5B-Instruct", "spec.provider": {"name": "dynamo"}},
        {"spec.model.id": "Qwen/Qwen2.5-0.5B-Instruct", "spec.provider": {"name": "vllm"}},
    )
    refused(verdict, "provider.name is immutable", path="spec.provider.name")
    assert [str(p) for p in verdict.problems] == [f"spec.provider.name: {PROVIDER_IMMUTABLE}"]


def test_should_reject_overriding_an_auto_selected_provider_recorded_only_in_status() -> None:
    """upstream: ModelDeployment Webhook/Should reject overriding an auto-selected provider recorded only in status"""
    verdict = update(
        {"spec.model.id": "Qwen/Qwen2.5-0.5B-Instruct"},
        {"spec.model.id": "Qwen/Qwen2.5-0.5B-Instruct", "spec.provider": {"name": "vllm"}},
        status={"provider": {"name": "dynamo"}},
    )
    refused(verdict, "provider.name is immutable", path="spec.provider.name")


def test_should_admit_an_update_that_does_not_change_the_effective_provider() -> None:
    """upstream: ModelDeployment Webhook/Should admit an update that does not change the effective provider"""
    verdict = update(
        {"spec.model.id": "Qwen/Qwen2.5-0.5B-Instruct"},
        {"spec.model.id": "Qwen/Qwen2.5-0.5B-Instruct"},
        status={"provider": {"name": "dynamo"}},
    )
    admitted(verdict)


# --- engine.args and engine.extraArgs


def test_should_reject_a_flag_set_in_both_engine_args_and_engine_extra_args_on_create() -> None:
    """upstream: ModelDeployment Webhook/Should reject a flag set in both engine.args and engine.extraArgs on create"""
    verdict = create({"spec.engine": {"args": {"tensor-parallel-size": "4"}, "extraArgs": ["--tensor-parallel-size=2"]}})
    refused(verdict, "tensor-parallel-size", "spec.engine.args", "spec.engine.extraArgs", path="spec.engine.extraArgs[0]")


def test_should_reject_a_flag_set_in_both_engine_args_and_engine_extra_args_on_update() -> None:
    """upstream: ModelDeployment Webhook/Should reject a flag set in both engine.args and engine.extraArgs on update"""
    verdict = update({}, {"spec.engine": {"args": {"tensor-parallel-size": "4"}, "extraArgs": ["--tensor-parallel-size", "2"]}})
    refused(verdict, "tensor-parallel-size", path="spec.engine.extraArgs[0]")


def test_should_admit_disjoint_engine_args_and_engine_extra_args() -> None:
    """upstream: ModelDeployment Webhook/Should admit disjoint engine.args and engine.extraArgs"""
    admitted(
        create({"spec.engine": {"args": {"gpu-memory-utilization": "0.9"}, "extraArgs": ["--enable-chunked-prefill", "--max-num-seqs=64"]}})
    )


ENGINE_ARGS = [
    ("no overlap is allowed", {"gpu-memory-utilization": "0.9"}, ["--enable-chunked-prefill", "--max-num-seqs=64"], False),
    ("same key inline-value form in both is rejected", {"tensor-parallel-size": "4"}, ["--tensor-parallel-size=2"], True),
    ("same key two-token form in both is rejected", {"tensor-parallel-size": "4"}, ["--tensor-parallel-size", "2"], True),
    ("extraArgs-only flag is allowed (no conflict)", None, ["--tensor-parallel-size=2"], False),
    ("args-only flag is allowed (no conflict)", {"tensor-parallel-size": "4"}, None, False),
    ("bare positional token never collides", {"tensor-parallel-size": "4"}, ["tensor-parallel-size"], False),
    ("empty inputs are allowed", None, None, False),
]


@pytest.mark.parametrize(("case", "args", "extra", "refuses"), ENGINE_ARGS, ids=[c[0] for c in ENGINE_ARGS])
def test_validate_engine_args(case: str, args: dict[str, str] | None, extra: list[str] | None, refuses: bool) -> None:
    """upstream: TestValidateEngineArgs (each case by its name)"""
    engine = {k: v for k, v in (("args", args), ("extraArgs", extra)) if v is not None}
    verdict = create({"spec.engine": engine})
    if refuses:
        refused(verdict, "spec.engine.args", "spec.engine.extraArgs")
    else:
        admitted(verdict)


# --- storage volumes on create


def test_should_admit_a_single_model_cache_volume() -> None:
    """upstream: ModelDeployment Webhook/Should admit a single modelCache volume"""
    admitted(create({VOL: [volume(claimName="my-pvc", mountPath="/model-cache", purpose="modelCache")]}))


def test_should_admit_model_cache_plus_compilation_cache_together() -> None:
    """upstream: ModelDeployment Webhook/Should admit modelCache + compilationCache together"""
    volumes = [
        volume(claimName="model-pvc", mountPath="/model-cache", purpose="modelCache"),
        volume(name="compile-data", claimName="compile-pvc", mountPath="/compilation-cache", purpose="compilationCache"),
    ]
    admitted(create({VOL: volumes}))


def test_should_admit_custom_volume_with_explicit_mount_path() -> None:
    """upstream: ModelDeployment Webhook/Should admit custom volume with explicit mountPath"""
    admitted(create({VOL: [volume(name="extra-data", claimName="extra-pvc", mountPath="/data/extra", purpose="custom")]}))


def test_should_reject_duplicate_volume_names() -> None:
    """upstream: ModelDeployment Webhook/Should reject duplicate volume names"""
    volumes = [
        volume(name="vol", claimName="pvc-a", mountPath="/mount-a", purpose="custom"),
        volume(name="vol", claimName="pvc-b", mountPath="/mount-b", purpose="custom"),
    ]
    refused(create({VOL: volumes}), "duplicate volume name", path=f"{VOL}[1].name")


def test_should_reject_duplicate_mount_paths() -> None:
    """upstream: ModelDeployment Webhook/Should reject duplicate mountPaths"""
    volumes = [
        volume(name="vol-a", claimName="pvc-a", mountPath="/same-path", purpose="custom"),
        volume(name="vol-b", claimName="pvc-b", mountPath="/same-path", purpose="custom"),
    ]
    refused(create({VOL: volumes}), "duplicate mount path", path=f"{VOL}[1].mountPath")


def test_should_reject_duplicate_claim_names() -> None:
    """upstream: ModelDeployment Webhook/Should reject duplicate claimNames"""
    volumes = [
        volume(name="vol-a", claimName="same-pvc", mountPath="/mount-a", purpose="custom"),
        volume(name="vol-b", claimName="same-pvc", mountPath="/mount-b", purpose="custom"),
    ]
    refused(create({VOL: volumes}), "duplicate claim name", path=f"{VOL}[1].claimName")


def test_should_reject_relative_mount_path() -> None:
    """upstream: ModelDeployment Webhook/Should reject relative mountPath"""
    verdict = create({VOL: [volume(name="vol", claimName="pvc", mountPath="relative/path", purpose="custom")]})
    refused(verdict, "must be an absolute path", path=f"{VOL}[0].mountPath")


def test_should_reject_custom_purpose_without_explicit_mount_path() -> None:
    """upstream: ModelDeployment Webhook/Should reject custom purpose without explicit mountPath"""
    verdict = create({VOL: [volume(name="vol", claimName="pvc", purpose="custom")]})
    refused(verdict, "mountPath is required when purpose is custom", path=f"{VOL}[0].mountPath")


def test_should_reject_two_model_cache_volumes() -> None:
    """upstream: ModelDeployment Webhook/Should reject two modelCache volumes"""
    volumes = [
        volume(name="cache-a", claimName="pvc-a", mountPath="/model-cache-a", purpose="modelCache"),
        volume(name="cache-b", claimName="pvc-b", mountPath="/model-cache-b", purpose="modelCache"),
    ]
    refused(create({VOL: volumes}), "at most one volume with purpose=modelCache")


@pytest.mark.parametrize("system", ["/dev", "/proc", "/sys", "/etc", "/var/run"])
def test_should_reject_system_path_overlap(system: str) -> None:
    """upstream: ModelDeployment Webhook/Should reject system path overlap"""
    verdict = create({VOL: [volume(name="vol", claimName="pvc", mountPath=system, purpose="custom")]})
    refused(verdict, "system path", path=f"{VOL}[0].mountPath")


def test_should_reject_system_path_sub_directory() -> None:
    """upstream: ModelDeployment Webhook/Should reject system path sub-directory"""
    verdict = create({VOL: [volume(name="vol", claimName="pvc", mountPath="/proc/something", purpose="custom")]})
    refused(verdict, "system path", path=f"{VOL}[0].mountPath")


def test_should_warn_on_read_only_compilation_cache() -> None:
    """upstream: ModelDeployment Webhook/Should warn on readOnly compilationCache"""
    verdict = create(
        {
            VOL: [
                volume(
                    name="compile-data", claimName="compile-pvc", mountPath="/compilation-cache", purpose="compilationCache", readOnly=True
                )
            ]
        }
    )
    assert verdict.ok, text(verdict)
    assert len(verdict.warnings) == 1
    assert "compilationCache" in verdict.warnings[0] and "readOnly" in verdict.warnings[0]


def test_should_warn_on_read_only_model_cache_with_huggingface_source() -> None:
    """upstream: ModelDeployment Webhook/Should warn on readOnly modelCache with huggingface source"""
    verdict = create({"spec.model.source": "huggingface", VOL: [unmanaged(claimName="my-pvc", readOnly=True)]})
    assert verdict.ok, text(verdict)
    assert len(verdict.warnings) == 1
    for word in ("modelCache", "readOnly", "download will be skipped"):
        assert word in verdict.warnings[0]


def test_should_admit_volume_with_size_and_auto_generated_claim_name() -> None:
    """upstream: ModelDeployment Webhook/Should admit volume with size and auto-generated claimName"""
    admitted(create({VOL: [managed(accessMode=DELETE)]}))


def test_should_admit_volume_with_size_and_explicit_storage_class_name_and_claim_name() -> None:
    """upstream: ModelDeployment Webhook/Should admit volume with size and explicit storageClassName and claimName"""
    admitted(create({VOL: [managed(size="200Gi", storageClassName="fast-ssd", accessMode=DELETE)]}))


def test_should_reject_claim_name_that_doesnt_match_auto_generated_pattern_when_size_is_set() -> None:
    """upstream: ModelDeployment Webhook/Should reject claimName that doesn't match auto-generated pattern when size is set"""
    verdict = create({VOL: [managed(claimName="arbitrary-pvc", accessMode=DELETE)]})
    refused(verdict, "claimName must not be set when size is set", path=f"{VOL}[0].claimName")
    assert [str(p) for p in verdict.problems] == [
        f'{VOL}[0].claimName: claimName must not be set when size is set (auto-generated as "my-deployment-model-data")'
    ]


def test_should_reject_volume_without_size_and_without_claim_name() -> None:
    """upstream: ModelDeployment Webhook/Should reject volume without size and without claimName"""
    verdict = create({VOL: [volume(mountPath="/model-cache", purpose="modelCache")]})
    refused(verdict, "claimName is required when size is not set", path=f"{VOL}[0].claimName")


def test_should_reject_size_with_read_only_true() -> None:
    """upstream: ModelDeployment Webhook/Should reject size with readOnly true"""
    verdict = create({VOL: [managed(accessMode=DELETE, readOnly=True)]})
    refused(verdict, "readOnly must not be true when size is set", path=f"{VOL}[0].readOnly")
    assert [p.message for p in verdict.problems] == [
        "readOnly must not be true when size is set (controller-created PVCs need write access)"
    ]


def test_should_reject_access_mode_set_without_size() -> None:
    """upstream: ModelDeployment Webhook/Should reject accessMode set without size"""
    verdict = create({VOL: [unmanaged(accessMode="ReadWriteMany")]})
    refused(verdict, "accessMode is only applicable when size is set", path=f"{VOL}[0].accessMode")


def test_should_reject_unsupported_access_mode_value() -> None:
    """upstream: ModelDeployment Webhook/Should reject unsupported accessMode value"""
    verdict = create({VOL: [managed(accessMode="banana")]})
    refused(verdict, "Unsupported value", path=f"{VOL}[0].accessMode")
    assert [p.message for p in verdict.problems] == [
        'Unsupported value: "banana": supported values: "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"'
    ]


def test_should_reject_storage_class_name_set_without_size() -> None:
    """upstream: ModelDeployment Webhook/Should reject storageClassName set without size"""
    verdict = create({VOL: [unmanaged(storageClassName="fast-ssd")]})
    refused(verdict, "storageClassName is only applicable when size is set", path=f"{VOL}[0].storageClassName")


def test_should_admit_volume_with_size_and_empty_storage_class_name() -> None:
    """upstream: ModelDeployment Webhook/Should admit volume with size and empty storageClassName"""
    admitted(create({VOL: [managed(storageClassName="", accessMode=DELETE)]}))


# --- managed (controller-created) volumes on update


@pytest.mark.parametrize(
    ("upstream", "old", "new"),
    [
        ("Should reject size change on managed volume", managed(), managed(size="200Gi")),
        (
            "Should reject storageClassName change on managed volume",
            managed(storageClassName="fast-ssd"),
            managed(storageClassName="slow-hdd"),
        ),
        ("Should reject accessMode change on managed volume", managed(), managed(accessMode="ReadWriteOnce")),
        ("Should reject removing size from managed volume", managed(), managed(size=DELETE, accessMode=DELETE)),
        ("Should reject mountPath change on managed volume", managed(), managed(mountPath="/new-mount-path")),
        ("Should reject readOnly change on managed volume", managed(), managed(readOnly=True)),
        ("Should reject purpose change on managed volume", managed(), managed(purpose="compilationCache")),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_should_reject_changes_to_a_managed_volume(upstream: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """upstream: ModelDeployment Webhook/Should reject {size, storageClassName, accessMode, mountPath,
    readOnly, purpose} change on managed volume, and Should reject removing size from managed volume"""
    refused(update({VOL: [old]}, {VOL: [new]}), MANAGED_IMMUTABLE, path=f"{VOL}[0]")


def test_should_allow_pvc_field_changes_on_unmanaged_volumes() -> None:
    """upstream: ModelDeployment Webhook/Should allow PVC field changes on unmanaged volumes"""
    admitted(update({VOL: [unmanaged()]}, {VOL: [unmanaged(claimName="different-pvc", mountPath="/new-mount-path")]}))


def test_should_allow_adding_new_managed_volume() -> None:
    """upstream: ModelDeployment Webhook/Should allow adding new managed volume"""
    admitted(update({}, {VOL: [managed()]}))


def test_should_reject_removing_managed_volume_from_list() -> None:
    """upstream: ModelDeployment Webhook/Should reject removing managed volume from list"""
    refused(update({VOL: [managed()]}, {VOL: []}), "cannot be removed", "model-data", path=VOL)


def test_should_reject_nullifying_storage_with_managed_volumes() -> None:
    """upstream: ModelDeployment Webhook/Should reject nullifying storage with managed volumes"""
    refused(update({VOL: [managed()]}, {}), "cannot be removed", path=VOL)


def test_should_reject_removing_one_of_two_managed_volumes() -> None:
    """upstream: ModelDeployment Webhook/Should reject removing one of two managed volumes"""
    both = [
        managed(),
        managed(name="compile-data", claimName=f"{NAME}-compile-data", mountPath="/compilation-cache", purpose="compilationCache"),
    ]
    verdict = update({VOL: both}, {VOL: [managed()]})
    refused(verdict, "cannot be removed", "compile-data", path=VOL)


def test_should_allow_removing_unmanaged_volume() -> None:
    """upstream: ModelDeployment Webhook/Should allow removing unmanaged volume"""
    admitted(update({VOL: [unmanaged()]}, {VOL: []}))


def test_should_allow_nullifying_storage_with_only_unmanaged_volumes() -> None:
    """upstream: ModelDeployment Webhook/Should allow nullifying storage with only unmanaged volumes"""
    admitted(update({VOL: [unmanaged()]}, {}))


# --- derived names and their limits


def _long_name_problems(name: str, volumes: list[dict[str, Any]] | None) -> list[str]:
    changes: dict[str, Any] = {"metadata.name": name}
    if volumes is not None:
        changes[VOL] = volumes
    verdict = admit(changed(BASE, changes))
    assert not verdict.ok
    return [str(p) for p in verdict.problems]


def test_should_reject_managed_volume_when_derived_pvc_claim_name_exceeds_253_chars() -> None:
    """upstream: ModelDeployment Webhook/Should reject managed volume when derived PVC claim name exceeds 253 chars"""
    name, vol_name = "a" * 240, "v" * 20
    problems = _long_name_problems(
        name, [{"name": vol_name, "claimName": f"{name}-{vol_name}", "mountPath": "/model-cache", "purpose": "modelCache", "size": "100Gi"}]
    )
    claim = [p for p in problems if p.startswith(f"{VOL}[0].name: ")]
    assert claim == [
        f'{VOL}[0].name: auto-generated PVC claim name "{name}-{vol_name}" exceeds the 253-character Kubernetes name limit '
        "(got 261 characters); use a shorter ModelDeployment or volume name"
    ]


def test_should_admit_managed_volume_when_derived_pvc_claim_name_is_within_limit() -> None:
    """upstream: ModelDeployment Webhook/Should admit managed volume when derived PVC claim name is within limit

    Upstream admits a 200-character name. Jetway caps names at 63 characters (a DNS-1035 label: the name
    becomes the Service's and labels' value) and, with a writable model cache, at 48 (the download Job's
    name becomes its pods' job-name label): refused for the name only, nothing about the claim name."""
    name = "a" * 200
    problems = _long_name_problems(
        name, [{"name": "cache", "claimName": f"{name}-cache", "mountPath": "/model-cache", "purpose": "modelCache", "size": "100Gi"}]
    )
    assert problems and all(p.startswith("metadata.name: ") for p in problems), problems


def test_should_reject_when_download_job_name_exceeds_253_chars() -> None:
    """upstream: ModelDeployment Webhook/Should reject when download job name exceeds 253 chars

    Jetway's limit is 63 characters, not 253: a Job's name becomes its pods' job-name label."""
    name = "a" * 250
    problems = _long_name_problems(
        name, [{"name": "mc", "claimName": f"{name}-mc", "mountPath": "/model-cache", "purpose": "modelCache", "size": "100Gi"}]
    )
    assert any(p.startswith("metadata.name: ") and "download Job name" in p for p in problems), problems


def test_download_job_name_limit_at_jetways_63_characters() -> None:
    """upstream: ModelDeployment Webhook/Should reject when download job name exceeds 253 chars, at Jetway's limit:
    the longest name with a writable model cache is 48 characters, 49 is refused with the Job's name in the words."""
    cache = [{"name": "mc", "purpose": "modelCache", "size": "100Gi"}]
    admitted(admit(changed(BASE, {"metadata.name": "a" * 48, VOL: cache})))
    verdict = admit(changed(BASE, {"metadata.name": "a" * 49, VOL: cache}))
    job = "a" * 49 + "-model-download"
    assert [str(p) for p in verdict.problems] == [
        f'metadata.name: auto-generated download Job name "{job}" exceeds the 63-character limit of a Job name '
        "(it becomes its pods' job-name label; got 64 characters); use a ModelDeployment name of at most 48 characters"
    ]


def test_should_not_validate_download_job_name_when_no_managed_model_cache_volume_exists() -> None:
    """upstream: ModelDeployment Webhook/Should not validate download job name when no managed modelCache volume exists

    Upstream admits the 250-character name; Jetway refuses it for the name alone (63 characters at most)."""
    problems = _long_name_problems("a" * 250, None)
    assert problems and all(p.startswith("metadata.name: ") and "download Job" not in p for p in problems), problems


# --- storage_volume_equal_test.go: what counts as a change to a managed volume


def test_storage_volume_equal_quantity_equivalence() -> None:
    """upstream: TestStorageVolumeEqual_QuantityEquivalence"""
    cache = {"name": "cache", "purpose": "modelCache"}
    admitted(update({VOL: [{**cache, "size": "1Gi"}]}, {VOL: [{**cache, "size": "1Gi"}]}))
    admitted(update({VOL: [{**cache, "size": "1Gi"}]}, {VOL: [{**cache, "size": "1024Mi"}]}))


REAL_CHANGES = [
    ("size changed", {"size": "200Gi"}),
    ("mount path changed", {"mountPath": "/other"}),
    ("read-only changed", {"readOnly": True}),
    ("storage class changed", {"storageClassName": "slow"}),
    ("access mode changed", {"accessMode": "ReadWriteOnce"}),
    ("claim name changed", {"claimName": "external-pvc"}),
    ("purpose changed", {"purpose": "custom"}),
]


@pytest.mark.parametrize(("case", "change"), REAL_CHANGES, ids=[c[0] for c in REAL_CHANGES])
def test_storage_volume_equal_detects_real_changes(case: str, change: dict[str, Any]) -> None:
    """upstream: TestStorageVolumeEqual_DetectsRealChanges"""
    base = {"name": "cache", "mountPath": "/model-cache", "purpose": "modelCache", "size": "100Gi", "storageClassName": "fast"}
    refused(update({VOL: [base]}, {VOL: [{**base, **change}]}), MANAGED_IMMUTABLE, path=f"{VOL}[0]")
    admitted(update({VOL: [base]}, {VOL: [dict(base)]}))  # an equal copy is no change


# --- security_validation_test.go: the resource ceilings (its overrides cases: test_overrides_upstream.py)


@pytest.mark.parametrize(
    ("upstream", "field", "value", "words"),
    [
        ("TestValidateResourceQuantity_WithinLimits", "cpu", "4", None),
        ("TestValidateResourceQuantity_ExceedsLimit", "cpu", "1024", "exceeds maximum allowed (512)"),
        ("TestValidateResourceQuantity_ExceedsMemoryLimit", "memory", "8Ti", "exceeds maximum allowed (4Ti)"),
        ("TestValidateResourceQuantity_ValidMemory", "memory", "256Gi", None),
        ("TestValidateResourceQuantity_InvalidFormat", "cpu", "notanumber", "quantity"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("Test") else "",
)
def test_validate_resource_quantity(upstream: str, field: str, value: str, words: str | None) -> None:
    """upstream: TestValidateResourceQuantity_* (spec.resources.cpu and spec.resources.memory)"""
    verdict = create({"spec.resources": {field: value}})
    if words is None:
        admitted(verdict)
    else:
        refused(verdict, words, path=f"spec.resources.{field}")


def test_validate_resource_quantity_empty_string() -> None:
    """upstream: TestValidateResourceQuantity_EmptyString: an empty quantity is no quantity, as if unset"""
    verdict = create({"spec.resources": {"cpu": "", "memory": ""}})
    admitted(verdict)
    assert verdict.obj is not None and verdict.obj.spec.resources is not None  # type: ignore[union-attr]
    assert verdict.obj.spec.resources.cpu is None and verdict.obj.spec.resources.memory is None  # type: ignore[union-attr]
    # a component's memory is a plain string upstream too
    components = {"prefill": {"memory": "", "gpu": {"count": 1}}, "decode": {"memory": "", "gpu": {"count": 1}}}
    disaggregated = create({"spec.serving": {"mode": "disaggregated"}, "spec.resources": {"gpu": {"count": 0}}, "spec.scaling": components})
    admitted(disaggregated)
    scaling = disaggregated.obj.spec.scaling  # type: ignore[union-attr]
    assert scaling is not None and scaling.prefill is not None and scaling.prefill.memory is None


@pytest.mark.parametrize(
    ("upstream", "changes", "path"),
    [
        ("TestResourceCeilings_GPUCount", {"spec.resources": {"gpu": {"count": 65}}}, "spec.resources.gpu.count"),
        ("TestResourceCeilings_AggregatedReplicas", {"spec.scaling": {"replicas": 33}}, "spec.scaling.replicas"),
        ("TestResourceCeilings_PrefillMemory", {"spec.scaling": {"prefill": {"memory": "8Ti"}}}, "spec.scaling.prefill.memory"),
        ("TestResourceCeilings_DecodeMemory", {"spec.scaling": {"decode": {"memory": "8Ti"}}}, "spec.scaling.decode.memory"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("Test") else "",
)
def test_resource_ceilings(upstream: str, changes: dict[str, Any], path: str) -> None:
    """upstream: TestResourceCeilings_* (a ceiling refused at its own field path)"""
    refused(create({"spec.model.id": "test/model", **changes}), "exceeds maximum allowed", path=path)


def test_resource_ceilings_gpu_count_valid() -> None:
    """upstream: TestResourceCeilings_GPUCountValid"""
    admitted(create({"spec.model.id": "test/model", "spec.engine": {"type": "vllm"}, "spec.resources": {"gpu": {"count": 8}}}))
