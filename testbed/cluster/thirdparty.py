"""Other projects' CRDs, taken from their own Go modules (which ship the CRD YAML) through the Go
module proxy, instead of stand-ins.

Served and used: the Gateway API, the Gateway API Inference Extension and KubeRay. KAITO,
Dynamo and kagent publish no module the proxy serves (checked: each answered 403 "not
available"), so their CRDs stay the stand-ins of testbed/kubeapi.py.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster.build import BuildFailed, go_binary

GATEWAY_API = ("sigs.k8s.io/gateway-api", "v1.6.3")
# AI Runway's pin; the newest release served (v1.6 made endpointPickerRef optional and moved InferenceObjective
# out) judges the rendered pools too (tests/kube/test_rendered_objects_accepted.py)
INFERENCE_EXTENSION = ("sigs.k8s.io/gateway-api-inference-extension", "v1.5.0")
INFERENCE_EXTENSION_NEWEST = ("sigs.k8s.io/gateway-api-inference-extension", "v1.6.2")
INFERENCE_POOL_CRD = "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"
KUBERAY = ("github.com/ray-project/kuberay/ray-operator", "v1.5.0")

# (kind's group/plural) → (module, path of its CRD inside the module)
UPSTREAM: dict[str, tuple[tuple[str, str], str]] = {
    "gatewayclasses.gateway.networking.k8s.io": (GATEWAY_API, "config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml"),
    "gateways.gateway.networking.k8s.io": (GATEWAY_API, "config/crd/standard/gateway.networking.k8s.io_gateways.yaml"),
    "httproutes.gateway.networking.k8s.io": (GATEWAY_API, "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"),
    "referencegrants.gateway.networking.k8s.io": (GATEWAY_API, "config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml"),
    "inferencepools.inference.networking.k8s.io": (INFERENCE_EXTENSION, INFERENCE_POOL_CRD),
    "rayservices.ray.io": (KUBERAY, "config/crd/bases/ray.io_rayservices.yaml"),
}


@cache
def module_dir(module: str, version: str) -> Path:
    """The module's folder in Go's module cache, downloading it through the proxy once."""
    go = go_binary()
    if go is None:
        raise BuildFailed(f"Go is needed to fetch {module}@{version}'s CRDs from its module")
    found = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True, timeout=300)
    info = json.loads(found.stdout or "{}")
    if found.returncode != 0 or "Dir" not in info:
        raise BuildFailed(f"go mod download {module}@{version}: {info.get('Error') or found.stderr.strip()}")
    return Path(info["Dir"])


def upstream_crd(name: str, release: tuple[str, str] | None = None) -> dict[str, Any]:
    """The CRD `name` (plural.group) as its project publishes it (in `release`, else the pinned one)."""
    (module, version), path = UPSTREAM[name]
    if release is not None:
        module, version = release
    documents = [d for d in yaml.safe_load_all((module_dir(module, version) / path).read_text()) if d]
    crd = next(d for d in documents if d.get("kind") == "CustomResourceDefinition")
    assert crd["metadata"]["name"] == name, f"{path} holds {crd['metadata']['name']}, not {name}"
    return dict(crd)


def gateway_api_crds() -> list[dict[str, Any]]:
    return [upstream_crd(n) for n in UPSTREAM if n.endswith("gateway.networking.k8s.io") or n.startswith("inferencepools.")]
