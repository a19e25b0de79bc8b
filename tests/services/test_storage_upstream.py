"""AI Runway's storage tests, ported: their inputs and expected outcomes, run against Jetway's pure
storage plan (`services/storage/decide.py`): the PVCs and the model-download Job it writes, and
the `StorageReady`/`ModelDownloaded` conditions it derives from what the cluster reports.

Sources (ai-runway/airunway b0d3fb7): controller/pkg/storage/pvc_test.go and download_test.go.
Upstream's functions read and write the cluster themselves; here the cluster's answer is the
`Observed` the plan is given, and what upstream returns as an error is the condition a user sees.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import StoragePlanned
from contracts.subjects import Key
from services.storage.decide import DOWNLOAD_BACKOFF_LIMIT, DOWNLOADER_IMAGE, Observed, job_outcome, plan

KEY = Key("ModelDeployment", "default", "my-model")
UID = "test-uid"


def manifest(model: dict[str, Any], volumes: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": dict(model), "resources": {"gpu": {"count": 1}}, **spec}
    if volumes is not None:
        body["model"]["storage"] = {"volumes": volumes}
    return {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": KEY.name, "namespace": KEY.namespace},
        "spec": {"engine": {"type": "vllm"}, **body},
    }


def planned(doc: dict[str, Any], observed: Observed | None = None) -> StoragePlanned:
    verdict = admit(doc)
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    result = plan(verdict.obj, KEY, 1, UID, observed)
    assert isinstance(result, StoragePlanned), result
    return result


def objects(result: StoragePlanned, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in result.objects if o["kind"] == kind}


def condition(result: StoragePlanned, type_: str) -> tuple[str, str, str]:
    found = next(c for c in result.status.conditions if c.type == type_)
    return found.status, found.reason, found.message


CACHE_100GI = {"name": "model-cache", "size": "100Gi", "accessMode": "ReadWriteMany", "purpose": "modelCache"}


def download_md(**spec: Any) -> dict[str, Any]:
    """upstream's newDownloadMD: a Hugging Face model into a 100Gi managed model cache at /model-cache."""
    volume = {"name": "model-cache", "mountPath": "/model-cache", "purpose": "modelCache", "size": "100Gi", "accessMode": "ReadWriteMany"}
    return manifest({"id": "meta-llama/Llama-2-7b-chat-hf", "source": "huggingface"}, [volume], **spec)


# --- pvc_test.go

HAS_MANAGED = [
    ("no storage", None, False),
    ("pre-existing PVC only", [{"name": "cache", "claimName": "existing-pvc", "mountPath": "/cache"}], False),
    ("managed PVC with size", [{"name": "cache", "size": "100Gi", "mountPath": "/cache"}], True),
]


@pytest.mark.parametrize(("subcase", "volumes", "managed"), HAS_MANAGED, ids=[h[0] for h in HAS_MANAGED])
def test_has_managed_pvcs(subcase: str, volumes: list[dict[str, Any]] | None, managed: bool) -> None:
    """upstream: TestHasManagedPVCs/<subcase>"""
    result = planned(manifest({"id": "test"}, volumes))
    assert bool(objects(result, "PersistentVolumeClaim")) is managed


def test_ensure_pvcs_creation() -> None:
    """upstream: TestEnsurePVCsCreation"""
    result = planned(manifest({"id": "meta-llama/Llama-2-7b"}, [CACHE_100GI]))
    pvc = objects(result, "PersistentVolumeClaim")["my-model-model-cache"]
    assert pvc["metadata"]["namespace"] == "default"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert pvc["metadata"]["labels"]["airunway.ai/managed-by"] == "airunway"
    assert pvc["metadata"]["labels"]["airunway.ai/model-deployment"] == "my-model"
    [owner] = pvc["metadata"]["ownerReferences"]
    assert (owner["name"], owner["uid"], owner["blockOwnerDeletion"]) == ("my-model", UID, True)
    assert "storageClassName" not in pvc["spec"]  # the cluster's default class
    # just created, not yet reported by the cluster: not ready
    assert condition(result, "StorageReady")[:2] == ("False", "PVCsPending")


