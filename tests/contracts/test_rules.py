"""Every admission rule, each with a valid and an invalid case, checked by field path and words."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.admission import admit
from tests.contracts.cases import AD, APC, DELETE, IPC, MD, MEMBER, changed

VOL = "spec.model.storage.volumes"


def vol(**fields: Any) -> dict[str, Any]:
    return {"name": "cache", "purpose": "modelCache", "claimName": "pvc", **fields}


INVALID: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    # --- storage volumes
    ("volume name not a DNS label", MD, {VOL: [vol(name="Bad_Name")]}, f"{VOL}[0].name", "must be a DNS label"),
    ("volume name over 63", MD, {VOL: [vol(name="a" * 64)]}, f"{VOL}[0].name", "at most 63 characters"),
    (
        "volume names unique",
        MD,
        {VOL: [vol(name="a"), vol(name="a", purpose="custom", claimName="p2", mountPath="/x")]},
        f"{VOL}[1].name",
        'duplicate volume name "a"',
    ),
    (
        "at most 8 volumes",
        MD,
        {VOL: [vol(name=f"v{i}", purpose="custom", claimName=f"c{i}", mountPath=f"/m{i}") for i in range(9)]},
        VOL,
        "at most 8 items",
    ),
    (
        "one modelCache",
        MD,
        {VOL: [vol(name="a"), vol(name="b", claimName="p2", mountPath="/b")]},
        f"{VOL}[1].purpose",
        "at most one volume with purpose=modelCache",
    ),
    (
        "one compilationCache",
        MD,
        {VOL: [vol(name="a", purpose="compilationCache"), vol(name="b", purpose="compilationCache", claimName="p2", mountPath="/b")]},
        f"{VOL}[1].purpose",
        "at most one volume with purpose=compilationCache",
    ),
    ("mountPath absolute", MD, {VOL: [vol(mountPath="model-cache")]}, f"{VOL}[0].mountPath", "absolute path"),
    ("mountPath required for custom", MD, {VOL: [vol(purpose="custom")]}, f"{VOL}[0].mountPath", "required when purpose is custom"),
    (
        "claimName required without size",
        MD,
        {VOL: [{"name": "cache", "purpose": "modelCache"}]},
        f"{VOL}[0].claimName",
        "claimName is required when size is not set",
    ),
    (
        "accessMode enum",
        MD,
        {VOL: [vol(claimName=None, size="1Gi", accessMode="ReadWrite")]},
        f"{VOL}[0].accessMode",
        'Unsupported value: "ReadWrite": supported values: "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"',
    ),
    ("accessMode only with size", MD, {VOL: [vol(accessMode="ReadWriteOnce")]}, f"{VOL}[0].accessMode", "only applicable when size is set"),
    (
        "storageClassName only with size",
        MD,
        {VOL: [vol(storageClassName="")]},
        f"{VOL}[0].storageClassName",
        "only applicable when size is set",
    ),
    (
        "no readOnly with size",
        MD,
        {VOL: [{"name": "cache", "purpose": "modelCache", "size": "1Gi", "readOnly": True}]},
        f"{VOL}[0].readOnly",
        "must not be true when size is set",
    ),
    ("size is a quantity", MD, {VOL: [{"name": "cache", "purpose": "modelCache", "size": "lots"}]}, f"{VOL}[0].size", "quantity"),
    ("no system path mounts", MD, {VOL: [vol(purpose="custom", mountPath="/etc/models")]}, f"{VOL}[0].mountPath", "system path /etc"),
    ("no /var/run mounts", MD, {VOL: [vol(purpose="custom", mountPath="/var/run")]}, f"{VOL}[0].mountPath", "system path /var/run"),
    (
        "mount paths unique",
        MD,
        {VOL: [vol(name="a", mountPath="/m"), vol(name="b", purpose="custom", claimName="p2", mountPath="/m")]},
        f"{VOL}[1].mountPath",
        'duplicate mount path "/m"',
    ),
    (
        "claims unique",
        MD,
        {VOL: [vol(name="a"), vol(name="b", purpose="custom", mountPath="/b")]},
        f"{VOL}[1].claimName",
        'duplicate claim name "pvc"',
    ),
    (
        "sized claim name clashes",
        MD,
        {VOL: [vol(name="x", claimName="qwen-y"), {"name": "y", "purpose": "custom", "size": "1Gi", "mountPath": "/y"}]},
        f"{VOL}[1].claimName",
        'duplicate claim name "qwen-y"',
    ),
    (
        "sized volume with its own claim name",
        MD,
        {VOL: [{"name": "cache", "purpose": "modelCache", "size": "100Gi", "claimName": "my-cache"}]},
        f"{VOL}[0].claimName",
        'claimName must not be set when size is set (auto-generated as "qwen-cache")',
    ),
    # --- engine, serving, model
    (
        "engine type enum",
        MD,
        {"spec.engine.type": "tensorrt"},
        "spec.engine.type",
        'Unsupported value: "tensorrt": supported values: "vllm", "sglang", "trtllm", "llamacpp"',
    ),
    (
        "serving mode enum",
        MD,
        {"spec.serving": {"mode": "split"}},
        "spec.serving.mode",
        'Unsupported value: "split": supported values: "aggregated", "disaggregated"',
    ),
    ("model id for huggingface", MD, {"spec.model": {"source": "huggingface"}}, "spec.model.id", "required when source is huggingface"),
    (
        "source enum",
        MD,
        {"spec.model.source": "s3"},
        "spec.model.source",
        'Unsupported value: "s3": supported values: "huggingface", "custom"',
    ),
    (
        "image conflict",
        MD,
        {"spec.image": "a:1", "spec.engine.image": "b:1"},
        "spec.engine.image",
        'spec.image "a:1" conflicts with spec.engine.image "b:1"',
    ),
    (
        "arg in args and extraArgs",
        MD,
        {"spec.engine.args": {"tensor-parallel-size": "4"}, "spec.engine.extraArgs": ["--tensor-parallel-size=2"]},
        "spec.engine.extraArgs[0]",
        'launch flag "tensor-parallel-size" is set in both',
    ),
    ("arg key characters", MD, {"spec.engine.args": {"bad key!": "1"}}, "spec.engine.args.bad key!", "invalid engine arg key"),
    (
        "vllm owns --port",
        MD,
        {"spec.provider": {"name": "vllm"}, "spec.engine.extraArgs": ["--port=9000"]},
        "spec.engine.extraArgs[0]",
        'engine extraArg "--port=9000" conflicts with Direct vLLM',
    ),
    ("contextLength positive", MD, {"spec.engine.contextLength": 0}, "spec.engine.contextLength", "must be at least 1"),
    ("count is an integer", MD, {"spec.resources.gpu.count": "2"}, "spec.resources.gpu.count", "must be an integer (got a string"),
    ("gpu ceiling", MD, {"spec.resources.gpu.count": 65}, "spec.resources.gpu.count", "exceeds maximum allowed (64)"),
    ("replica ceiling", MD, {"spec.scaling": {"replicas": 33}}, "spec.scaling.replicas", "exceeds maximum allowed (32)"),
    ("memory ceiling", MD, {"spec.resources.memory": "5Ti"}, "spec.resources.memory", "exceeds maximum allowed (4Ti)"),
    ("cpu is a quantity", MD, {"spec.resources.cpu": "abc"}, "spec.resources.cpu", "quantity"),
    ("replicas non-negative", MD, {"spec.scaling": {"replicas": -1}}, "spec.scaling.replicas", "must be at least 0"),
    (
        "disaggregated needs prefill",
        MD,
        {"spec.serving": {"mode": "disaggregated"}, "spec.resources": DELETE, "spec.scaling": {"decode": {"gpu": {"count": 1}}}},
        "spec.scaling.prefill",
        "disaggregated mode requires scaling.prefill",
    ),
    (
        "disaggregated prefill GPUs",
        MD,
        {
            "spec.serving": {"mode": "disaggregated"},
            "spec.resources": DELETE,
            "spec.scaling": {"prefill": {"replicas": 1}, "decode": {"gpu": {"count": 1}}},
        },
        "spec.scaling.prefill.gpu.count",
        "requires scaling.prefill.gpu.count > 0",
    ),
    (
        "disaggregated without resources.gpu",
        MD,
        {"spec.serving": {"mode": "disaggregated"}, "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 1}}}},
        "spec.resources.gpu",
        "cannot specify both resources.gpu and scaling.prefill/decode",
    ),
    ("name without dots", MD, {"metadata.name": "qwen.v1"}, "metadata.name", "must not contain dots"),
    ("name starts with a letter", MD, {"metadata.name": "3b-model"}, "metadata.name", "DNS-1035 label"),
    (
        "download job name fits",
        MD,
        {"metadata.name": "m" * 50, VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi"}]},
        "metadata.name",
        "at most 48 characters",
    ),
    ("unknown spec field", MD, {"spec.replicas": 2}, "spec.replicas", "unknown field"),
    (
        "unknown nested field, with a hint",
        MD,
        {"spec.engine.contextlength": 4},
        "spec.engine.contextlength",
        "did you mean 'contextLength'",
    ),
    ("unknown metadata field", MD, {"metadata.label": {"a": "b"}}, "metadata.label", "unknown field"),
    ("label value format", MD, {"metadata.labels": {"team": "a b"}}, "metadata.labels.team", "must be a label value"),
    ("env name format", MD, {"spec.env": [{"name": "1 BAD", "value": "x"}]}, "spec.env[0].name", "environment variable name"),
    ("env valueFrom one source", MD, {"spec.env": [{"name": "A", "valueFrom": {}}]}, "spec.env[0].valueFrom", "exactly one of"),
    (
        "toleration Exists has no value",
        MD,
        {"spec.tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        "spec.tolerations[0].value",
        "must be empty when operator is Exists",
    ),
    ("spec required", MD, {"spec": DELETE}, "spec", "required"),
    ("metadata.name required", MD, {"metadata": {"namespace": "x"}}, "metadata.name", "required"),
    # --- provider.overrides allow-list (ModelDeployment and AgentDeployment share it)
    (
        "override blocked key in the free-form merge",
        MD,
        {"spec.provider": {"overrides": {"spec": {"template": {"spec": {"hostNetwork": True}}}}}},
        "spec.provider.overrides.spec.template.spec.hostNetwork",
        'overriding "hostNetwork" is not allowed for security reasons',
    ),
    (
        "override key",
        MD,
        {"spec.provider": {"overrides": {"workload": {"hostNetwork": True}}}},
        "spec.provider.overrides.workload.hostNetwork",
        "only podSecurityContext and securityContext",
    ),
    (
        "override field",
        AD,
        {"spec.provider": {"overrides": {"container": {"securityContext": {"privileged": True}}}}},
        "spec.provider.overrides.container.securityContext.privileged",
        "not allowed",
    ),
    (
        "runAsNonRoot false",
        AD,
        {"spec.provider": {"overrides": {"workload": {"podSecurityContext": {"runAsNonRoot": False}}}}},
        "spec.provider.overrides.workload.podSecurityContext.runAsNonRoot",
        "cannot be set to false",
    ),
    (
        "runAsUser root",
        MD,
        {"spec.provider": {"overrides": {"container": {"securityContext": {"runAsUser": 0}}}}},
        "spec.provider.overrides.container.securityContext.runAsUser",
        "cannot be 0 (root)",
    ),
    (
        "privilege escalation",
        AD,
        {"spec.provider": {"overrides": {"container": {"securityContext": {"allowPrivilegeEscalation": True}}}}},
        "spec.provider.overrides.container.securityContext.allowPrivilegeEscalation",
        "cannot be set to true",
    ),
    (
        "capabilities add",
        AD,
        {"spec.provider": {"overrides": {"container": {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}}}},
        "spec.provider.overrides.container.securityContext.capabilities.add",
        "add is rejected",
    ),
    (
        "drop must include ALL",
        AD,
        {"spec.provider": {"overrides": {"container": {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}}}},
        "spec.provider.overrides.container.securityContext.capabilities.drop",
        'must include "ALL"',
    ),
    (
        "Localhost seccomp needs a profile",
        AD,
        {"spec.provider": {"overrides": {"workload": {"podSecurityContext": {"seccompProfile": {"type": "Localhost"}}}}}},
        "spec.provider.overrides.workload.podSecurityContext.seccompProfile.localhostProfile",
        "required when type is Localhost",
    ),
    (
        "fsGroupChangePolicy enum",
        AD,
        {"spec.provider": {"overrides": {"workload": {"podSecurityContext": {"fsGroupChangePolicy": "Never"}}}}},
        "spec.provider.overrides.workload.podSecurityContext.fsGroupChangePolicy",
        "must be one of Always, OnRootMismatch",
    ),
    # --- AgentDeployment binding
    ("exactly one binding: none", AD, {"spec.model": {}}, "spec.model", "exactly one of deploymentRef, gatewayEndpoint, or externalAPI"),
    (
        "exactly one binding: two",
        AD,
        {"spec.model.externalAPI": {"type": "openai", "baseURL": "https://x", "modelName": "m"}},
        "spec.model",
        "exactly one of",
    ),
    (
        "baseURL relative",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "/v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "absolute http or https URL",
    ),
    (
        "baseURL scheme",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "ftp://host/v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "scheme must be http or https",
    ),
    (
        "baseURL host",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "https:///v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "must have a host",
    ),
    (
        "baseURL user info",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "https://user:pw@host/v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "must not contain user information",
    ),
    (
        "baseURL port 0",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "https://host:0/v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "port must be a number from 1 to 65535",
    ),
    (
        "baseURL port 65536",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "http://host:65536", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "port must be a number from 1 to 65535",
    ),
    (
        "baseURL empty port",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "http://host:/v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "port must not be empty",
    ),
    (
        "baseURL bare IPv6",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": "http://fe80::1/v1", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "IPv6 address must be enclosed in brackets",
    ),
    (
        "baseURL whitespace",
        AD,
        {"spec.model": {"externalAPI": {"type": "openai", "baseURL": " https://host", "modelName": "m"}}},
        "spec.model.externalAPI.baseURL",
        "whitespace",
    ),
    (
        "externalAPI type",
        AD,
        {"spec.model": {"externalAPI": {"type": "gemini", "baseURL": "https://h", "modelName": "m"}}},
        "spec.model.externalAPI.type",
        'Unsupported value: "gemini": supported values: "openai", "anthropic", "azureOpenAI", "custom"',
    ),
    ("agent name length", AD, {"metadata.name": "a" * 64}, "metadata.name", "at most 63 characters"),
    ("framework name", AD, {"spec.framework.name": "Kagent"}, "spec.framework.name", "DNS label"),
    (
        "lifecycle enum",
        AD,
        {"spec.lifecycle": "cron"},
        "spec.lifecycle",
        'Unsupported value: "cron": supported values: "deployment", "job"',
    ),
    # --- AgentProviderConfig catalog
    (
        "catalog is JSON",
        APC,
        {"metadata.annotations": {"airunway.ai/agent-catalog": "[{"}},
        'metadata.annotations["airunway.ai/agent-catalog"]',
        "must be valid JSON",
    ),
    (
        "catalog is an array",
        APC,
        {"metadata.annotations": {"airunway.ai/agent-catalog": '{"name": "a"}'}},
        'metadata.annotations["airunway.ai/agent-catalog"]',
        "must be a JSON array",
    ),
    (
        "catalog names unique",
        APC,
        {"metadata.annotations": {"airunway.ai/agent-catalog": '[{"name":"a","title":"A"},{"name":"a","title":"B"}]'}},
        'metadata.annotations["airunway.ai/agent-catalog"][1].name',
        'duplicate catalog name "a"',
    ),
    (
        "catalog title non-empty",
        APC,
        {"metadata.annotations": {"airunway.ai/agent-catalog": '[{"name":"a","title":""}]'}},
        'metadata.annotations["airunway.ai/agent-catalog"][0].title',
        "must not be empty",
    ),
    (
        "catalog title required",
        APC,
        {"metadata.annotations": {"airunway.ai/agent-catalog": '[{"name":"a"}]'}},
        'metadata.annotations["airunway.ai/agent-catalog"][0].title',
        "required",
    ),
    (
        "backend enum",
        APC,
        {"spec.capabilities.backend": "helm"},
        "spec.capabilities.backend",
        'Unsupported value: "helm": supported values: "crd", "container"',
    ),
    (
        "binding modes enum",
        APC,
        {"spec.capabilities.modelBindingModes": ["ref"]},
        "spec.capabilities.modelBindingModes[0]",
        'Unsupported value: "ref": supported values:',
    ),
    # --- InferenceProviderConfig
    (
        "CEL compiles",
        IPC,
        {"spec.selectionRules[0].condition": "spec.engine.type =="},
        "spec.selectionRules[0].condition",
        "does not compile as CEL",
    ),
    ("priority non-negative", IPC, {"spec.selectionRules[0].priority": -1}, "spec.selectionRules[0].priority", "must be at least 0"),
    (
        "engines unique",
        IPC,
        {"spec.capabilities.engines[1]": {"name": "vllm"}},
        "spec.capabilities.engines[1].name",
        'duplicate engine "vllm"',
    ),
    (
        "pool pattern placeholders",
        IPC,
        {"spec.capabilities.engines[0].gateway": {"managesInferencePool": True, "inferencePoolNamePattern": "{model}-pool"}},
        "spec.capabilities.engines[0].gateway.inferencePoolNamePattern",
        "unknown placeholder {model}",
    ),
    (
        "installation annotation JSON",
        IPC,
        {"metadata.annotations": {"airunway.ai/installation": "{not json"}},
        'metadata.annotations["airunway.ai/installation"]',
        "must be valid JSON",
    ),
    (
        "installation annotation shape",
        IPC,
        {"metadata.annotations": {"airunway.ai/installation": '{"steps": [{"command": "helm"}]}'}},
        'metadata.annotations["airunway.ai/installation"].steps[0].title',
        "required",
    ),
    # --- InferencePoolMember
    ("backend enum", MEMBER, {"spec.backend": "triton"}, "spec.backend", 'must be one of vllm-openai, echo (got "triton")'),
    (
        "apiVersion",
        MEMBER,
        {"apiVersion": "v1alpha1"},
        "apiVersion",
        "unsupported apiVersion 'v1alpha1'; this operator speaks 'airdress.co/v1alpha1'",
    ),
    ("models required", MEMBER, {"spec.models": DELETE}, "spec.models", "required"),
    ("url for vllm-openai", MEMBER, {"spec.url": DELETE}, "spec.url", "required for backend vllm-openai over transport http-direct"),
    ("url scheme", MEMBER, {"spec.url": "grpc://gpu:8000"}, "spec.url", "scheme must be http or https"),
    (
        "computeOperatorRef with operator-signal",
        MEMBER,
        {"spec.transport": "operator-signal"},
        "spec.computeOperatorRef",
        "required when transport is operator-signal",
    ),
    (
        "computeOperatorRef rejected with http-direct",
        MEMBER,
        {"spec.computeOperatorRef": "nas"},
        "spec.computeOperatorRef",
        "must not be set when transport is http-direct",
    ),
    ("transport enum", MEMBER, {"spec.transport": "wireguard"}, "spec.transport", "must be one of http-direct, operator-signal"),
    ("contextWindow uint32", MEMBER, {"spec.models[0].contextWindow": 2**32}, "spec.models[0].contextWindow", "must be at most 4294967295"),
    ("contextWindow integer", MEMBER, {"spec.models[0].contextWindow": 1.5}, "spec.models[0].contextWindow", "must be an integer"),
    ("model names unique", MEMBER, {"spec.models[1]": {"name": "qwen"}}, "spec.models[1].name", 'duplicate model "qwen"'),
    ("model name required", MEMBER, {"spec.models[0]": {"contextWindow": 5}}, "spec.models[0].name", "required"),
    ("unknown spec field", MEMBER, {"spec.weight": 3}, "spec.weight", "unknown field"),
    ("unknown model field", MEMBER, {"spec.models[0].alias": "q"}, "spec.models[0].alias", "unknown field"),
    ("unknown traits field", MEMBER, {"spec.traits": {"stateless": True}}, "spec.traits.stateless", "unknown field"),
    ("draining is a boolean", MEMBER, {"spec.draining": "yes"}, "spec.draining", "must be true or false"),
    ("secret ref name", MEMBER, {"spec.authSecretRef": "../../etc/passwd"}, "spec.authSecretRef", "must be a secret name"),
    ("member name has no slash", MEMBER, {"metadata.name": "a/b"}, "metadata.name", "must not contain '/'"),
    ("member name non-empty", MEMBER, {"metadata.name": ""}, "metadata.name", "must not be empty"),
    ("placeholder named", MEMBER, {"spec.backend": "PLACEHOLDER-backend"}, "spec.backend", "placeholder value still to be replaced"),
    ("kind known", MEMBER, {"kind": "InferencePool"}, "kind", 'unknown kind "InferencePool"'),
]


@pytest.mark.parametrize(("case", "base", "changes", "path", "words"), INVALID, ids=[c[0] + f" [{c[1]['kind']}]" for c in INVALID])
def test_invalid_manifest_is_refused_at_the_field(case: str, base: dict[str, Any], changes: dict[str, Any], path: str, words: str) -> None:
    verdict = admit(changed(base, changes))
    assert not verdict.ok
    matching = [p for p in verdict.problems if p.path == path]
    assert matching, f"{case}: no problem at {path}; got {[str(p) for p in verdict.problems]}"
    assert any(words in p.message for p in matching), f"{case}: {[p.message for p in matching]}"


VALID: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("plain member", MEMBER, {}),
    ("echo without url", MEMBER, {"spec": {"backend": "echo", "models": []}}),
    ("operator-signal without url", MEMBER, {"spec.url": DELETE, "spec.transport": "operator-signal", "spec.computeOperatorRef": "nas"}),
    (
        "nullable fields null",
        MEMBER,
        {"spec.caFileRef": None, "spec.transport": None, "spec.traits": None, "spec.models[0].contextWindow": None},
    ),
    (
        "member metadata from a get round-trips",
        MEMBER,
        {
            "metadata.generation": 3,
            "metadata.created_at": "2026-01-01T00:00:00Z",
            "metadata.namespace": "ignored",
            "metadata.resourceVersion": "41",
        },
    ),
    ("contextWindow 0 allowed", MEMBER, {"spec.models[0].contextWindow": 0}),
    ("http url on a LAN", MEMBER, {"spec.url": "http://192.168.1.20:8000"}),
    ("IPv6 url", MEMBER, {"spec.url": "https://[fd00::1]:8443"}),
    ("status is ignored on apply", MEMBER, {"status": {"phase": "Healthy"}}),
    ("eight volumes", MD, {VOL: [vol(name=f"v{i}", purpose="custom", claimName=f"c{i}", mountPath=f"/m{i}") for i in range(8)]}),
    ("one of each cache", MD, {VOL: [vol(name="a"), vol(name="b", purpose="compilationCache", claimName="c2")]}),
    (
        "sized volume",
        MD,
        {VOL: [{"name": "cache", "purpose": "modelCache", "size": "100Gi", "storageClassName": "", "accessMode": "ReadWriteOnce"}]},
    ),
    (
        "sized volume naming its generated claim",
        MD,
        {VOL: [{"name": "cache", "purpose": "modelCache", "size": "100Gi", "claimName": "qwen-cache"}]},
    ),
    ("custom source without id", MD, {"spec.model": {"source": "custom"}}),
    ("same image twice", MD, {"spec.image": "a:1", "spec.engine.image": "a:1"}),
    (
        "empty strings mean unset",
        MD,
        {"spec.image": "", "spec.engine.image": "x:1", "spec.provider": {"name": ""}, "spec.gateway": {"modelName": ""}},
    ),
    ("bare flag", MD, {"spec.engine.args": {"trust-remote-code": ""}, "spec.engine.extraArgs": ["--max-num-seqs", "64"]}),
    (
        "disaggregated",
        MD,
        {
            "spec.serving": {"mode": "disaggregated"},
            "spec.resources": DELETE,
            "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 2}, "replicas": 2}},
        },
    ),
    ("ceilings exactly", MD, {"spec.resources": {"gpu": {"count": 64}, "cpu": "512", "memory": "4Ti"}, "spec.scaling": {"replicas": 32}}),
    ("scale to zero", MD, {"spec.scaling": {"replicas": 0}}),
    (
        "allowed overrides",
        AD,
        {
            "spec.provider": {
                "overrides": {
                    "workload": {
                        "podSecurityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 1000,
                            "runAsGroup": 0,
                            "fsGroup": 0,
                            "supplementalGroups": [0, 10],
                            "fsGroupChangePolicy": "OnRootMismatch",
                            "seccompProfile": {"type": "RuntimeDefault"},
                        }
                    },
                    "container": {
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": False,
                            "capabilities": {"drop": ["ALL", "NET_RAW"]},
                            "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                        }
                    },
                }
            }
        },
    ),
    (
        "gateway endpoint binding",
        AD,
        {"spec.model": {"gatewayEndpoint": {"gatewayRef": {"name": "gw", "listenerName": "http"}, "modelName": "m"}}},
    ),
    (
        "external API binding",
        AD,
        {
            "spec.model": {
                "externalAPI": {
                    "type": "azureOpenAI",
                    "baseURL": "https://[::1]:8443/openai",
                    "modelName": "m",
                    "credentialsRef": {"name": "s", "key": "k"},
                }
            }
        },
    ),
    ("job lifecycle", AD, {"spec.lifecycle": "job"}),
    ("agent name 63", AD, {"metadata.name": "a" * 63}),
    ("container backend", APC, {"spec.capabilities": {"backend": "container", "writableRootFilesystem": True}}),
    ("no catalog", APC, {"metadata.annotations": {}}),
    (
        "provider with every annotation",
        IPC,
        {
            "metadata.annotations": {
                "airunway.ai/capabilities": '{"engines": [{"name": "vllm", "gpuSupport": true}]}',
                "airunway.ai/health": '{"crds": [{"name": "rayservices.ray.io"}], "operatorPods": [{"selectors": ["app=x"]}]}',
                "airunway.ai/installation": '{"description": "d", "steps": [{"title": "t", "command": "c"}]}',
            }
        },
    ),
]


@pytest.mark.parametrize(("case", "base", "changes"), VALID, ids=[c[0] + f" [{c[1]['kind']}]" for c in VALID])
def test_valid_manifest_is_admitted(case: str, base: dict[str, Any], changes: dict[str, Any]) -> None:
    verdict = admit(changed(base, changes))
    assert verdict.ok, f"{case}: {[str(p) for p in verdict.problems]}"


def _volume(doc: dict[str, Any]) -> Any:
    verdict = admit(doc)
    assert verdict.ok, [str(p) for p in verdict.problems]
    return verdict.obj.spec.model.storage.volumes[0]  # type: ignore[union-attr]


def test_cache_volumes_get_their_default_mount_path() -> None:
    assert _volume(changed(MD, {VOL: [vol()]})).mountPath == "/model-cache"
    assert _volume(changed(MD, {VOL: [vol(purpose="compilationCache")]})).mountPath == "/compilation-cache"


def test_sized_volume_defaults_claim_and_access_mode() -> None:
    volume = _volume(changed(MD, {VOL: [{"name": "cache", "purpose": "modelCache", "size": "10Gi"}]}))
    assert volume.claimName == "qwen-cache"
    assert volume.accessMode == "ReadWriteMany"


def test_empty_storage_class_is_kept_apart_from_absent() -> None:
    empty = _volume(changed(MD, {VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi", "storageClassName": ""}]}))
    absent = _volume(changed(MD, {VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi"}]}))
    assert empty.storageClassName == ""
    assert absent.storageClassName is None
    assert empty.wire()["storageClassName"] == ""
    assert "storageClassName" not in absent.wire()


def test_purpose_defaults_to_custom() -> None:
    assert _volume(changed(MD, {VOL: [{"name": "d", "claimName": "p", "mountPath": "/d"}]})).purpose == "custom"


def test_member_defaults() -> None:
    verdict = admit(changed(MEMBER, {"metadata.namespace": "team-a"}))
    member = verdict.obj
    assert member is not None
    assert member.spec.transport == "http-direct"  # type: ignore[attr-defined]
    assert member.spec.traits.supportsMultiConversation is True  # type: ignore[attr-defined]
    assert member.spec.draining is False and member.spec.authSecretRef == ""  # type: ignore[attr-defined]
    assert member.metadata.namespace is None  # type: ignore[attr-defined]


def test_webhook_defaults_for_model_deployment() -> None:
    md = admit(changed(MD, {"spec.resources": DELETE})).obj
    assert md is not None
    spec = md.spec  # type: ignore[attr-defined]
    assert spec.model.source == "huggingface"
    assert spec.serving.mode == "aggregated"
    assert spec.scaling.replicas == 1
    assert spec.resources.gpu.count == 1 and spec.resources.gpu.type == "nvidia.com/gpu"
    assert spec.engine.enablePrefixCaching is True


def test_legacy_image_suppresses_the_gpu_default() -> None:
    md = admit(changed(MD, {"spec.resources": DELETE, "spec.image": "custom:1"})).obj
    assert md is not None and md.spec.resources is None  # type: ignore[attr-defined]


def test_llamacpp_gets_no_gpu_default() -> None:
    md = admit(changed(MD, {"spec.resources": DELETE, "spec.engine.type": "llamacpp"})).obj
    assert md is not None and md.spec.resources is None  # type: ignore[attr-defined]


def test_every_problem_is_reported_not_just_the_first() -> None:
    verdict = admit(changed(MEMBER, {"spec.backend": "triton", "spec.weight": 1, "spec.models[0].contextWindow": -5}))
    assert {p.path for p in verdict.problems} == {"spec.backend", "spec.weight", "spec.models[0].contextWindow"}


def test_warnings_do_not_refuse() -> None:
    verdict = admit(changed(MD, {"spec.engine.trustRemoteCode": True}))
    assert verdict.ok
    assert any("trustRemoteCode" in w for w in verdict.warnings)


# --- update-time rules: the old object makes it an update


UPDATES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], str | None]] = [
    ("model id immutable", MD, {}, {"spec.model.id": "other/model"}, "spec.model.id"),
    (
        "serving mode immutable",
        MD,
        {},
        {
            "spec.serving": {"mode": "disaggregated"},
            "spec.resources": DELETE,
            "spec.scaling": {"prefill": {"gpu": {"count": 1}}, "decode": {"gpu": {"count": 1}}},
        },
        "spec.serving.mode",
    ),
    ("engine type immutable", MD, {}, {"spec.engine.type": "sglang"}, "spec.engine.type"),
    ("engine type may be set later", MD, {"spec.engine": {}}, {"spec.engine.type": "vllm"}, None),
    ("replicas may change", MD, {}, {"spec.scaling": {"replicas": 3}}, None),
    ("managed volume cannot be removed", MD, {VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi"}]}, {VOL: []}, VOL),
    (
        "managed volume cannot grow",
        MD,
        {VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi"}]},
        {VOL: [{"name": "c", "purpose": "modelCache", "size": "2Gi"}]},
        f"{VOL}[0]",
    ),
    (
        "1Gi equals 1024Mi",
        MD,
        {VOL: [{"name": "c", "purpose": "modelCache", "size": "1Gi"}]},
        {VOL: [{"name": "c", "purpose": "modelCache", "size": "1024Mi"}]},
        None,
    ),
    ("unmanaged volume may go", MD, {VOL: [vol()]}, {VOL: []}, None),
    ("framework immutable", AD, {}, {"spec.framework.name": "orka"}, "spec.framework.name"),
    ("backend immutable", APC, {}, {"spec.capabilities.backend": "container"}, "spec.capabilities.backend"),
    ("dotted names stay updatable", MD, {"metadata.name": "a.b"}, {"metadata.name": "a.b", "spec.scaling": {"replicas": 2}}, None),
]


@pytest.mark.parametrize(("case", "base", "old_changes", "new_changes", "path"), UPDATES, ids=[u[0] for u in UPDATES])
def test_update_rules(case: str, base: dict[str, Any], old_changes: dict[str, Any], new_changes: dict[str, Any], path: str | None) -> None:
    old_doc = changed(base, old_changes)
    old = admit(old_doc).obj
    if old is None:  # an object that predates admission (e.g. a dotted name created without the webhook)
        old = type(admit(base).obj).model_validate(old_doc)  # type: ignore[union-attr]
    verdict = admit(changed(old_doc, new_changes), old=old)
    if path is None:
        assert verdict.ok, [str(p) for p in verdict.problems]
    else:
        assert any(p.path == path for p in verdict.problems), [str(p) for p in verdict.problems]
