"""`spec.provider.overrides`, ported from AI Runway's own tests (ai-runway/airunway b0d3fb7,
controller/internal/webhook/v1alpha1/security_validation_test.go and the providers' applyOverrides
cases): the block-list at any depth, sizing keys refused, identity keys refused, the free-form deep
merge into what each provider renders, and the spec's security sections beside them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from contracts.admission import admit
from services.workload.render import render
from services.workload.render.common import RenderError
from tests.contracts.cases import AD, MD, changed
from tests.services.test_render import inputs

OVERRIDES = "spec.provider.overrides"
SECURITY = "is not allowed for security reasons"
SIZING = "is not allowed because it can bypass admission resource limits; use spec.resources / spec.scaling instead"


def problems(overrides: Any, base: dict[str, Any] = MD) -> list[str]:
    verdict = admit(changed(base, {"spec.provider": {"overrides": overrides}}))
    return [str(p) for p in verdict.problems]


@pytest.mark.parametrize(
    ("upstream", "overrides", "path"),
    [
        ("TestValidateOverrides_BlocksSecurityContext", {"securityContext": {"privileged": True}}, "securityContext"),
        ("TestValidateOverrides_BlocksHostNetwork", {"hostNetwork": True}, "hostNetwork"),
        ("TestValidateOverrides_BlocksServiceAccountName", {"serviceAccountName": "admin"}, "serviceAccountName"),
        ("TestValidateOverrides_BlocksNestedSecurityContext", {"spec": {"securityContext": {"runAsRoot": True}}}, "spec.securityContext"),
        (
            "TestValidateOverrides_BlocksKeysInsideArray",
            {"containers": [{"name": "main", "securityContext": {"privileged": True}}]},
            "containers[0].securityContext",
        ),
        (
            "TestValidateOverrides_BlocksKeysInsideNestedArray",
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "hostNetwork": True}]}}}},
            "spec.template.spec.containers[0].hostNetwork",
        ),
    ],
)
def test_validate_overrides_blocks_privileged_keys_at_any_depth(upstream: str, overrides: dict[str, Any], path: str) -> None:
    """upstream: the TestValidateOverrides_Blocks* cases, one refusal each, at the key's own path."""
    key = path.split(".")[-1]
    assert problems(overrides) == [f'{OVERRIDES}.{path}: overriding "{key}" {SECURITY}'], upstream


@pytest.mark.parametrize(
    "key",
    [
        "securityContext",
        "serviceAccountName",
        "serviceAccount",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "automountServiceAccountToken",
        "nodeName",
        "priorityClassName",
        "runtimeClassName",
    ],
)
def test_every_blocked_override_key_is_refused_deep_in_the_pod_spec(key: str) -> None:
    """upstream: blockedOverrideKeys, each refused where a user would put it (the pod spec)."""
    overrides = {"spec": {"template": {"spec": {key: True}}}}
    assert problems(overrides) == [f'{OVERRIDES}.spec.template.spec.{key}: overriding "{key}" {SECURITY}']


@pytest.mark.parametrize(
    ("upstream", "overrides", "path"),
    [
        ("TestValidateOverrides_BlocksNestedReplicas", {"frontend": {"replicas": 101}}, "frontend.replicas"),
        ("TestValidateOverrides_BlocksNestedResources", {"frontend": {"resources": {"requests": {"cpu": "1024"}}}}, "frontend.resources"),
        (
            "TestValidateOverrides_BlocksSizingKeysInsideArray",
            {"services": [{"name": "frontend", "replicas": 101}]},
            "services[0].replicas",
        ),
    ],
)
def test_validate_overrides_blocks_sizing_keys(upstream: str, overrides: dict[str, Any], path: str) -> None:
    """upstream: TestValidateOverrides_BlocksNested{Replicas,Resources}, ..._BlocksSizingKeysInsideArray: sizing is
    merged after the ceilings are checked, so it is refused and the user pointed at spec.resources/spec.scaling."""
    key = path.split(".")[-1]
    assert problems(overrides) == [f'{OVERRIDES}.{path}: overriding "{key}" {SIZING}'], upstream


def test_validate_overrides_no_duplicate_errors_for_nested_forbidden_key() -> None:
    """upstream: TestValidateOverrides_NoDuplicateErrorsForNestedForbiddenKey: a refused key's subtree is not searched."""
    overrides = {"securityContext": {"securityContext": {"privileged": True}, "hostNetwork": True}}
    assert problems(overrides) == [f'{OVERRIDES}.securityContext: overriding "securityContext" {SECURITY}']


def test_validate_overrides_allows_safe_fields() -> None:
    """upstream: TestValidateOverrides_AllowsSafeFields, and the free-form keys a user really sets."""
    assert problems({"labels": {"team": "ml"}}) == []
    assert problems({"spec": {"template": {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}}}) == []
    assert problems({"spec": {"progressDeadlineSeconds": 900}}) == []


