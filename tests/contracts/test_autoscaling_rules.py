"""`spec.scaling.autoscaling` at admission: every rule with its field path and words, what a manifest without it
keeps, the CRD refusing what admission refuses, and `jetway validate` saying so (docs/autoscaling.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from contracts import scaling
from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from testbed.crdschema import validate_resource
from tests.contracts.cases import DELETE, MD, changed
from tests.support.cli import ROOT, run_jetway

AS = "spec.scaling.autoscaling"


def autoscaled(autoscaling: dict[str, Any] | None = None, /, **changes: Any) -> dict[str, Any]:
    return changed(MD, {AS: {"maxReplicas": 4, **(autoscaling or {})}, **changes})


DISAGGREGATED: dict[str, Any] = {
    "spec.serving": {"mode": "disaggregated"},
    "spec.resources": DELETE,
    "spec.scaling.prefill": {"gpu": {"count": 1}},
    "spec.scaling.decode": {"gpu": {"count": 1}},
}

REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("maximum required", changed(MD, {AS: {}}), f"{AS}.maxReplicas", "required"),
    ("min above max", autoscaled({"minReplicas": 5}), f"{AS}.minReplicas", "must be at most maxReplicas (got minReplicas 5 > maxReplicas"),
    ("min bounded", autoscaled({"minReplicas": -1}), f"{AS}.minReplicas", "must be at least 0 (got -1)"),
    ("max at least one", autoscaled({"maxReplicas": 0}), f"{AS}.maxReplicas", "must be at least 1 (got 0)"),
    ("max bounded", autoscaled({"maxReplicas": 33}), f"{AS}.maxReplicas", "must be at most 32 (got 33)"),
    (
        "signal enum",
        autoscaled({"signal": "gpuUtilization"}),
        f"{AS}.signal",
        'Unsupported value: "gpuUtilization": supported values: "waitingPerReplica", "inFlightPerReplica", "kvCacheUsage"',
    ),
    ("target positive", autoscaled({"target": 0}), f"{AS}.target", "must be greater than 0 (got 0)"),
    ("target a number", autoscaled({"target": "4"}), f"{AS}.target", 'must be a number (got a string: "4")'),
    (
        "kv target a fraction",
        autoscaled({"signal": "kvCacheUsage", "target": 80}),
        f"{AS}.target",
        "must be at most 1 for kvCacheUsage, the fraction of the KV cache in use (got 80)",
    ),
    ("delay bounded", autoscaled({"scaleDownDelaySeconds": 86401}), f"{AS}.scaleDownDelaySeconds", "must be at most 86400 (got 86401)"),
    ("unknown field", autoscaled({"cooldown": 5}), f"{AS}.cooldown", "unknown field"),
    (
        "disaggregated",
        autoscaled(**DISAGGREGATED),
        AS,
        "is not supported in disaggregated mode: prefill and decode are sized by scaling.prefill.replicas and scaling.decode.replicas",
    ),
    (
        "kaito",
        autoscaled(**{"spec.provider": {"name": "kaito"}}),
        AS,
        "provider kaito cannot autoscale: KAITO refuses any change of a Workspace's resource.count once it exists",
    ),
    (
        "kuberay",
        autoscaled(**{"spec.provider": {"name": "kuberay"}}),
        AS,
        "provider kuberay cannot autoscale: KubeRay does not carry a RayService's changed worker replicas to its running "
        "RayCluster (Ray's own autoscaler sizes it)",
    ),
    (
        "dynamo to zero",
        autoscaled({"minReplicas": 0}, **{"spec.provider": {"name": "dynamo"}}),
        f"{AS}.minReplicas",
        "must be at least 1 on provider dynamo, which cannot scale to zero: with no worker Dynamo's frontend drops the model",
    ),
]


@pytest.mark.parametrize(("case", "doc", "path", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_at_the_field_with_the_rule(case: str, doc: dict[str, Any], path: str, words: str) -> None:
    verdict = admit(doc)
    found = [(p.path, p.message) for p in verdict.problems]
    assert any(p == path and m.startswith(words) for p, m in found), found


ADMITTED: list[tuple[str, dict[str, Any]]] = [
    ("a range", autoscaled({"minReplicas": 2, "maxReplicas": 8})),
    ("min equals max", autoscaled({"minReplicas": 3, "maxReplicas": 3})),
    ("to zero on vllm", autoscaled({"minReplicas": 0}, **{"spec.provider": {"name": "vllm"}})),
    ("to zero on llmd", autoscaled({"minReplicas": 0}, **{"spec.provider": {"name": "llmd"}})),
    ("to zero, provider chosen later", autoscaled({"minReplicas": 0})),
    ("dynamo from one", autoscaled({"minReplicas": 1}, **{"spec.provider": {"name": "dynamo"}})),
    ("kv fraction", autoscaled({"signal": "kvCacheUsage", "target": 0.75})),
    ("in flight, integer target", autoscaled({"signal": "inFlightPerReplica", "target": 16})),
    ("no delay", autoscaled({"scaleDownDelaySeconds": 0})),
]


@pytest.mark.parametrize(("case", "doc"), ADMITTED, ids=[c[0] for c in ADMITTED])
def test_admitted(case: str, doc: dict[str, Any]) -> None:
    verdict = admit(doc)
    assert verdict.ok, verdict.problems


def test_defaults_fill_what_was_left_out_but_never_the_target() -> None:
    verdict = admit(autoscaled())
    assert isinstance(verdict.obj, ModelDeployment)
    assert verdict.obj.wire()["spec"]["scaling"]["autoscaling"] == {
        "minReplicas": 1,
        "maxReplicas": 4,
        "signal": "waitingPerReplica",
        "scaleDownDelaySeconds": 300,
    }  # a stored default target would outlive a later change of the signal, and could then break its bound
    autoscaling = verdict.obj.spec.scaling.autoscaling  # type: ignore[union-attr]
    assert autoscaling is not None and scaling.target_of(autoscaling) == 4
    assert scaling.target_of(autoscaling.model_copy(update={"signal": "kvCacheUsage"})) == 0.8


def test_a_manifest_without_autoscaling_stores_exactly_what_it_did() -> None:
    verdict = admit(MD)
    assert isinstance(verdict.obj, ModelDeployment)
    assert verdict.obj.wire()["spec"]["scaling"] == {"replicas": 1}
    assert scaling.autoscaling_of(verdict.obj) is None


def test_a_starting_count_outside_the_range_is_clamped_with_a_warning() -> None:
    verdict = admit(autoscaled({"minReplicas": 2, "maxReplicas": 3}, **{"spec.scaling.replicas": 9}))
    assert verdict.ok and verdict.warnings == ["spec.scaling.replicas 9 is outside autoscaling's range 2..3: the deployment starts at 3"]
    assert isinstance(verdict.obj, ModelDeployment)
    autoscaling = scaling.autoscaling_of(verdict.obj)
    assert autoscaling is not None and scaling.starting_replicas(verdict.obj, autoscaling) == 3


def test_a_provider_with_its_own_controller_gets_recommendations_and_is_told() -> None:
    verdict = admit(autoscaled(**{"spec.provider": {"name": "acme"}}))
    assert verdict.ok
    assert verdict.warnings == [
        "provider acme runs this deployment with its own controller: Jetway's scaler only recommends a replica count "
        "for it (events), and changes nothing"
    ]


def _crd() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy/crds/modeldeployments.airunway.ai.yaml").read_text())


CRD_REFUSES = [
    ("min above max", autoscaled({"minReplicas": 5}), "minReplicas must be at most maxReplicas"),
    ("kv target", autoscaled({"signal": "kvCacheUsage", "target": 2}), "target must be at most 1 for kvCacheUsage"),
    ("target zero", autoscaled({"target": 0}), "must be greater than 0"),
    ("disaggregated", autoscaled(**DISAGGREGATED), "scaling.autoscaling is not supported in disaggregated mode"),
    ("kaito", autoscaled(**{"spec.provider": {"name": "kaito"}}), "providers kaito and kuberay cannot autoscale"),
    ("dynamo to zero", autoscaled({"minReplicas": 0}, **{"spec.provider": {"name": "dynamo"}}), "must be at least 1 on dynamo"),
]


@pytest.mark.parametrize(("case", "doc", "words"), CRD_REFUSES, ids=[c[0] for c in CRD_REFUSES])
def test_the_crd_refuses_what_admission_refuses(case: str, doc: dict[str, Any], words: str) -> None:
    """A cluster without Jetway's webhook refuses the same manifests (the CRD's schema and CEL rules)."""
    _, errors = validate_resource(doc, _crd())
    assert any(words in e for e in errors), errors
    assert not admit(doc).ok


def test_the_crd_and_the_editor_schema_accept_an_autoscaled_deployment_and_default_it() -> None:
    doc = autoscaled({"minReplicas": 0, "signal": "kvCacheUsage", "target": 0.7}, **{"spec.provider": {"name": "vllm"}})
    defaulted, errors = validate_resource(doc, _crd())
    assert errors == []
    assert defaulted["spec"]["scaling"]["autoscaling"]["scaleDownDelaySeconds"] == 300  # the API server fills it as admission does
    schema = json.loads((ROOT / "contracts/schemas/modeldeployment.json").read_text())
    jsonschema.Draft7Validator(schema).validate(doc)


def test_validate_names_the_file_the_path_and_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "md.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [
                changed(autoscaled({"minReplicas": 0}, **{"spec.provider": {"name": "kuberay"}}), {"metadata.name": "ray"}),
                changed(autoscaled({"minReplicas": 6}), {"metadata.name": "wide"}),
                changed(autoscaled({"minReplicas": 0}, **{"spec.scaling.replicas": 7}), {"metadata.name": "fine"}),
            ]
        )
    )
    result = run_jetway("validate", "-f", str(path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{path}: ModelDeployment/ray: {AS}: provider kuberay cannot autoscale: KubeRay does not carry a RayService's changed "
        "worker replicas to its running RayCluster (Ray's own autoscaler sizes it)",
        f"{path}: ModelDeployment/wide: {AS}.minReplicas: must be at most maxReplicas (got minReplicas 6 > maxReplicas 4)",
    ]
    assert (
        f"{path}: ModelDeployment/fine: warning: spec.scaling.replicas 7 is outside autoscaling's range 0..4: the deployment starts at 4"
        in result.stderr
    )
