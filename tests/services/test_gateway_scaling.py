"""The gateway's side of autoscaling, pure (services/gateway/decide.py): a deployment the scaler took to zero keeps
its member of Jetway's router (and its Gateway objects), labelled so the router holds its requests while a replica
starts; a deployment that is simply not running yet gets none, as before."""

from __future__ import annotations

import dataclasses
from typing import Any

from contracts.admission import admit
from contracts.gatewayapi import GatewayView
from contracts.modeldeployment import ModelDeployment
from contracts.scaling import SCALE_FROM_ZERO, ScaleDecided
from contracts.subjects import Key
from services.gateway import decide
from tests.contracts.cases import MD, changed

TO_ZERO = {"spec.scaling": {"replicas": 1, "autoscaling": {"minReplicas": 0, "maxReplicas": 4}}}
FROM_ONE = {"spec.scaling": {"replicas": 1, "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}}
IDLE = ScaleDecided(generation=1, replicas=0, previous=1, reason="idle", applied=True)


def md(**changes: Any) -> ModelDeployment:
    verdict = admit(changed(MD, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    return verdict.obj


def inputs(deployment: ModelDeployment, scale: ScaleDecided | None, *, running: bool, apis: bool = False) -> decide.Inputs:
    at_zero, from_zero = decide.scale_state(deployment, scale)
    return decide.Inputs(
        Key("ModelDeployment", "default", "qwen"),
        "u",
        1,
        deployment,
        running,
        {"service": "qwen", "port": 8000},
        "10.0.0.9",
        None,
        apis,
        scaled_to_zero=at_zero,
        from_zero=from_zero,
    )


def test_at_zero_the_router_member_stands_and_says_the_router_may_hold_for_it() -> None:
    deployment = md(**TO_ZERO)
    member = decide.member(inputs(deployment, IDLE, running=False))
    assert member is not None, "at zero the router keeps a member to hold requests for"
    assert member["metadata"]["labels"][SCALE_FROM_ZERO] == "true"
    assert member["spec"]["url"] == "http://10.0.0.9:8000"  # the model's Service, which outlives its pods
    plan = decide.plan(inputs(deployment, IDLE, running=False))
    assert plan is not None and plan.member == member


def test_running_with_a_range_from_zero_is_labelled_too() -> None:
    running = decide.member(inputs(md(**TO_ZERO), ScaleDecided(generation=1, replicas=2, previous=1, applied=True), running=True))
    assert running is not None and running["metadata"]["labels"][SCALE_FROM_ZERO] == "true"


def test_no_label_without_zero_in_the_range_and_no_member_before_it_runs() -> None:
    deployment = md(**FROM_ONE)
    member = decide.member(inputs(deployment, None, running=True))
    assert member is not None and SCALE_FROM_ZERO not in member["metadata"]["labels"]
    assert decide.member(inputs(deployment, None, running=False)) is None, "not at zero: not running yet"
    assert decide.member(inputs(md(), None, running=False)) is None  # no autoscaling: as before
    plain = decide.member(inputs(md(), None, running=True))
    assert plain is not None and SCALE_FROM_ZERO not in plain["metadata"]["labels"]


def test_a_recommendation_of_zero_is_not_zero() -> None:
    recommended = ScaleDecided(generation=1, replicas=0, previous=1, reason="idle", applied=False)
    assert decide.scale_state(md(**TO_ZERO), recommended) == (False, True)
    assert decide.scale_state(md(**TO_ZERO), IDLE) == (True, True)
    assert decide.scale_state(md(), IDLE) == (False, False)


def test_with_the_gateway_api_a_deployment_at_zero_keeps_its_pool_and_route() -> None:
    gateway = GatewayView("default", "gw", 1, {}, ({"name": "http", "port": 80, "protocol": "HTTP"},), ("203.0.113.1",), {})
    at_zero = inputs(md(**TO_ZERO), IDLE, running=False, apis=True)
    plan = decide.plan(dataclasses.replace(at_zero, gateways=[gateway]))
    assert plan is not None and {o["kind"] for o in plan.objects()} >= {"InferencePool", "HTTPRoute", "InferencePoolMember"}