def test_ensure_pvcs_with_storage_class() -> None:
    """upstream: TestEnsurePVCsWithStorageClass"""
    volume = {"name": "model-cache", "size": "200Gi", "storageClassName": "fast-ssd", "accessMode": "ReadWriteOnce", "mountPath": "/m"}
    pvc = objects(planned(manifest({"id": "test-model"}, [volume])), "PersistentVolumeClaim")["my-model-model-cache"]
    assert pvc["spec"]["storageClassName"] == "fast-ssd"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_ensure_pvcs_idempotent() -> None:
    """upstream: TestEnsurePVCsIdempotent"""
    volume = {"name": "model-cache", "size": "100Gi", "accessMode": "ReadWriteMany", "mountPath": "/m"}
    result = planned(manifest({"id": "test-model"}, [volume]), Observed(pvc_phases={"my-model-model-cache": "Bound"}))
    assert condition(result, "StorageReady")[:2] == ("True", "PVCsBound")
    assert len(objects(result, "PersistentVolumeClaim")) == 1  # the same claim again, not a second one


def test_ensure_pvcs_pending() -> None:
    """upstream: TestEnsurePVCsPending (a managed claim waiting for its first consumer counts as ready)"""
    volume = {"name": "model-cache", "size": "100Gi", "accessMode": "ReadWriteMany", "mountPath": "/m"}
    result = planned(manifest({"id": "test-model"}, [volume]), Observed(pvc_phases={"my-model-model-cache": "Pending"}))
    assert condition(result, "StorageReady")[:2] == ("True", "PVCsBound")


def test_ensure_pvcs_no_storage() -> None:
    """upstream: TestEnsurePVCsNoStorage"""
    result = planned(manifest({"id": "test"}))
    assert result.objects == () and result.volumes == ()
    assert condition(result, "StorageReady")[0] == "True"


def test_ensure_pvcs_with_empty_storage_class() -> None:
    """upstream: TestEnsurePVCsWithEmptyStorageClass"""
    volume = {"name": "model-cache", "size": "100Gi", "storageClassName": "", "accessMode": "ReadWriteMany", "mountPath": "/m"}
    pvc = objects(planned(manifest({"id": "test-model"}, [volume])), "PersistentVolumeClaim")["my-model-model-cache"]
    assert pvc["spec"]["storageClassName"] == ""  # present and empty: no dynamic provisioning


def test_build_pvc_nil_size() -> None:
    """upstream: TestBuildPVCNilSize (only a volume with a size gets a controller-created PVC)"""
    result = planned(manifest({"id": "test-model"}, [{"name": "model-cache", "claimName": "theirs", "mountPath": "/m"}]))
    assert objects(result, "PersistentVolumeClaim") == {}
    assert result.volumes == ({"name": "model-cache", "persistentVolumeClaim": {"claimName": "theirs"}},)


def test_ensure_pvcs_managed_lost() -> None:
    """upstream: EnsurePVCs on a managed PVC in the Lost phase (pvc.go: "PVC %s is in Lost phase")"""
    result = planned(manifest({"id": "test-model"}, [CACHE_100GI]), Observed(pvc_phases={"my-model-model-cache": "Lost"}))
    status, reason, message = condition(result, "StorageReady")
    assert (status, reason) == ("False", "PVCFailed")
    assert message == "PVC my-model-model-cache is in Lost phase"
    assert result.status.phase == "Failed"


PRE_EXISTING = {"name": "model-cache", "purpose": "modelCache", "readOnly": True}


def pre_existing(claim: str) -> dict[str, Any]:
    return manifest({"id": "test-model"}, [{**PRE_EXISTING, "claimName": claim}])


def test_ensure_pvcs_pre_existing_bound() -> None:
    """upstream: TestEnsurePVCsPreExistingBound"""
    result = planned(pre_existing("existing-pvc"), Observed(preexisting={"existing-pvc": "Bound"}))
    assert condition(result, "StorageReady")[:2] == ("True", "PVCsBound")
    assert objects(result, "PersistentVolumeClaim") == {}  # never created by Jetway


