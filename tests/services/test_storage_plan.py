"""Storage planning: PVCs, mounts, the download Job and the conditions (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.admission import admit
from contracts.cluster import OBSERVED, ObjectObserved
from contracts.events import Envelope, ResourceApplied, ResourceDeleted, Withdrawn
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import StorageInvalid, StoragePlanned
from contracts.subjects import SPEC, STORAGE, Key
from services.storage.decide import DOWNLOAD_BACKOFF_LIMIT, Observed, conflicted, job_outcome, plan
from services.storage.projection import Deployment, StorageState
from tests.contracts.cases import MD, changed

VOL = "spec.model.storage.volumes"
KEY = Key("ModelDeployment", "default", "qwen")


def planned(
    volumes: list[dict[str, Any]], observed: Observed | None = None, changes: dict[str, Any] | None = None
) -> StoragePlanned | StorageInvalid:
    verdict = admit(changed(MD, {VOL: volumes, **(changes or {})}))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return plan(verdict.obj, KEY, 2, "uid-1", observed)


def conditions(result: StoragePlanned | StorageInvalid) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in result.status.conditions}


def test_sized_volume_gets_a_pvc_with_defaults_and_owner() -> None:
    result = planned([{"name": "cache", "purpose": "modelCache", "size": "100Gi"}])
    assert isinstance(result, StoragePlanned)
    pvc = result.objects[0]
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == "qwen-cache"
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}}
    assert pvc["metadata"]["ownerReferences"][0] == {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "name": "qwen",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert pvc["metadata"]["labels"] == {
        "airunway.ai/managed-by": "airunway",
        "app.kubernetes.io/managed-by": "jetway",
        "airunway.ai/model-deployment": "qwen",
    }


def test_storage_class_empty_is_not_absent_and_names_pass_through() -> None:
    result = planned(
        [
            {"name": "a", "purpose": "modelCache", "size": "1Gi", "storageClassName": "", "accessMode": "ReadWriteOnce"},
            {"name": "b", "purpose": "custom", "size": "2Gi", "storageClassName": "fast", "claimName": "qwen-b", "mountPath": "/b"},
            {"name": "c", "purpose": "custom", "size": "3Gi", "mountPath": "/c"},
        ]
    )
    assert isinstance(result, StoragePlanned)
    specs = {o["metadata"]["name"]: o["spec"] for o in result.objects if o["kind"] == "PersistentVolumeClaim"}
    assert specs["qwen-a"]["storageClassName"] == "" and specs["qwen-a"]["accessModes"] == ["ReadWriteOnce"]
    assert specs["qwen-b"]["storageClassName"] == "fast"  # a sized volume's claimName can only be its generated one
    assert "storageClassName" not in specs["qwen-c"]


def test_every_volume_is_mounted_with_default_paths() -> None:
    result = planned(
        [
            {"name": "cache", "purpose": "modelCache", "claimName": "shared", "readOnly": True},
            {"name": "compiled", "purpose": "compilationCache", "claimName": "cc"},
            {"name": "data", "claimName": "d", "mountPath": "/data"},
        ]
    )
    assert isinstance(result, StoragePlanned)
    assert result.objects == ()
    assert list(result.volumes) == [
        {"name": "cache", "persistentVolumeClaim": {"claimName": "shared", "readOnly": True}},
        {"name": "compiled", "persistentVolumeClaim": {"claimName": "cc"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
    ]
    assert list(result.mounts) == [
        {"name": "cache", "mountPath": "/model-cache", "readOnly": True},
        {"name": "compiled", "mountPath": "/compilation-cache"},
        {"name": "data", "mountPath": "/data"},
    ]
    assert result.model_cache == "/model-cache" and result.download_job == ""
    assert conditions(result) == {"StorageReady": ("True", "PVCsBound")}


def test_hugging_face_model_into_a_writable_cache_gets_a_download_job() -> None:
    result = planned(
        [{"name": "cache", "purpose": "modelCache", "size": "50Gi", "mountPath": "/models"}],
        changes={"spec.secrets": {"huggingFaceToken": "hf"}},
    )
    assert isinstance(result, StoragePlanned)
    job = result.objects[1]
    assert job["kind"] == "Job" and job["metadata"]["name"] == "qwen-model-download" == result.download_job
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["download", "Qwen/Qwen3-0.6B"]
    assert {"name": "HF_HOME", "value": "/models"} in container["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}} in container["env"]
    assert job["spec"]["template"]["spec"]["volumes"] == [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "qwen-cache"}}]
    assert job["metadata"]["labels"]["airunway.ai/job-type"] == "model-download"
    assert conditions(result) == {"StorageReady": ("False", "PVCsPending"), "ModelDownloaded": ("False", "DownloadInProgress")}


def test_no_download_for_custom_models_or_read_only_caches() -> None:
    custom = planned([{"name": "cache", "purpose": "modelCache", "size": "5Gi"}], changes={"spec.model": {"id": "x", "source": "custom"}})
    read_only = planned([{"name": "cache", "purpose": "modelCache", "claimName": "c", "readOnly": True}])
    assert isinstance(custom, StoragePlanned) and isinstance(read_only, StoragePlanned)
    assert custom.download_job == read_only.download_job == ""


def test_conditions_follow_what_the_cluster_reports() -> None:
    volumes = [{"name": "cache", "purpose": "modelCache", "size": "5Gi"}]
    pending = planned(volumes, Observed(pvc_phases={"qwen-cache": "Pending"}, job="Running"))
    assert conditions(pending) == {"StorageReady": ("True", "PVCsBound"), "ModelDownloaded": ("False", "DownloadInProgress")}
    done = planned(volumes, Observed(pvc_phases={"qwen-cache": "Bound"}, job="Complete"))
    assert conditions(done) == {"StorageReady": ("True", "PVCsBound"), "ModelDownloaded": ("True", "DownloadComplete")}
    failed = planned(volumes, Observed(pvc_phases={"qwen-cache": "Lost"}, job="Failed"))
    assert conditions(failed) == {"StorageReady": ("False", "PVCFailed"), "ModelDownloaded": ("False", "DownloadFailed")}
    assert failed.status.phase == "Failed"


def test_invalid_storage_is_a_decision_not_a_crash() -> None:
    doc = changed(MD, {VOL: [{"name": "a", "purpose": "modelCache"}, {"name": "a", "purpose": "modelCache", "claimName": "x"}]})
    result = plan(ModelDeployment.model_validate(doc), KEY, 1, "")  # created without admission
    assert isinstance(result, StorageInvalid)
    assert any("claimName is required" in p for p in result.problems)
    assert conditions(result) == {"StorageReady": ("False", "PVCFailed")} and result.status.phase == "Failed"


# --- what the cluster reports, folded by the storage service's projection (Kubernetes mode)


def folded(volumes: list[dict[str, Any]], *observations: ObjectObserved) -> Deployment:
    """The storage service's view of qwen after the watcher recorded `observations` on it."""
    state = StorageState()
    doc = changed(MD, {VOL: volumes})
    applied = ResourceApplied(kind=KEY.kind, namespace=KEY.namespace, name=KEY.name, generation=2, spec=doc["spec"], uid="uid-1")
    for facet, event in [(SPEC, applied), *((OBSERVED, o) for o in observations)]:
        state.fold(Envelope(id="1", subject=KEY.subject(facet), producer="watcher", time=datetime.now(UTC), event=event))
    return state.deployments[KEY]


