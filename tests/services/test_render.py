"""Each provider's rendering against golden files (reviewed by hand), plus the rules of the vLLM args.

Regenerate the golden files after an intended change with JETWAY_UPDATE_GOLDEN=1, then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.objects import child_name
from contracts.pipeline import StoragePlanned
from contracts.subjects import Key
from services.storage.decide import plan
from services.workload import render
from services.workload.render.common import Inputs, RenderError
from tests.contracts.cases import DELETE, MD, changed

GOLDEN = Path(__file__).parent / "golden"
CORE = {"Deployment", "Service", "PersistentVolumeClaim", "Job"}
KUBERNETES = "1.37.0"


def inputs(
    changes: dict[str, Any], engine: str = "vllm", *, gateway: bool = False, uid: str = "0d1f3a52-5b2e-4f2b-9f6c-8d7d0c1e2f3a"
) -> Inputs:
    verdict = admit(changed(MD, changes))
    assert isinstance(verdict.obj, ModelDeployment), verdict.problems
    key = Key("ModelDeployment", verdict.obj.metadata.namespace or "default", verdict.obj.metadata.name)
    storage = plan(verdict.obj, key, 1, uid)
    assert isinstance(storage, StoragePlanned)
    return Inputs(key, uid, verdict.obj, engine, storage, gateway)


STORAGE = {
    "spec.model.storage.volumes": [
        {"name": "model-cache", "purpose": "modelCache", "size": "50Gi"},
        {"name": "compile", "purpose": "compilationCache", "claimName": "shared-compile"},
    ]
}
DISAGG = {
    "spec.resources": DELETE,
    "spec.serving": {"mode": "disaggregated"},
    "spec.scaling": {"prefill": {"replicas": 2, "gpu": {"count": 2}}, "decode": {"replicas": 1, "gpu": {"count": 4}, "memory": "80Gi"}},
}
CASES: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    "vllm-full": (
        "vllm",
        {
            **STORAGE,
            "spec.model.servedName": "qwen-small",
            "spec.engine": {
                "type": "vllm",
                "image": "vllm/vllm-openai:v0.11.0",
                "contextLength": 8192,
                "trustRemoteCode": True,
                "args": {"gpu-memory-utilization": "0.9", "enable-chunked-prefill": ""},
                "extraArgs": ["--max-num-seqs", "64"],
            },
            "spec.resources": {"gpu": {"count": 2}, "memory": "48Gi", "cpu": "8"},
            "spec.scaling": {"replicas": 2},
            "spec.secrets": {"huggingFaceToken": "hf-token"},
            "spec.env": [{"name": "HF_TOKEN", "value": "literal"}, {"name": "LOG", "value": "1"}],
            "spec.podTemplate": {"metadata": {"labels": {"team": "ml", "app": "evil"}, "annotations": {"prometheus.io/scrape": "true"}}},
            "spec.nodeSelector": {"gpu": "h100"},
            "spec.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "spec.provider": {
                "name": "vllm",
                "overrides": {
                    "workload": {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1000}},
                    "container": {"securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}},
                },
            },
        },
        "vllm",
        False,
    ),
    "vllm-minimal": ("vllm", {}, "vllm", False),
    "llmd-aggregated": (
        "llmd",
        {
            "spec.engine.enablePrefixCaching": False,
            "spec.resources": {"gpu": {"count": 1}, "memory": "24Gi"},
            "spec.secrets": {"huggingFaceToken": "hf"},
        },
        "vllm",
        False,
    ),
    "llmd-disaggregated": ("llmd", DISAGG, "vllm", False),
    "dynamo-aggregated": ("dynamo", {**STORAGE, "spec.engine.contextLength": 4096}, "vllm", False),
    "dynamo-aggregated-gateway": ("dynamo", {"spec.engine.contextLength": 4096}, "vllm", True),
    "dynamo-disaggregated-sglang": ("dynamo", {**DISAGG, "spec.engine": {"type": "sglang", "contextLength": 16384}}, "sglang", True),
    "kaito-vllm": ("kaito", {"spec.model.id": "qwen2.5-7b-instruct"}, "vllm", False),
    "kaito-llamacpp": (
        "kaito",
        {
            "spec.model": {"id": "Llama-3.2-1B", "source": "custom"},
            "spec.engine": {"type": "llamacpp"},
            "spec.image": "ghcr.io/kaito-project/aikit/llama3.2:1b",
            "spec.resources": {"cpu": "4", "memory": "8Gi"},
        },
        "llamacpp",
        False,
    ),
    "kuberay": (
        "kuberay",
        {
            "spec.resources": {"gpu": {"count": 2, "type": "amd.com/gpu"}, "memory": "64Gi"},
            "spec.scaling": {"replicas": 2},
            "spec.engine": {"type": "vllm", "contextLength": 8192, "args": {"dtype": "bfloat16"}},
        },
        "vllm",
        False,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_rendered_object_carries_ai_runways_label_and_jetways(case: str) -> None:
    """AI Runway's `airunway.ai/managed-by: airunway` (user tooling selects on it) and the standard label naming
    Jetway as the controller, on every object; the user's pod-template labels reach the Deployment's and the
    RayService's own metadata without replacing either (upstream TestTransformer pod-template label cases)."""
    provider, changes, engine, gateway = CASES[case]
    changes = {**changes, "spec.podTemplate": {"metadata": {"labels": {"team": "a", "airunway.ai/managed-by": "mine"}}}}
    for obj in render.render(provider, inputs(changes, engine, gateway=gateway)):
        labels = obj["metadata"]["labels"]
        assert (labels["airunway.ai/managed-by"], labels["app.kubernetes.io/managed-by"]) == ("airunway", "jetway"), obj["kind"]
        if obj["kind"] in ("Deployment", "RayService"):
            assert labels["team"] == "a"


