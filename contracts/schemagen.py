"""Generated artefacts, derived from the models: JSON Schemas for editors and CRDs for clusters.

Pure functions from models to dicts; `jetway generate` writes them to `contracts/schemas/` and
`deploy/crds/`, and a test fails when the checked-in files drift from the models.
"""

from __future__ import annotations

import copy
from typing import Any

from contracts.kinds import KINDS, VERSION, KindInfo
from contracts.poolmember import SCHEMA_ID
from contracts.scaling import PROVIDER_SCALING

Schema = dict[str, Any]

# Cross-field rules the structural schema cannot express, as Kubernetes CEL, keyed by the
# schema location (`.` between properties, `[]` for list items). Each mirrors a rule in
# contracts/rules, so a cluster without Jetway's webhook still refuses the same manifests.
_SYSTEM_PATHS = "['/dev', '/proc', '/sys', '/etc', '/var/run']"
_PORT = "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
BASE_URL_RE = r"^[hH][tT][tT][pP][sS]?://(\[[0-9A-Fa-f:.]+\]|[^\s/?#@:\[\]]+)(:" + _PORT + r")?([/?][^\s#]*)?$"
_AUTOSCALED = "has(self.scaling) && has(self.scaling.autoscaling)"
_NAMED = "has(self.provider) && has(self.provider.name)"
_FIXED = sorted(name for name, can in PROVIDER_SCALING.items() if not can.scales)  # contracts/rules/autoscaling.py
_NOT_TO_ZERO = sorted(name for name, can in PROVIDER_SCALING.items() if can.scales and not can.to_zero)

