"""`jetway up` hands the renderers the provider settings its environment sets (KAITO's AIRUNWAY_KAITO_*),
as the one-service workload process does: a real process, seen through `jetway render md/NAME`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from services.workload.render import kaito
from testbed.waiting import eventually
from tests.cli.test_up import jetway, start_up

GPU_SKU = "Standard_NC24ads_A100_v4"
MANIFEST = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "phi", "namespace": "default"},
    "spec": {
        "model": {"id": "microsoft/Phi-3-mini-4k-instruct"},
        "engine": {"type": "vllm"},
        "provider": {"name": "kaito"},
        "resources": {"gpu": {"count": 1}},
    },
}


async def test_up_passes_the_kaito_node_auto_provisioning_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kaito.NODE_AUTO_PROVISIONING, "true")
    monkeypatch.setenv(kaito.GPU_INSTANCE_TYPE, GPU_SKU)
    data = tmp_path / "jetway"
    up = await start_up(data)
    try:
        manifest = tmp_path / "md.yaml"
        manifest.write_text(yaml.safe_dump(MANIFEST))
        code, _, err = await jetway(data, "apply", "-f", str(manifest))
        assert code == 0, err
        workspaces: list[dict[str, object]] = []

        async def rendered() -> bool:
            code, out, _ = await jetway(data, "render", "md/phi")
            if code != 0:
                return False
            workspaces[:] = [d for d in yaml.safe_load_all(out) if isinstance(d, dict) and d.get("kind") == "Workspace"]
            return bool(workspaces)

        await eventually(rendered, timeout=60, interval=0.5, message="the Workspace recorded")
        resource = workspaces[0]["resource"]
        assert isinstance(resource, dict) and resource.get("instanceType") == GPU_SKU, up.text
    finally:
        assert await up.stop() == 0, up.text