def job_seen(**summary: Any) -> ObjectObserved:
    full = {"active": 0, "succeeded": 0, "failed": 0, "conditions": [], **summary}
    return ObjectObserved(api_version="batch/v1", object_kind="Job", object_name="qwen-model-download", summary=full)


def test_a_failed_download_job_says_why_it_failed() -> None:
    # the projection reads a Job as job_outcome does: the Failed condition's message reaches the status
    volumes = [{"name": "cache", "purpose": "modelCache", "size": "5Gi"}]
    deadline = [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}
    ]
    seen = folded(volumes, job_seen(failed=1, conditions=deadline))
    downloaded = next(c for c in planned(volumes, seen.observed()).status.conditions if c.type == "ModelDownloaded")
    assert (downloaded.status, downloaded.reason) == ("False", "DownloadFailed")
    assert downloaded.message == "model download Job qwen-model-download failed permanently: Job was active longer than specified deadline"
    # as many failures as retries fail it too, before the Job controller's condition says so
    retried = folded(volumes, job_seen(failed=DOWNLOAD_BACKOFF_LIMIT)).observed()
    assert (retried.job, retried.job_message) == ("Failed", job_outcome("qwen-model-download", {"failed": DOWNLOAD_BACKOFF_LIMIT})[1])
    assert folded(volumes, job_seen(succeeded=1)).observed().job == "Complete"