def test_validate_overrides_nil_overrides() -> None:
    """upstream: TestValidateOverrides_NilOverrides (and an empty object)."""
    assert problems(None) == []
    assert problems({}) == []


@pytest.mark.parametrize("value", [[{}], "override", 42, True])
def test_validate_overrides_rejects_non_object_json(value: Any) -> None:
    """upstream: TestValidateOverrides_RejectsNonObjectJSON (array, string, number). A YAML `null` is an unset field
    here, as it is to the API server, so it is not refused."""
    assert problems(value) == [f"{OVERRIDES}: overrides must be a JSON object"]


def test_validate_overrides_invalid_json_redacts_raw_payload() -> None:
    """upstream: TestValidateOverrides_InvalidJSONRedactsRawPayload: a refusal never echoes the overrides' content
    (it may hold data the user did not expect in errors and logs)."""
    secret = "sk-live-0123456789abcdef"
    found = problems({"spec": {"template": {"spec": {"serviceAccountName": secret, "hostIPC": True}}}, "metadata": {"x": secret}})
    assert found and not any(secret in line for line in found)
    assert problems([secret]) == [f"{OVERRIDES}: overrides must be a JSON object"]


@pytest.mark.parametrize("key", ["apiVersion", "kind", "metadata", "status"])
def test_apply_overrides_blocks_identity_keys(key: str) -> None:
    """upstream: each provider's applyOverrides refuses `overriding "<key>" is not allowed`; Jetway refuses it at
    admission, so nothing is half-applied, and again at render (offline `jetway render` passes no admission)."""
    assert problems({key: {"name": "other"}}) == [f'{OVERRIDES}.{key}: overriding "{key}" is not allowed']
    with pytest.raises(RenderError, match=f'overriding "{key}" is not allowed'):
        render("vllm", inputs({"spec.provider": {"overrides": {key: {"name": "other"}}}}, "vllm"))


def test_the_specs_security_sections_keep_their_allow_list_beside_the_free_form_merge() -> None:
    """The spec's `workload`/`container` sections are validated field by field (securityContext is allowed there,
    never weakened); the block-list applies to every other key."""
    ok = {"container": {"securityContext": {"runAsUser": 1000}}, "spec": {"minReadySeconds": 5}}
    assert problems(ok) == []
    assert problems({"container": {"securityContext": {"runAsUser": 0}}}) == [
        f"{OVERRIDES}.container.securityContext.runAsUser: runAsUser cannot be 0 (root); runAsNonRoot is always enforced"
    ]


def test_an_agent_deployments_overrides_stay_the_security_sections() -> None:
    """AgentDeployment's renderers have no provider object to merge into: only the spec's sections are accepted."""
    assert problems({"spec": {"minReadySeconds": 5}}, AD) == [
        f"{OVERRIDES}.spec: overriding 'spec' is not allowed: only workload/container override sections are supported"
    ]


def _rendered(provider: str, overrides: dict[str, Any], engine: str = "vllm", **changes: Any) -> list[dict[str, Any]]:
    assert problems(overrides) == []
    return render(provider, inputs({"spec.provider": {"overrides": overrides}, **changes}, engine))


def test_deep_merge_maps_merge_and_other_values_replace() -> None:
    """upstream: vllm TestTransformer overrides cases / deepMerge: maps merge recursively (the rendered pod spec
    keeps its containers), lists and scalars replace."""
    tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    overrides = {
        "spec": {"progressDeadlineSeconds": 900, "template": {"spec": {"tolerations": tolerations, "dnsPolicy": "None"}}},
        "extra": {"a": 1},
    }
    deployment = _rendered("vllm", overrides)[0]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["progressDeadlineSeconds"] == 900
    assert pod["tolerations"] == tolerations and pod["dnsPolicy"] == "None"
    assert pod["containers"][0]["name"] == "vllm" and deployment["spec"]["replicas"] == 1
    assert deployment["extra"] == {"a": 1}
    # a list replaces, it is not merged item by item
    merged = _rendered("vllm", {"spec": {"template": {"spec": {"containers": [{"name": "other", "image": "x"}]}}}})[0]
    assert merged["spec"]["template"]["spec"]["containers"] == [{"name": "other", "image": "x"}]


def test_overrides_reach_the_main_object_only() -> None:
    """upstream: overrides merge into the provider's main resource (the Deployment), never its Service."""
    deployment, service = _rendered("vllm", {"spec": {"minReadySeconds": 7}})
    assert deployment["spec"]["minReadySeconds"] == 7
    assert "minReadySeconds" not in service["spec"]


def test_llmd_apply_overrides_refuses_the_pod_spec() -> None:
    """upstream: llmd applyOverrides refuses `spec.template.spec` (the pod spec is llm-d's own)."""
    with pytest.raises(RenderError, match=re.escape('overriding "spec.template.spec" is not allowed')):
        _rendered("llmd", {"spec": {"template": {"spec": {"dnsPolicy": "None"}}}})
    assert _rendered("llmd", {"spec": {"minReadySeconds": 3}})[0]["spec"]["minReadySeconds"] == 3


