"""What the storage service knows: each deployment, its last plan, and what the cluster reports of its PVCs and Job,
and of the pre-existing claims its volumes name."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.cluster import OBSERVED, ObjectObserved
from contracts.events import Envelope
from contracts.modeldeployment import ModelDeployment
from contracts.rules import modeldeployment as md_rules
from contracts.subjects import STORAGE, Key
from runtime import desired
from runtime.desired import Desired
from services.storage.decide import Observed, job_outcome

SELF = STORAGE


@dataclass
class Deployment(Desired[ModelDeployment]):
    pvc_phases: dict[str, str] = field(default_factory=dict)  # what the cluster reports (Kubernetes mode)
    job: str = ""
    job_message: str = ""  # why the Job failed, in `job_outcome`'s words
    gone: set[str] = field(default_factory=set)  # claims reported deleted (by hand): written again
    claims: dict[str, str | None] = field(default_factory=dict)  # pre-existing claims reported: phase, None missing

    def observed(self, *, watched: bool = False) -> Observed:
        """What the cluster says; `watched`: the watcher reports pre-existing claims (a cluster), so one it
        has not reported yet is waited on, one reported missing fails; else they are taken to be there."""
        preexisting: dict[str, str] | None = None
        if watched and self.applied is not None:
            preexisting = {}
            for volume in md_rules.volumes_of(self.applied):
                claim = md_rules.resolved_claim_name(self.applied.metadata.name, volume)
                phase = self.claims.get(claim, "Unknown")
                if volume.size is None and phase is not None:
                    preexisting[claim] = phase
        return Observed(dict(self.pvc_phases), self.job, self.job_message, preexisting)


@dataclass
class StorageState:
    snapshot_version = 2  # runtime/snapshots.py: bump when what fold() keeps here changes (2: kept until withdrawn)

    deployments: dict[Key, Deployment] = field(default_factory=dict)

    def fold(self, envelope: Envelope) -> None:
        if desired.fold(self.deployments, envelope, SELF, Deployment, ModelDeployment):
            return
        event, deployment = envelope.event, self.deployments.get(envelope.key)
        if deployment is None:
            return
        if envelope.facet == OBSERVED and isinstance(event, ObjectObserved):
            if event.object_kind == "PersistentVolumeClaim" and event.referenced:
                deployment.claims[event.object_name] = str(event.summary.get("phase", "Pending")) if event.exists else None
            elif event.object_kind == "PersistentVolumeClaim":
                if event.exists:
                    deployment.pvc_phases[event.object_name] = str(event.summary.get("phase", "Pending"))
                    deployment.gone.discard(event.object_name)
                else:
                    deployment.pvc_phases.pop(event.object_name, None)
                    deployment.gone.add(event.object_name)
            elif event.object_kind == "Job":
                # one reading of a Job, the decision's: its conditions, then its counters against the backoff limit
                deployment.job, deployment.job_message = job_outcome(event.object_name, event.summary) if event.exists else ("", "")