def test_ensure_pvcs_pre_existing_pending() -> None:
    """upstream: TestEnsurePVCsPreExistingPending"""
    result = planned(pre_existing("existing-pvc"), Observed(preexisting={"existing-pvc": "Pending"}))
    assert condition(result, "StorageReady")[:2] == ("False", "PVCsPending")
    assert result.status.phase != "Failed"


def test_ensure_pvcs_pre_existing_not_found() -> None:
    """upstream: TestEnsurePVCsPreExistingNotFound"""
    result = planned(pre_existing("nonexistent-pvc"), Observed(preexisting={}))
    status, reason, message = condition(result, "StorageReady")
    assert (status, reason) == ("False", "PVCFailed")
    assert "not found" in message and "model-cache" in message and "nonexistent-pvc" in message
    assert result.status.phase == "Failed"


def test_ensure_pvcs_pre_existing_lost() -> None:
    """upstream: TestEnsurePVCsPreExistingLost"""
    result = planned(pre_existing("lost-pvc"), Observed(preexisting={"lost-pvc": "Lost"}))
    status, reason, message = condition(result, "StorageReady")
    assert (status, reason) == ("False", "PVCFailed") and "Lost phase" in message


def test_pre_existing_claims_not_watched_are_assumed_present() -> None:
    """upstream: TestEnsurePVCsPreExistingBound (standalone: no cluster to ask, so nothing is refused)"""
    result = planned(pre_existing("existing-pvc"))
    assert condition(result, "StorageReady")[:2] == ("True", "PVCsBound")


# --- download_test.go

NEEDS_DOWNLOAD = [
    ("huggingface with modelCache volume", download_md(), True),
    (
        "custom source",
        manifest({"id": "x", "source": "custom"}, [{"name": "cache", "purpose": "modelCache", "claimName": "c"}]),
        False,
    ),
    (
        "huggingface without modelCache volume",
        manifest({"id": "x", "source": "huggingface"}, [{"name": "custom", "purpose": "custom", "claimName": "c", "mountPath": "/c"}]),
        False,
    ),
    ("huggingface without storage", manifest({"id": "x", "source": "huggingface"}), False),
    (
        "huggingface with readOnly modelCache volume",
        manifest(
            {"id": "x", "source": "huggingface"}, [{"name": "cache", "purpose": "modelCache", "readOnly": True, "claimName": "my-pvc"}]
        ),
        False,
    ),
]


@pytest.mark.parametrize(("subcase", "doc", "wanted"), NEEDS_DOWNLOAD, ids=[n[0] for n in NEEDS_DOWNLOAD])
def test_needs_download_job(subcase: str, doc: dict[str, Any], wanted: bool) -> None:
    """upstream: TestNeedsDownloadJob/<subcase>"""
    result = planned(doc)
    assert bool(objects(result, "Job")) is wanted
    assert bool(result.download_job) is wanted
    assert any(c.type == "ModelDownloaded" for c in result.status.conditions) is wanted


