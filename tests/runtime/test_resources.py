"""Status composed from each owner's latest decision (pure, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.events import (
    Envelope,
    Event,
    ResourceApplied,
    ResourceDeleted,
    StatusCondition,
    StatusReported,
    StatusSlice,
    Withdrawn,
)
from contracts.subjects import Key
from runtime.resources import Resources

MD = Key("ModelDeployment", "default", "qwen")
seq = 0


def env(key: Key, event: Event, facet: str = "spec") -> Envelope:
    global seq
    seq += 1
    return Envelope(id=str(seq), subject=key.subject(facet), producer=facet, time=datetime.now(UTC), event=event, seq=seq)


def applied(generation: int) -> ResourceApplied:
    return ResourceApplied(kind=MD.kind, namespace=MD.namespace, name=MD.name, generation=generation, spec={"g": generation})


def cond(type_: str, status: str, reason: str) -> StatusCondition:
    return StatusCondition(type=type_, status=status, reason=reason, lastTransitionTime="t")


def test_each_owner_writes_its_slice_and_the_phase_follows_precedence() -> None:
    world = Resources().fold_all(
        [
            env(MD, applied(1)),
            env(
                MD,
                StatusReported(
                    generation=1,
                    status=StatusSlice(
                        conditions=(cond("ProviderSelected", "True", "ExplicitSelection"),), fields={"provider": {"name": "vllm"}}
                    ),
                ),
                "selector",
            ),
            env(
                MD,
                StatusReported(
                    generation=1,
                    status=StatusSlice(
                        conditions=(cond("Ready", "False", "DeploymentInProgress"),), phase="Deploying", fields={"replicas": {"desired": 1}}
                    ),
                ),
                "workload",
            ),
        ]
    )
    status = world.items[MD].status()
    assert status["phase"] == "Deploying"
    assert status["provider"] == {"name": "vllm"} and status["replicas"] == {"desired": 1}
    assert {c["type"] for c in status["conditions"]} == {"ProviderSelected", "Ready"}
    assert status["observedGeneration"] == 1


def test_failed_from_any_owner_wins_and_observed_generation_is_the_slowest_owner() -> None:
    world = Resources().fold_all(
        [
            env(MD, applied(1)),
            env(MD, applied(2)),
            env(MD, StatusReported(generation=2, status=StatusSlice(phase="Failed", message="no provider")), "selector"),
            env(MD, StatusReported(generation=1, status=StatusSlice(phase="Running")), "workload"),
        ]
    )
    state = world.items[MD]
    assert state.phase() == ("Failed", "no provider")
    assert state.status()["observedGeneration"] == 1
    assert state.manifest()["metadata"]["generation"] == 2


def test_withdrawn_clears_a_slice_and_delete_forgets_the_resource() -> None:
    world = Resources().fold_all(
        [
            env(MD, applied(1)),
            env(MD, StatusReported(generation=1, status=StatusSlice(phase="Running")), "workload"),
            env(MD, Withdrawn(generation=1), "workload"),
        ]
    )
    assert world.items[MD].phase() == ("Pending", None)
    world.fold(env(MD, ResourceDeleted(kind=MD.kind, namespace=MD.namespace, name=MD.name)))
    assert MD not in world.items
    world.fold(env(MD, StatusReported(generation=1), "workload"))  # a late decision about a deleted resource
    assert MD not in world.items


def test_resource_version_is_the_last_spec_sequence_only() -> None:
    world = Resources().fold_all([env(MD, applied(1))])
    version = world.items[MD].resource_version
    world.fold(env(MD, StatusReported(generation=1, status=StatusSlice(phase="Running")), "workload"))
    assert world.items[MD].resource_version == version
    assert world.items[MD].manifest()["metadata"]["resourceVersion"] == str(version)


def test_telemetry_is_off_by_default_and_on_with_the_standard_variables() -> None:
    import subprocess
    import sys

    probe = "from runtime import telemetry; print(telemetry.setup('probe'))"
    off = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={"PATH": ""}, check=True)
    on = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"},
    )
    disabled = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"},
    )
    assert (off.stdout.strip(), on.stdout.strip(), disabled.stdout.strip()) == ("False", "True", "False")