@pytest.mark.parametrize("case", list(CASES))
def test_rendering_matches_the_reviewed_golden_file(case: str) -> None:
    provider, changes, engine, gateway = CASES[case]
    objects = render.render(provider, inputs(changes, engine, gateway=gateway))
    text = yaml.safe_dump_all(objects, sort_keys=False)
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("JETWAY_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{case} differs from {path}; if intended, regenerate with JETWAY_UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_core_objects_are_valid_kubernetes(case: str) -> None:
    provider, changes, engine, gateway = CASES[case]
    given = inputs(changes, engine, gateway=gateway)
    objects = [*(given.storage.objects if given.storage else ()), *render.render(provider, given)]
    for obj in objects:
        if obj["kind"] in CORE:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(objects[0]["spec"]["template"]["spec"]["containers"][0])


def test_vllm_args_order_and_user_flags_win() -> None:
    args = container(
        render.render(
            "vllm", inputs({"spec.model.servedName": "my-alias", "spec.engine.contextLength": 4096, "spec.engine.trustRemoteCode": True})
        )
    )["args"]
    assert args[:6] == ["--host", "0.0.0.0", "--port", "8000", "--model", "Qwen/Qwen3-0.6B"]
    assert args[6:] == ["--served-model-name", "my-alias", "--max-model-len", "4096", "--trust-remote-code", "--enable-prefix-caching"]
    tail = container(
        render.render(
            "vllm",
            inputs(
                {
                    "spec.engine.args": {"zeta": "last", "alpha": "first"},
                    "spec.engine.extraArgs": ["--raw-flag", "raw-value", "--second-raw"],
                }
            ),
        )
    )["args"]
    assert tail[-7:] == ["--alpha", "first", "--zeta", "last", "--raw-flag", "raw-value", "--second-raw"]
    tp = container(render.render("vllm", inputs({"spec.resources.gpu.count": 2, "spec.engine.args": {"tensor-parallel-size": "4"}})))[
        "args"
    ]
    assert tp.count("--tensor-parallel-size") == 1 and tp[tp.index("--tensor-parallel-size") + 1] == "4"
    via_extra = container(
        render.render("vllm", inputs({"spec.resources.gpu.count": 2, "spec.engine.extraArgs": ["--tensor-parallel-size=4"]}))
    )
    assert "--tensor-parallel-size" not in via_extra["args"] and "--tensor-parallel-size=4" in via_extra["args"]


@pytest.mark.parametrize(
    "changes",
    [{"spec.engine.args": {"port": "9000"}}, {"spec.engine.extraArgs": ["--host=1.2.3.4"]}, {"spec.engine.extraArgs": ["--port"]}],
)
def test_vllm_owns_host_and_port(changes: dict[str, Any]) -> None:
    with pytest.raises(RenderError, match="conflicts with Direct vLLM generated networking"):
        render.render("vllm", inputs(changes))


def test_vllm_gpus_shm_and_hf_token() -> None:
    two = render.render("vllm", inputs({"spec.resources.gpu.count": 2}))
    spec = two[0]["spec"]["template"]["spec"]
    assert spec["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "20Gi"}}]
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    one = container(render.render("vllm", inputs({})))
    assert "volumeMounts" not in one
    token = container(
        render.render("vllm", inputs({"spec.env": [{"name": "HF_TOKEN", "value": "literal"}], "spec.secrets": {"huggingFaceToken": "hf"}}))
    )["env"]
    assert token == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}}]