CEL_RULES: dict[str, dict[str, list[dict[str, str]]]] = {
    "ModelDeployment": {
        "spec": [
            {
                "rule": "!has(self.image) || self.image == '' || !has(self.engine) || !has(self.engine.image) "
                "|| self.engine.image == '' || self.image == self.engine.image",
                "message": "spec.image conflicts with spec.engine.image; remove spec.image or set both to the same value",
            },
            {
                "rule": "!has(self.serving) || self.serving.mode != 'disaggregated' "
                "|| (has(self.scaling) && has(self.scaling.prefill) && has(self.scaling.decode))",
                "message": "disaggregated mode requires scaling.prefill and scaling.decode",
            },
            {
                "rule": "!has(self.serving) || self.serving.mode != 'disaggregated' || !has(self.resources) "
                "|| !has(self.resources.gpu) || self.resources.gpu.count == 0",
                "message": "cannot specify both resources.gpu and scaling.prefill/decode in disaggregated mode",
            },
            {
                "rule": f"!({_AUTOSCALED}) || !has(self.serving) || self.serving.mode != 'disaggregated'",
                "message": "scaling.autoscaling is not supported in disaggregated mode",
            },
            {
                "rule": f"!({_AUTOSCALED}) || !({_NAMED}) || !(self.provider.name in {_FIXED})",
                "message": f"scaling.autoscaling: providers {' and '.join(_FIXED)} cannot autoscale",
            },
            {
                "rule": f"!({_AUTOSCALED}) || !({_NAMED}) || !(self.provider.name in {_NOT_TO_ZERO}) "
                "|| !has(self.scaling.autoscaling.minReplicas) || self.scaling.autoscaling.minReplicas > 0",
                "message": f"scaling.autoscaling.minReplicas must be at least 1 on {' and '.join(_NOT_TO_ZERO)}, "
                "which cannot scale to zero",
            },
            # Transition rules sit here, not on the fields, so that "absent" compares too.
            {
                "rule": "(has(self.serving) ? self.serving.mode : 'aggregated') == "
                "(has(oldSelf.serving) ? oldSelf.serving.mode : 'aggregated')",
                "message": "serving.mode is immutable (changing it requires delete and recreate)",
            },
            {
                "rule": "(has(self.model.id) ? self.model.id : '') == (has(oldSelf.model.id) ? oldSelf.model.id : '')",
                "message": "model.id is immutable (changing it requires delete and recreate)",
            },
        ],
        "spec.scaling.autoscaling": [
            {
                "rule": "(has(self.minReplicas) ? self.minReplicas : 1) <= self.maxReplicas",
                "message": "minReplicas must be at most maxReplicas",
            },
            {
                "rule": "!has(self.signal) || self.signal != 'kvCacheUsage' || !has(self.target) || self.target <= 1.0",
                "message": "target must be at most 1 for kvCacheUsage, the fraction of the KV cache in use",
            },
        ],
        "spec.model": [
            {
                "rule": "(has(self.source) && self.source != 'huggingface') || (has(self.id) && self.id != '')",
                "message": "model.id is required when source is huggingface",
            },
        ],
        "spec.model.source": [
            {"rule": "self == oldSelf", "message": "model.source is immutable (changing it requires delete and recreate)"}
        ],
        "spec.engine.type": [
            {
                "rule": "self == oldSelf || self == '' || oldSelf == ''",
                "message": "engine.type is immutable (changing it requires delete and recreate)",
            }
        ],
        "spec.model.storage.volumes": [
            {
                "rule": "self.filter(v, has(v.purpose) && v.purpose == 'modelCache').size() <= 1",
                "message": "at most one volume with purpose=modelCache is allowed",
            },
            {
                "rule": "self.filter(v, has(v.purpose) && v.purpose == 'compilationCache').size() <= 1",
                "message": "at most one volume with purpose=compilationCache is allowed",
            },
            {
                "rule": "self.all(a, !has(a.mountPath) || self.filter(b, has(b.mountPath) && b.mountPath == a.mountPath).size() == 1)",
                "message": "duplicate mount path",
            },
        ],
        "spec.model.storage.volumes[]": [
            {
                "rule": "has(self.size) || (has(self.claimName) && self.claimName != '')",
                "message": "claimName is required when size is not set (must reference a pre-existing PVC)",
            },
            {
                "rule": "!has(self.size) || !has(self.readOnly) || !self.readOnly",
                "message": "readOnly must not be true when size is set (controller-created PVCs need write access)",
            },
            {
                "rule": "has(self.size) || !has(self.accessMode)",
                "message": "accessMode is only applicable when size is set (controller-created PVCs)",
            },
            {
                "rule": "has(self.size) || !has(self.storageClassName)",
                "message": "storageClassName is only applicable when size is set (controller-created PVCs)",
            },
            {
                "rule": "(has(self.purpose) && self.purpose != 'custom') || has(self.mountPath)",
                "message": "mountPath is required when purpose is custom",
            },
            {
                "rule": f"!has(self.mountPath) || !{_SYSTEM_PATHS}.exists(p, self.mountPath == p || self.mountPath.startsWith(p + '/'))",
                "message": "mountPath must not overlap with a system path (/dev, /proc, /sys, /etc, /var/run)",
            },
        ],
    },
    "AgentDeployment": {
        "spec.model": [
            {
                "rule": "(has(self.deploymentRef) ? 1 : 0) + (has(self.gatewayEndpoint) ? 1 : 0) + (has(self.externalAPI) ? 1 : 0) == 1",
                "message": "exactly one of deploymentRef, gatewayEndpoint, or externalAPI must be set",
            },
        ],
        "spec.framework.name": [
            {"rule": "self == oldSelf", "message": "framework selection is immutable; create a new AgentDeployment to switch frameworks"}
        ],
        "spec.model.externalAPI.baseURL": [
            {
                "rule": "self.matches('" + BASE_URL_RE.replace("\\", "\\\\") + "')",
                "message": "baseURL must be an absolute http or https URL with a host, no user information, and a port from 1 to 65535",
            },
        ],
    },
    "AgentProviderConfig": {
        "spec.capabilities.backend": [{"rule": "self == oldSelf", "message": "backend is immutable"}],
    },
    "InferencePoolMember": {
        "spec": [
            {
                "rule": "!has(self.transport) || self.transport != 'operator-signal' "
                "|| (has(self.computeOperatorRef) && self.computeOperatorRef != '')",
                "message": "computeOperatorRef is required when transport is operator-signal",
            },
            {
                "rule": "(has(self.transport) && self.transport == 'operator-signal') || !has(self.computeOperatorRef)",
                "message": "computeOperatorRef must not be set when transport is http-direct",
            },
            {
                "rule": "self.backend != 'vllm-openai' || (has(self.transport) && self.transport == 'operator-signal') "
                "|| (has(self.url) && self.url != '')",
                "message": "url is required for backend vllm-openai over transport http-direct",
            },
        ],
    },
}

