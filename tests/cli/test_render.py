"""`jetway render`: offline, through the real command, the same decisions the services make."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.contracts.cases import MD, changed
from tests.support.cli import run_jetway


def docs(text: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_render_examples_with_the_builtin_providers() -> None:
    result = run_jetway("render", "-f", "examples/modeldeployment-vllm.yaml", "-f", "examples/modeldeployment-kaito-cpu.yaml")
    assert result.returncode == 0, result.stderr
    assert "# ModelDeployment/default/qwen3-0-6b-vllm: provider vllm (explicit provider selection)" in result.stdout
    assert "# ModelDeployment/default/llama-cpu: provider kaito (matched capabilities: engine=llamacpp, gpu=false" in result.stdout
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs(result.stdout)]  # type: ignore[index]
    assert kinds == [
        ("PersistentVolumeClaim", "qwen3-0-6b-vllm-model-cache"),
        ("Job", "qwen3-0-6b-vllm-model-download"),
        ("Deployment", "qwen3-0-6b-vllm"),
        ("Service", "qwen3-0-6b-vllm"),
        ("Workspace", "llama-cpu"),
    ]
    assert all("ownerReferences" not in d["metadata"] for d in docs(result.stdout))  # type: ignore[operator]


def test_render_uses_given_providers_and_the_uid(tmp_path: Path) -> None:
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "airunway.ai/v1alpha1",
                "kind": "InferenceProviderConfig",
                "metadata": {"name": "llmd"},
                "spec": {"capabilities": {"engines": [{"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True}]}},
            }
        )
    )
    md = tmp_path / "md.json"
    md.write_text(json.dumps(changed(MD, {"metadata.uid": "1f2e3d4c-0000-4000-8000-000000000001"})))
    result = run_jetway("render", "-f", str(md), "--providers", str(providers))
    assert result.returncode == 0, result.stderr
    objects = docs(result.stdout)
    assert [o["kind"] for o in objects] == ["Deployment", "Service"]
    assert objects[0]["metadata"]["ownerReferences"][0]["uid"] == "1f2e3d4c-0000-4000-8000-000000000001"  # type: ignore[index]
    assert objects[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.9.1"  # type: ignore[index]


def test_render_says_why_it_cannot(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(changed(MD, {"spec.engine.type": "vllm", "spec.resources": {"gpu": {"count": 0}}})))
    result = run_jetway("render", "-f", str(cpu))
    assert result.returncode == 1
    assert (
        result.stderr.strip() == f"{cpu}: ModelDeployment/qwen: Validation failed: vllm engine requires GPU (set resources.gpu.count > 0)"
    )
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(changed(MD, {"spec.engine.type": "tgi"})))
    result = run_jetway("render", "-f", str(broken))
    assert result.returncode == 1 and 'spec.engine.type: Unsupported value: "tgi"' in result.stderr
    assert run_jetway("render").returncode == 2
    assert run_jetway("render", "-f", str(tmp_path / "missing.yaml")).returncode == 2


def test_render_refuses_a_provider_it_was_not_given_as_admission_refuses_it(tmp_path: Path) -> None:
    """With the providers known (the built-in ones, or --providers), an unknown `spec.provider.name` is refused with
    admission's words and path, not rendered as if some provider had been chosen."""
    named = tmp_path / "named.json"
    named.write_text(json.dumps(changed(MD, {"spec.provider": {"name": "nowhere"}, "spec.engine.type": "vllm"})))
    result = run_jetway("render", "-f", str(named))
    assert result.returncode == 1, result.stdout
    assert result.stderr.strip() == f'{named}: ModelDeployment/qwen: spec.provider.name: InferenceProviderConfig "nowhere" not found'
    assert result.stdout == ""
    known = tmp_path / "known.json"
    known.write_text(json.dumps(changed(MD, {"spec.provider": {"name": "vllm"}, "spec.engine.type": "vllm"})))
    assert run_jetway("render", "-f", str(known)).returncode == 0