def test_ensure_download_job_creation() -> None:
    """upstream: TestEnsureDownloadJobCreation"""
    result = planned(download_md())
    job = objects(result, "Job")["my-model-model-download"]
    assert job["metadata"]["namespace"] == "default"
    assert job["spec"]["backoffLimit"] == DOWNLOAD_BACKOFF_LIMIT == 6
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == DOWNLOADER_IMAGE == "ghcr.io/ai-runway/airunway/model-downloader:latest"
    assert container["args"] == ["download", "meta-llama/Llama-2-7b-chat-hf"]
    assert "command" not in container  # the image's ENTRYPOINT runs
    names = [e["name"] for e in container["env"]]
    assert "MODEL_NAME" not in names  # the model id is an argument
    assert {"name": "HF_HOME", "value": "/model-cache"} in container["env"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/model-cache"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "16Gi"}}
    [volume] = job["spec"]["template"]["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == "my-model-model-cache"
    assert job["metadata"]["labels"]["airunway.ai/job-type"] == "model-download"
    assert job["metadata"]["labels"]["airunway.ai/managed-by"] == "airunway"
    [owner] = job["metadata"]["ownerReferences"]
    assert owner["blockOwnerDeletion"] is True and owner["uid"] == UID
    assert "envFrom" not in container  # no token secret: nothing imported
    assert condition(result, "ModelDownloaded")[:2] == ("False", "DownloadInProgress")  # just created: not complete


def test_ensure_download_job_with_hf_token() -> None:
    """upstream: TestEnsureDownloadJobWithHFToken

    Upstream imports the whole Secret (envFrom); Jetway passes its HF_TOKEN key (see
    docs/upstream-differences.md, Storage). Either way the downloader gets the token of that Secret.
    """
    [container] = objects(planned(download_md(secrets={"huggingFaceToken": "hf-token-secret"})), "Job")["my-model-model-download"]["spec"][
        "template"
    ]["spec"]["containers"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "HF_TOKEN"}}} in container["env"]


def job_summary(**status: Any) -> dict[str, Any]:
    return {"active": 0, "succeeded": 0, "failed": 0, "conditions": [], **status}


JOBS: list[tuple[str, dict[str, Any], int, str, str]] = [
    # (upstream test, the Job's status as the cluster reports it, its backoffLimit, state, words the message carries)
    (
        "TestEnsureDownloadJobCompleted",
        job_summary(succeeded=1, conditions=[{"type": "Complete", "status": "True", "message": "Job completed successfully"}]),
        6,
        "Complete",
        "",
    ),
    ("TestEnsureDownloadJobStillRunning", job_summary(active=1, failed=1), 3, "Running", ""),
    (
        "TestEnsureDownloadJobFailed",
        job_summary(failed=4, conditions=[{"type": "Failed", "status": "True", "message": "Job has reached the specified backoff limit"}]),
        3,
        "Failed",
        "failed permanently: Job has reached the specified backoff limit",
    ),
    (
        "TestEnsureDownloadJobFailedByConditionOnly",
        job_summary(
            failed=1, conditions=[{"type": "Failed", "status": "True", "message": "Job was active longer than specified deadline"}]
        ),
        3,
        "Failed",
        "active longer than specified deadline",
    ),
    ("TestEnsureDownloadJobFailedAtBackoffLimit", job_summary(failed=3), 3, "Failed", "failed permanently (failed=3, backoffLimit=3)"),
    ("TestEnsureDownloadJobFailedAtBackoffLimit (Jetway's limit)", job_summary(failed=6), 6, "Failed", "failed permanently"),
    ("TestEnsureDownloadJobCompleted (counter)", job_summary(succeeded=1), 6, "Complete", ""),
]


@pytest.mark.parametrize(("upstream", "summary", "limit", "state", "words"), JOBS, ids=[j[0] for j in JOBS])
def test_download_job_outcome(upstream: str, summary: dict[str, Any], limit: int, state: str, words: str) -> None:
    """upstream: TestEnsureDownloadJobCompleted, ...StillRunning, ...Failed, ...FailedByConditionOnly, ...FailedAtBackoffLimit"""
    seen, message = job_outcome("my-model-model-download", summary, backoff_limit=limit)
    assert seen == state
    assert words in message
    result = planned(download_md(), Observed(pvc_phases={"my-model-model-cache": "Bound"}, job=seen, job_message=message))
    status, reason, shown = condition(result, "ModelDownloaded")
    expected = {"Complete": ("True", "DownloadComplete"), "Running": ("False", "DownloadInProgress"), "Failed": ("False", "DownloadFailed")}
    assert (status, reason) == expected[state]
    if state == "Failed":
        assert shown.startswith("model download Job my-model-model-download failed permanently") and words in shown
        assert result.status.phase == "Failed"


def test_download_job_name() -> None:
    """upstream: TestDownloadJobName"""
    assert planned(download_md()).download_job == "my-model-model-download"