def claim_seen(name: str, phase: str | None) -> ObjectObserved:
    summary = {"phase": phase} if phase else {}
    return ObjectObserved(
        api_version="v1", object_kind="PersistentVolumeClaim", object_name=name, exists=phase is not None, summary=summary, referenced=True
    )


def test_pre_existing_claims_follow_what_the_watcher_reports() -> None:
    volumes = [{"name": "cache", "purpose": "modelCache", "claimName": "shared", "readOnly": True}]

    def ready(*observations: ObjectObserved, watched: bool = True) -> tuple[str, str]:
        return conditions(planned(volumes, folded(volumes, *observations).observed(watched=watched)))["StorageReady"]

    assert ready(watched=False) == ("True", "PVCsBound")  # standalone: nobody to ask, taken to be there
    assert ready() == ("False", "PVCsPending")  # not reported yet: waited on, not failed
    assert ready(claim_seen("shared", None)) == ("False", "PVCFailed")  # reported missing
    assert ready(claim_seen("shared", "Pending")) == ("False", "PVCsPending")
    assert ready(claim_seen("shared", "Pending"), claim_seen("shared", "Bound")) == ("True", "PVCsBound")
    assert ready(claim_seen("shared", "Bound"), claim_seen("shared", "Lost")) == ("False", "PVCFailed")
    # a managed claim's report is not a pre-existing one's, nor does a report of a pre-existing one mark a managed one gone
    managed = folded(volumes, claim_seen("shared", None))
    assert managed.gone == set() and managed.pvc_phases == {}


def test_a_claim_name_taken_by_another_object_is_an_invalid_plan_that_says_what_to_do() -> None:
    result = conflicted(2, "PersistentVolumeClaim", "qwen-cache", "default", "not owned by anything")
    assert isinstance(result, StorageInvalid) and result.generation == 2
    assert conditions(result) == {"StorageReady": ("False", "PVCFailed")} and result.status.phase == "Failed"
    assert result.problems == (
        'PersistentVolumeClaim "qwen-cache" already exists in namespace "default" and is not managed by Jetway for this '
        "ModelDeployment (not owned by anything): delete or rename that claim, or mount it as a pre-existing claim "
        '(claimName "qwen-cache", no size)',
    )
    job = conflicted(2, "Job", "qwen-model-download", "default", "owned by ModelDeployment/other (uid u)")
    assert conditions(job) == {"ModelDownloaded": ("False", "DownloadFailed")}


def test_a_deleted_deployment_is_kept_until_its_storage_is_withdrawn_and_a_re_apply_keeps_what_the_cluster_reported() -> None:
    # the storage service's own decisions and the watcher's reports, as the stream holds them
    state = StorageState()
    volumes = [{"name": "cache", "purpose": "modelCache", "size": "5Gi"}]
    doc = changed(MD, {VOL: volumes})

    def fold(facet: str, event: Any, producer: str = "watcher") -> None:
        state.fold(Envelope(id="1", subject=KEY.subject(facet), producer=producer, time=datetime.now(UTC), event=event))

    def applied(generation: int) -> ResourceApplied:
        return ResourceApplied(kind=KEY.kind, namespace=KEY.namespace, name=KEY.name, generation=generation, spec=doc["spec"], uid="uid-1")

    fold(SPEC, applied(1))
    decision = planned(volumes)
    assert isinstance(decision, StoragePlanned) and decision.objects
    fold(STORAGE, decision, "storage")
    fold(OBSERVED, ObjectObserved(api_version="v1", object_kind="PersistentVolumeClaim", object_name="qwen-cache", exists=False))
    fold(SPEC, applied(2))  # re-applied: the claim deleted by hand is still to be written again
    assert state.deployments[KEY].gone == {"qwen-cache"} and state.deployments[KEY].generation == 2
    fold(SPEC, ResourceDeleted(kind=KEY.kind, namespace=KEY.namespace, name=KEY.name))
    kept = state.deployments[KEY]  # its PVCs and Job stand: kept until they are withdrawn
    assert kept.applied is None and kept.last == decision
    fold(STORAGE, Withdrawn(generation=2), "storage")
    assert KEY not in state.deployments
