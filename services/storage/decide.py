"""The storage plan of a ModelDeployment, pure.

- a PVC for each sized volume (`<deployment>-<volume>` unless named; access mode default
  ReadWriteMany; the storage class passed through, `""` kept: no dynamic provisioning);
- a pod volume and a container mount for every volume (default mount paths by purpose);
- a model-download Job when a Hugging Face model goes into a writable model cache, with
  `HF_HOME` at the cache's mount path;
- conditions `StorageReady` and `ModelDownloaded`, from what the cluster reports when one is
  attached (`Observed`), pending otherwise: AI Runway's storage rules (controller/pkg/storage), a
  managed claim waiting for its first consumer counting as ready, a pre-existing one only once
  Bound, a Lost or missing one failing, a Job failing by its Failed condition or its retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.events import StatusCondition, StatusSlice
from contracts.modeldeployment import DEFAULT_MOUNT_PATHS, ModelDeployment
from contracts.objects import JOB_TYPE, MODEL_DEPLOYMENT, managed_labels, metadata
from contracts.pipeline import StorageInvalid, StoragePlanned
from contracts.rules import modeldeployment as md_rules
from contracts.subjects import Key

DOWNLOADER_IMAGE = "ghcr.io/ai-runway/airunway/model-downloader:latest"
DOWNLOAD_BACKOFF_LIMIT = 6


@dataclass(frozen=True)
class Observed:
    """What the cluster says about the planned objects (empty when no cluster is attached)."""

    pvc_phases: dict[str, str] = field(default_factory=dict)  # claim → Pending | Bound | Lost
    job: str = ""  # "" | Running | Complete | Failed
    job_message: str = ""  # why a Failed Job failed, as `job_outcome` words it
    # the pre-existing claims the volumes name → phase (Pending | Bound | Lost, or Unknown while the
    # watcher has not reported it yet: waited on, not failed); a claim missing from it does not exist;
    # None when nobody watches them (standalone): they are taken to be there
    preexisting: dict[str, str] | None = None


def job_outcome(name: str, summary: dict[str, Any], backoff_limit: int = DOWNLOAD_BACKOFF_LIMIT) -> tuple[str, str]:
    """(Running | Complete | Failed, why it failed) of the download Job, as AI Runway reads one: its
    Complete/Failed conditions first, then its counters (a success, or as many failures as retries)."""
    for condition in summary.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Complete", ""
        if condition.get("type") == "Failed":
            return "Failed", f"model download Job {name} failed permanently: {condition.get('message', '')}"
    if summary.get("succeeded", 0) >= 1:
        return "Complete", ""
    failures = summary.get("failed", 0)
    if failures >= backoff_limit:
        return "Failed", f"model download Job {name} failed permanently (failed={failures}, backoffLimit={backoff_limit})"
    return "Running", ""


def _labels(key: Key) -> dict[str, str]:
    return {**managed_labels(), MODEL_DEPLOYMENT: key.name}


def pvc(key: Key, uid: str, claim: str, size: str, access_mode: str, storage_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class  # "" disables dynamic provisioning; absent means the cluster default
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata(claim, key, uid, _labels(key)), "spec": spec}


def download_job(md: ModelDeployment, key: Key, uid: str, claim: str, mount_path: str) -> dict[str, Any]:
    name = f"{key.name}{md_rules.DOWNLOAD_JOB_SUFFIX}"
    container: dict[str, Any] = {
        "name": "model-download",
        "image": DOWNLOADER_IMAGE,
        "args": ["download", md.spec.model.id or ""],
        "env": [{"name": "HF_HOME", "value": mount_path}],
        "volumeMounts": [{"name": "model-cache", "mountPath": mount_path}],
        "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "16Gi"}},
    }
    secret = md.spec.secrets.huggingFaceToken if md.spec.secrets else None
    if secret:
        container["env"].append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "HF_TOKEN"}}})
    labels = {**_labels(key), JOB_TYPE: "model-download"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(name, key, uid, labels),
        "spec": {
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "completions": 1,
            "parallelism": 1,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }


def plan(md: ModelDeployment, key: Key, generation: int, uid: str, observed: Observed | None = None) -> StoragePlanned | StorageInvalid:
    observed = observed or Observed()
    problems = [str(p) for p in md_rules.check_storage(md, [])]
    if problems:
        message = "; ".join(problems)
        return StorageInvalid(
            generation=generation,
            problems=tuple(problems),
            status=StatusSlice(
                conditions=(StatusCondition.of("StorageReady", False, "PVCFailed", message, generation),),
                phase="Failed",
                message=f"Storage invalid: {message}",
            ),
        )
    objects: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    created: list[str] = []
    model_cache = ""
    for volume in md_rules.volumes_of(md):
        claim = md_rules.resolved_claim_name(key.name, volume)
        mount_path = volume.mountPath or DEFAULT_MOUNT_PATHS.get(volume.purpose, "")
        if volume.size is not None:
            objects.append(pvc(key, uid, claim, volume.size, volume.accessMode or "ReadWriteMany", volume.storageClassName))
            created.append(claim)
        source: dict[str, Any] = {"claimName": claim}
        mount: dict[str, Any] = {"name": volume.name, "mountPath": mount_path}
        if volume.readOnly:
            source["readOnly"] = True
            mount["readOnly"] = True
        volumes.append({"name": volume.name, "persistentVolumeClaim": source})
        mounts.append(mount)
        if volume.purpose == "modelCache":
            model_cache = mount_path
    cache = md_rules.managed_model_cache(md)
    job_name = ""
    if cache is not None and md.spec.model.id:
        job = download_job(md, key, uid, md_rules.resolved_claim_name(key.name, cache), model_cache)
        objects.append(job)
        job_name = job["metadata"]["name"]
    conditions: list[StatusCondition] = [_storage_ready(md, key, created, len(volumes), observed, generation)]
    if job_name:
        conditions.append(_downloaded(job_name, md.spec.model.id or "", model_cache, observed, generation))
    phase = "Failed" if any(c.reason in ("PVCFailed", "DownloadFailed") for c in conditions) else None
    return StoragePlanned(
        generation=generation,
        objects=tuple(objects),
        volumes=tuple(volumes),
        mounts=tuple(mounts),
        model_cache=model_cache,
        download_job=job_name,
        status=StatusSlice(
            conditions=tuple(conditions),
            phase=phase,
            message=next((c.message for c in conditions if c.reason in ("PVCFailed", "DownloadFailed")), None),
        ),
    )


def conflicted(generation: int, kind: str, name: str, namespace: str, held: str) -> StorageInvalid:
    """An object the plan names exists in the cluster and is not this deployment's (Jetway writes nothing over
    it, and none of the plan): the deployment fails and says what to do, until the name is free."""
    where = f'{kind} "{name}" already exists in namespace "{namespace}" and is not managed by Jetway for this ModelDeployment ({held})'
    if kind == "PersistentVolumeClaim":
        fix = f'delete or rename that claim, or mount it as a pre-existing claim (claimName "{name}", no size)'
    else:
        fix = "delete or rename it so that Jetway can create its own"
    message = f"{where}: {fix}"
    failed = ("ModelDownloaded", "DownloadFailed") if kind == "Job" else ("StorageReady", "PVCFailed")
    return StorageInvalid(
        generation=generation,
        problems=(message,),
        status=StatusSlice(
            conditions=(StatusCondition.of(failed[0], False, failed[1], message, generation),),
            phase="Failed",
            message=f"Storage conflict: {message}",
        ),
    )


def _preexisting_problem(md: ModelDeployment, key: Key, observed: Observed) -> tuple[str, str] | None:
    """(reason, message) for the first pre-existing claim that is not usable yet, as AI Runway says it."""
    if observed.preexisting is None:
        return None
    for volume in md_rules.volumes_of(md):
        if volume.size is not None:
            continue
        claim = md_rules.resolved_claim_name(key.name, volume)
        phase = observed.preexisting.get(claim)
        if phase is None:
            return "PVCFailed", (
                f'pre-existing PVC "{claim}" not found in namespace "{key.namespace}" (referenced by volume "{volume.name}"); '
                "ensure the PVC exists before creating the ModelDeployment"
            )
        if phase == "Lost":
            return "PVCFailed", f'pre-existing PVC "{claim}" is in Lost phase'
        if phase != "Bound":
            return "PVCsPending", f'waiting for pre-existing PVC "{claim}" to be bound'
    return None


def _storage_ready(md: ModelDeployment, key: Key, created: list[str], volumes: int, observed: Observed, generation: int) -> StatusCondition:
    lost = [c for c in created if observed.pvc_phases.get(c) == "Lost"]
    if lost:
        return StatusCondition.of("StorageReady", False, "PVCFailed", f"PVC {', '.join(lost)} is in Lost phase", generation)
    unusable = _preexisting_problem(md, key, observed)
    if unusable is not None and unusable[0] == "PVCFailed":
        return StatusCondition.of("StorageReady", False, unusable[0], unusable[1], generation)
    waiting = [c for c in created if observed.pvc_phases.get(c) not in ("Bound", "Pending")]
    if waiting:
        return StatusCondition.of("StorageReady", False, "PVCsPending", f"waiting for PVC {', '.join(waiting)} to be created", generation)
    if unusable is not None:
        return StatusCondition.of("StorageReady", False, unusable[0], unusable[1], generation)
    if not created:
        message = f"{volumes} volume(s) mount pre-existing claims" if volumes else "no storage volumes"
        return StatusCondition.of("StorageReady", True, "PVCsBound", message, generation)
    # A Pending PVC binds when its first consumer is scheduled (WaitForFirstConsumer): it counts as ready.
    return StatusCondition.of("StorageReady", True, "PVCsBound", f"PVC {', '.join(created)} ready", generation)


def _downloaded(job: str, model: str, path: str, observed: Observed, generation: int) -> StatusCondition:
    if observed.job == "Complete":
        return StatusCondition.of("ModelDownloaded", True, "DownloadComplete", f"{model} downloaded into {path}", generation)
    if observed.job == "Failed":
        message = observed.job_message or f"model download Job {job} failed permanently"
        return StatusCondition.of("ModelDownloaded", False, "DownloadFailed", message, generation)
    return StatusCondition.of("ModelDownloaded", False, "DownloadInProgress", f"Job {job} downloads {model} into {path}", generation)
