"""From what the cluster reports about a provider's primary object to the deployment's status, pure.

Deployments (vllm, llmd): Available → Running; Progressing=False/ProgressDeadlineExceeded →
Failed; otherwise Deploying. DynamoGraphDeployment: `status.state`. Workspace (KAITO): its
conditions. RayService: `RayServiceReady` and the application statuses.
"""

from __future__ import annotations

from typing import Any

from contracts.cluster import ObjectObserved, WorkloadObserved
from contracts.events import StatusCondition, StatusSlice
from contracts.pipeline import WorkloadRendered


def _condition(summary: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in summary.get("conditions", []) if c.get("type") == type_), {})


def _phase(kind: str, summary: dict[str, Any]) -> tuple[str, str]:
    if kind == "Deployment":
        progressing = _condition(summary, "Progressing")
        if progressing.get("status") == "False" and progressing.get("reason") == "ProgressDeadlineExceeded":
            return "Failed", progressing.get("message") or "deployment timed out waiting for rollout"
        if _condition(summary, "Available").get("status") == "True" and summary["readyReplicas"] >= min(summary["replicas"], 1):
            return "Running", "Deployments created, pods are ready"
        return "Deploying", "Deployments created, waiting for pods to be ready"
    if kind == "DynamoGraphDeployment":
        state = (summary.get("state") or "").lower()
        mapped = {"successful": "Running", "initializing": "Deploying", "deploying": "Deploying", "failed": "Failed"}.get(state, "Pending")
        return mapped, summary.get("message") or f"DynamoGraphDeployment state {state or 'unknown'}"
    if kind == "Workspace":
        succeeded = _condition(summary, "WorkspaceSucceeded")
        if succeeded.get("status") == "True":
            return "Running", "Workspace ready"
        if succeeded.get("status") == "False":
            return "Failed", succeeded.get("message") or "Workspace failed"
        if _condition(summary, "ResourceReady").get("status") == "True":
            return "Deploying", "Workspace created, waiting for inference to be ready"
        return "Pending", "Workspace created, waiting for resources"
    if kind == "RayService":
        failed = [n for n, s in summary.get("applications", {}).items() if s == "DEPLOY_FAILED"]
        if failed:
            return "Failed", f"Ray Serve application {failed[0]} failed to deploy"
        if _condition(summary, "RayServiceReady").get("status") == "True":
            return "Running", "RayService ready"
        return "Deploying", _condition(summary, "RayServiceReady").get("message") or "RayService deploying"
    return "Deploying", "waiting for the workload"


def observed_status(
    rendered: WorkloadRendered, observed: dict[tuple[str, str], ObjectObserved], generation: int
) -> WorkloadObserved | None:
    """The workload's status from the cluster's report on its primary object (None before any report)."""
    primary = rendered.objects[0]
    kind, name = primary["kind"], primary["metadata"]["name"]
    report = observed.get((kind, name))
    if report is None:
        return None
    fields = dict(rendered.status.fields)
    kept = [c for c in rendered.status.conditions if c.type != "Ready"]  # ResourceCreated and the render's own (image, compatibility)
    if not report.exists:
        phase, message, ready, reason = "Deploying", f"{kind} {name} is being re-created", False, "DeploymentInProgress"
    else:
        phase, message = _phase(kind, report.summary)
        ready = phase == "Running"
        reason = "DeploymentReady" if ready else "DeploymentFailed" if phase == "Failed" else "DeploymentInProgress"
        if kind == "Deployment":  # desired is what Jetway asked for; the report may predate the write
            desired = fields.get("replicas", {}).get("desired", report.summary["replicas"])
            fields["replicas"] = {
                "desired": desired,
                "ready": report.summary["readyReplicas"],
                "available": report.summary["availableReplicas"],
            }
        elif ready:
            desired = fields.get("replicas", {}).get("desired", 1)
            fields["replicas"] = {"desired": desired, "ready": desired, "available": desired}
    ready_condition = StatusCondition(
        type="Ready", status="True" if ready else "False", reason=reason, message=message, observedGeneration=generation
    )
    return WorkloadObserved(
        generation=generation,
        provider=rendered.provider,
        status=StatusSlice(conditions=(*kept, ready_condition), phase=phase, message=message, fields=fields),
    )