def test_selector_labels_cannot_be_overridden_and_scale_to_zero_is_zero() -> None:
    objects = render.render(
        "vllm", inputs({"spec.podTemplate": {"metadata": {"labels": {"app": "evil"}}}, "spec.scaling": {"replicas": 0}})
    )
    template = objects[0]["spec"]["template"]["metadata"]["labels"]
    assert template["app"] == "qwen" and objects[0]["spec"]["replicas"] == 0


def test_renderers_refuse_what_their_provider_cannot_run() -> None:
    with pytest.raises(RenderError, match="requires GPU"):
        render.render("vllm", inputs({"spec.resources": {"gpu": {"count": 0}}}))
    with pytest.raises(RenderError, match="KAITO does not support sglang"):
        render.render("kaito", inputs({"spec.engine.type": "sglang"}, "sglang"))
    with pytest.raises(RenderError, match="requires an image"):
        render.render("kaito", inputs({"spec.engine.type": "llamacpp", "spec.resources": DELETE}, "llamacpp"))
    with pytest.raises(RenderError, match="does not render for provider"):
        render.render("acme", inputs({}))


def test_offline_render_has_no_owner_references_without_a_uid() -> None:
    objects = render.render("vllm", inputs({}, uid=""))
    assert all("ownerReferences" not in o["metadata"] for o in objects)


def test_dynamo_volume_mounts_carry_only_the_fields_dynamo_knows() -> None:
    """Dynamo's VolumeMount is name, mountPoint, useAsCompilationCache: a read-only claim cannot say so there."""
    shared = [{"name": "cache", "purpose": "modelCache", "claimName": "shared", "readOnly": True}]
    worker = render.render("dynamo", inputs({"spec.model.storage.volumes": shared}))[0]["spec"]["services"]["VllmWorker"]
    assert worker["volumeMounts"] == [{"name": "shared", "mountPoint": "/model-cache"}]


def test_names_derived_from_the_longest_admitted_name_still_name_a_service() -> None:
    longest, sibling = "m" * 63, "m" * 62 + "n"
    objects = render.render("llmd", inputs({**DISAGG, "metadata.name": longest}))
    names = [o["metadata"]["name"] for o in objects]
    assert all(len(n) <= 63 and n[0].isalpha() and n[-1].isalnum() for n in names), names
    assert names[0].endswith("-decode") and render.endpoint("llmd", inputs({**DISAGG, "metadata.name": longest}))["service"] == names[2]
    assert child_name(longest, "-epp") != child_name(sibling, "-epp")  # cut to the same prefix, told apart by the hash
    assert child_name("qwen", "-epp") == "qwen-epp"  # names that fit are left as they were
