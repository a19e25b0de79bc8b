"""What the workload service renders for autoscaling (services/workload/decide.py `scaled`): the scaler's count in
each provider's object where the provider can take it, the spec's where it cannot, and, for a deployment without
autoscaling, exactly what it rendered before (the reviewed golden files, and every example manifest, byte for byte,
whatever the scaler recorded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.manifests import load_documents
from contracts.admission import admit
from contracts.events import Decision
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import ProviderSelected, StoragePlanned, WorkloadRendered
from contracts.providerconfig import InferenceProviderConfigSpec
from contracts.scaling import ScaleDecided
from contracts.subjects import Key
from services.selector import decide as selection
from services.selector.decide import Provider
from services.storage.decide import plan
from services.workload import decide as workload
from services.workload.projection import Deployment
from services.workload.providers import BUILTIN, builtin_configs
from tests.contracts.cases import MD, changed
from tests.services.test_render import CASES, GOLDEN

ROOT = Path(__file__).resolve().parents[2]
UID = "0d1f3a52-5b2e-4f2b-9f6c-8d7d0c1e2f3a"
STRAY = ScaleDecided(generation=1, replicas=5, previous=1, reason="a decision the spec does not ask for", applied=True)


def through_workload(
    md: ModelDeployment,
    provider: str,
    engine: str,
    *,
    gateway: bool = False,
    scale: Decision | None = None,
    chosen: ProviderSelected | None = None,
) -> WorkloadRendered:
    """The workload service's decision for a deployment selected onto `provider` (or as `chosen`), the scaler's last
    decision `scale`."""
    key = Key("ModelDeployment", md.metadata.namespace or "default", md.metadata.name)
    storage = plan(md, key, 1, UID)
    assert isinstance(storage, StoragePlanned)
    chosen = chosen or ProviderSelected(generation=1, engine=engine, provider=provider)
    deployment = Deployment(key, md, 1, UID, selection=chosen, storage=storage, scale=scale)
    steps = workload.decide(deployment, BUILTIN, gateway_available=gateway)
    (rendered,) = [s.record for s in steps if isinstance(s.record, WorkloadRendered)]
    return rendered


def admitted(doc: dict[str, Any]) -> ModelDeployment:
    verdict = admit(doc)
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return verdict.obj


@pytest.mark.parametrize("case", list(CASES))
def test_without_autoscaling_a_decision_changes_nothing_of_the_reviewed_render(case: str) -> None:
    provider, changes, engine, gateway = CASES[case]
    rendered = through_workload(admitted(changed(MD, changes)), provider, engine, gateway=gateway, scale=STRAY)
    assert yaml.safe_dump_all(list(rendered.objects), sort_keys=False) == (GOLDEN / f"{case}.yaml").read_text()


def _examples() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((ROOT / "examples").glob("*.yaml")) + sorted((ROOT / "tests/contracts/spec_examples").glob("*.yaml"))
    return [(f"{p.name}#{d.index}", d.body) for p in files for d in load_documents(str(p)) if d.body.get("kind") == "ModelDeployment"]


@pytest.mark.parametrize(("where", "doc"), _examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_example_renders_byte_for_byte_as_without_the_scaler(where: str, doc: dict[str, Any]) -> None:
    md = admitted(doc)
    providers = [Provider(c["metadata"]["name"], InferenceProviderConfigSpec.model_validate(c["spec"]), True) for c in builtin_configs()]
    chosen = selection.select(md, 1, None, providers).decision  # as the selector chooses
    assert isinstance(chosen, ProviderSelected), chosen
    plain = through_workload(md, chosen.provider, chosen.engine, chosen=chosen)
    scaled = through_workload(md, chosen.provider, chosen.engine, scale=STRAY, chosen=chosen)
    assert json.dumps(list(scaled.objects), sort_keys=True) == json.dumps(list(plain.objects), sort_keys=True)
    assert scaled.status == plain.status


AUTOSCALED = {"spec.scaling": {"replicas": 2, "autoscaling": {"minReplicas": 1, "maxReplicas": 8}}}


def _replicas_of(provider: str, objects: tuple[dict[str, Any], ...]) -> int:
    """Where each provider's object holds the count: the Deployment's, the DGD's worker's, the Workspace's nodes, the
    RayService's GPU workers."""
    primary = objects[0]
    if provider in ("vllm", "llmd"):
        return int(primary["spec"]["replicas"])
    if provider == "dynamo":
        return int(primary["spec"]["services"]["VllmWorker"]["replicas"])
    if provider == "kaito":
        return int(primary["resource"]["count"])
    (workers,) = primary["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return int(workers["replicas"])


@pytest.mark.parametrize(
    ("case", "expected"),
    [("vllm-minimal", 5), ("llmd-aggregated", 5), ("dynamo-aggregated", 5), ("kaito-vllm", 2), ("kuberay", 2)],
)
def test_the_decided_count_reaches_each_provider_that_can_take_it(case: str, expected: int) -> None:
    """KAITO refuses a changed count and KubeRay does not carry it to its RayCluster: they keep the spec's (an
    auto-selected provider; naming either with autoscaling is refused at admission)."""
    provider, changes, engine, gateway = CASES[case]
    md = admitted(changed(MD, {**changes, **AUTOSCALED}))
    rendered = through_workload(md, provider, engine, gateway=gateway, scale=STRAY)
    assert _replicas_of(provider, rendered.objects) == expected
    assert rendered.status.fields["replicas"]["desired"] == expected


def test_before_any_decision_and_for_a_recommendation_the_starting_count_within_the_range() -> None:
    md = admitted(changed(MD, {"spec.scaling": {"replicas": 9, "autoscaling": {"minReplicas": 2, "maxReplicas": 3}}}))
    assert _replicas_of("vllm", through_workload(md, "vllm", "vllm").objects) == 3
    recommended = ScaleDecided(generation=1, replicas=1, previous=3, reason="standalone", applied=False)
    assert _replicas_of("vllm", through_workload(md, "vllm", "vllm", scale=recommended).objects) == 3


def test_a_decision_of_an_earlier_generation_holds_within_the_new_range_and_zero_only_where_it_can_be() -> None:
    earlier = ScaleDecided(generation=1, replicas=6, previous=2, reason="busy", applied=True)
    narrower = admitted(changed(MD, {"spec.scaling": {"replicas": 1, "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}}))
    assert _replicas_of("vllm", through_workload(narrower, "vllm", "vllm", scale=earlier).objects) == 4  # no reset to 1
    zero = ScaleDecided(generation=1, replicas=0, previous=1, reason="idle", applied=True)
    to_zero = admitted(changed(MD, {"spec.scaling": {"autoscaling": {"minReplicas": 0, "maxReplicas": 4}}}))
    assert _replicas_of("vllm", through_workload(to_zero, "vllm", "vllm", scale=zero).objects) == 0
    assert _replicas_of("dynamo", through_workload(to_zero, "dynamo", "vllm", scale=zero).objects) == 1  # its frontend needs a worker