def test_overrides_are_json_all_the_way() -> None:
    """What admission accepted renders to plain JSON (the merge copies; nothing aliases the user's spec)."""
    overrides = {"spec": {"template": {"metadata": {"annotations": {"a": "b"}}}}}
    first = _rendered("vllm", overrides)
    second = _rendered("vllm", overrides)
    first[0]["spec"]["template"]["metadata"]["annotations"]["a"] = "changed"
    assert second[0]["spec"]["template"]["metadata"]["annotations"]["a"] == "b"
    json.dumps(first)


@pytest.mark.parametrize(
    ("overrides", "path", "got"),
    [
        ({"spec": "x"}, "spec", "a string"),
        ({"spec": ["x"]}, "spec", "a list"),
        ({"spec": {"template": 3}}, "spec.template", "a number"),
        ({"spec": {"template": {"metadata": {"labels": "a=b"}}}}, "spec.template.metadata.labels", "a string"),
        ({"spec": {"workerGroupSpecs": [{"template": True}]}}, "spec.workerGroupSpecs[0].template", "a boolean"),
        ({"spec": {"template": {"spec": {"nodeSelector": "gpu"}}}}, "spec.template.spec.nodeSelector", "a string"),
    ],
)
def test_a_non_object_where_the_rendered_object_has_an_object_is_refused(overrides: dict[str, Any], path: str, got: str) -> None:
    """Jetway's own (docs/upstream-differences.md, Overrides): upstream's merge replaces the object and the API server
    refuses the result on every write; admission refuses it instead, at its path, with the rule."""
    key = path.rsplit(".", 1)[-1].split("[")[0]
    assert problems(overrides) == [
        f'{OVERRIDES}.{path}: must be an object (got {got}): overrides merge into "{key}", an object in the rendered object'
    ]


def test_objects_nulls_and_string_map_entries_named_like_object_keys_are_not_refused() -> None:
    """null stays a merge value (KAITO deletes the key with it); a label or annotation may be named `spec`."""
    assert problems({"spec": None}) == []
    assert problems({"spec": {"template": {"metadata": {"annotations": {"spec": "x", "template": "y"}}}}}) == []
    assert problems({"spec": {"selector": {"matchLabels": {"selector": "z"}}}}) == []


BASELINE = "(Pod Security baseline)"
PROVIDERS = ["vllm", "llmd", "kaito", "dynamo", "kuberay"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("pod", "path", "rule"),
    [
        (
            {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
            "volumes[0].hostPath",
            "a hostPath volume gives the pod the node's files",
        ),
        (
            {"containers": [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
            "containers[0].ports[0].hostPort",
            "hostPort",
        ),
        ({"containers": [{"name": "main", "privileged": True}]}, "containers[0].privileged", "has the node's devices"),
        ({"containers": [{"name": "main", "capabilities": {"add": ["SYS_ADMIN"]}}]}, "containers[0].capabilities", "may only be dropped"),
        ({"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]}, "sysctls", "kernel settings"),
    ],
)
def test_an_override_may_not_give_pods_what_pod_security_baseline_refuses(provider: str, pod: dict[str, Any], path: str, rule: str) -> None:
    """A Direct vLLM override once rendered a Deployment mounting the node's root (issue 23 #2): refused for every
    provider at the override's own path, wherever the pod spec sits in that provider's object."""
    for where in ("spec.template.spec", "spec.workerGroupSpecs[0].template.spec"):
        overrides: dict[str, Any] = {}
        node = overrides
        for part in where.split("."):
            name, _, index = part.partition("[")
            node[name] = [{}] if index else {}
            node = node[name][0] if index else node[name]
        node.update(pod)
        base = changed(MD, {"spec.provider": {"name": provider}})
        found = problems(overrides, base)
        assert len(found) == 1 and found[0].startswith(f"{OVERRIDES}.{where}.{path}: "), found
        assert rule in found[0] and BASELINE in found[0], found


def test_baseline_allows_what_it_allows() -> None:
    """A hostPort of 0, an AppArmor runtime/default or localhost/ profile, and a volume of another type pass; an
    unconfined AppArmor annotation does not; a label named hostPath is data, not a field."""
    pod = {
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "containers": [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 0}]}],
    }
    allowed = {
        "spec": {
            "template": {
                "metadata": {
                    "labels": {"hostPath": "x"},
                    "annotations": {
                        "container.apparmor.security.beta.kubernetes.io/main": "runtime/default",
                        "container.apparmor.security.beta.kubernetes.io/side": "localhost/mine",
                    },
                },
                "spec": pod,
            }
        }
    }
    assert problems(allowed) == []
    unconfined = {
        "spec": {"template": {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}}}}
    }
    assert problems(unconfined) == [
        f"{OVERRIDES}.spec.template.metadata.annotations.container.apparmor.security.beta.kubernetes.io/main: "
        f"AppArmor 'unconfined' is not allowed: only runtime/default or localhost/<profile> {BASELINE}"
    ]