# Lists whose items are keyed, so that server-side apply merges them by key.
LIST_MAP_KEYS: dict[str, dict[str, list[str]]] = {
    "ModelDeployment": {"spec.model.storage.volumes": ["name"], "status.conditions": ["type"]},
    "InferenceProviderConfig": {"spec.capabilities.engines": ["name"], "status.conditions": ["type"]},
    "AgentProviderConfig": {"status.conditions": ["type"]},
    "AgentDeployment": {"status.conditions": ["type"]},
    "InferencePoolMember": {"status.conditions": ["type"]},
}

_READY = '.status.conditions[?(@.type=="Ready")].status'
PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "ModelDeployment": [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Provider", "type": "string", "jsonPath": ".status.provider.name"},
        {"name": "Engine", "type": "string", "jsonPath": ".status.engine.type"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.replicas.ready"},
        {"name": "Desired", "type": "integer", "jsonPath": ".status.replicas.desired"},
        {"name": "Model", "type": "string", "jsonPath": ".spec.model.id", "priority": 1},
        {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint.service", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "InferenceProviderConfig": [
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
        {"name": "Version", "type": "string", "jsonPath": ".status.version"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "AgentProviderConfig": [
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
        {"name": "Backend", "type": "string", "jsonPath": ".spec.capabilities.backend"},
        {"name": "Version", "type": "string", "jsonPath": ".status.version"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "AgentDeployment": [
        {"name": "Framework", "type": "string", "jsonPath": ".spec.framework.name"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Ready", "type": "string", "jsonPath": _READY},
        {"name": "Binding", "type": "string", "jsonPath": ".status.modelBinding.bindingMode", "priority": 1},
        {"name": "Base URL", "type": "string", "jsonPath": ".status.modelBinding.baseURL", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "InferencePoolMember": [
        {"name": "Backend", "type": "string", "jsonPath": ".spec.backend"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Healthy", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Healthy")].status'},
        {"name": "Draining", "type": "boolean", "jsonPath": ".spec.draining"},
        {"name": "URL", "type": "string", "jsonPath": ".spec.url", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """Replace every `$ref` with the definition it names (our models are not recursive)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            target = copy.deepcopy(defs[schema["$ref"].rsplit("/", 1)[-1]])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _inline({**target, **rest}, defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    return schema


def _model_schema(info: KindInfo) -> Schema:
    raw = info.model.model_json_schema(mode="validation")
    return _inline(raw, raw.get("$defs", {}))


def _structural(node: Any, *, in_props: bool = False) -> Any:
    """pydantic's JSON Schema → a Kubernetes structural schema (no anyOf-null, no titles)."""
    if not isinstance(node, dict):
        return node
    if in_props:
        return {key: _structural(value) for key, value in node.items()}
    node = dict(node)
    nullable = False
    if "anyOf" in node:
        options = node.pop("anyOf")
        branches = [b for b in options if b.get("type") != "null"]
        nullable = len(branches) < len(options)
        if len(branches) == 1:
            node = {**branches[0], **node}
        else:  # pragma: no cover - our models have no real unions
            raise ValueError(f"cannot express a union in a structural schema: {branches}")
    node.pop("title", None)
    if node.get("default", 0) is None:
        node.pop("default")
    if "const" in node:
        node["enum"] = [node.pop("const")]
        node.setdefault("type", "string")
    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")
    if node.get("type") == "object" and "properties" not in node:
        extra = node.get("additionalProperties")
        if extra is True or extra is None or extra == {}:
            node.pop("additionalProperties", None)
            node["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            # JSON Schema's numeric bound is OpenAPI v3's limit with a boolean flag (Kubernetes' JSONSchemaProps)
            node[limit], node[bound] = node[bound], True
    if nullable and "x-kubernetes-preserve-unknown-fields" not in node:
        node["nullable"] = True
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = _structural(value, in_props=True)
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value)
        else:
            out[key] = value
    return out


def _at(schema: Schema, location: str) -> Schema:
    node = schema
    for part in location.split("."):
        items = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


def crd_schema(info: KindInfo) -> Schema:
    schema = _structural(_model_schema(info))
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    schema["required"] = [r for r in schema.get("required", []) if r not in ("metadata",)]
    for location, keys in LIST_MAP_KEYS.get(info.kind, {}).items():
        node = _at(schema, location)
        node["x-kubernetes-list-type"] = "map"
        node["x-kubernetes-list-map-keys"] = keys
    for location, rules in CEL_RULES.get(info.kind, {}).items():
        _at(schema, location)["x-kubernetes-validations"] = rules
    schema.pop("nullable", None)
    return {"description": info.description, **schema}


def _strip_nullable(node: Any) -> Any:
    """Kubernetes drops nulls for us; `nullable` is only kept where the contract says null is valid."""
    if isinstance(node, dict):
        return {k: _strip_nullable(v) for k, v in node.items() if k != "nullable"}
    if isinstance(node, list):
        return [_strip_nullable(v) for v in node]
    return node


def crd(info: KindInfo) -> dict[str, Any]:
    schema = crd_schema(info)
    if info.kind != "InferencePoolMember":
        schema = _strip_nullable(schema)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{info.plural}.{info.group}",
            "labels": {"app.kubernetes.io/part-of": "jetway"},
        },
        "spec": {
            "group": info.group,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": ["airunway" if info.group == "airunway.ai" else "airdress", "jetway"],
            },
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS[info.kind],
                }
            ],
        },
    }


def _editor_schema(node: Any) -> Any:
    """Draft-07 for editors: drop pydantic's auto titles and null defaults, keep descriptions."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key == "default" and value is None:
                continue
            out[key] = _editor_schema(value) if key != "properties" else {k: _editor_schema(v) for k, v in value.items()}
        return out
    if isinstance(node, list):
        return [_editor_schema(v) for v in node]
    return node


def json_schema(info: KindInfo) -> Schema:
    """The JSON Schema a `# yaml-language-server: $schema=` modeline points editors at."""
    body = _editor_schema(_model_schema(info))
    # Controllers write status; a manifest may carry one (from `get -o yaml`) and apply ignores it.
    body["properties"]["status"] = {"description": "Written by Jetway's services; ignored when applied."}
    body["properties"]["apiVersion"] = {"const": info.api_version}
    body["properties"]["kind"] = {"const": info.kind}
    body["required"] = ["apiVersion", "kind", "metadata", "spec"]
    head: Schema = {"$schema": "http://json-schema.org/draft-07/schema#"}
    if info.kind == "InferencePoolMember":
        head["$id"] = SCHEMA_ID
        head["title"] = "Airdress operator InferencePoolMember manifest"
        # The published schema leaves metadata open so server-filled fields round-trip.
        body["properties"]["metadata"].pop("additionalProperties", None)
    else:
        head["title"] = f"AI Runway {info.kind} manifest ({info.api_version})"
    return {**head, **body}


def schema_files() -> dict[str, Schema]:
    return {f"{info.singular}.json": json_schema(info) for info in KINDS.values()}


def crd_files() -> dict[str, dict[str, Any]]:
    return {f"{info.plural}.{info.group}.yaml": crd(info) for info in KINDS.values()}
