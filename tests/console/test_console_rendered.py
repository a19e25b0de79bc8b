"""The deployment page's rendered objects are the YAML `jetway render` prints, byte for byte.

Three texts about one deployment (with a model cache, so the storage service records a PVC and a download Job whose
pod template repeats the Job's labels):
- `jetway render md/NAME` (the real command, against the stack's API): the recorded objects;
- `GET /v1/console/rendered/md/NAME`, the route the page reads, and what the page shows: the same bytes;
- `jetway render -f` of the deployment's manifest with its stored uid (offline: the same decisions, made again): the
  same documents, byte for byte; only the comment lines differ (one says how the provider was chosen, the other
  which service recorded each object).

Every wait is on a condition (`eventually`, Playwright's `wait_for_function`), never on the clock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from cli.config import ClientConfig
from contracts import yamlstream
from testbed.waiting import eventually
from tests.contracts.cases import MD, changed
from tests.support.cli import run_jetway
from tests.support.stack import Stack

TIMEOUT = 20_000  # ms
# The provider is named: chosen automatically, the selector picks among the providers it knows when it decides, and
# a stack just started may not have registered every built-in provider yet (offline, `jetway render -f` knows them all).
CACHED = changed(
    MD,
    {
        "metadata.name": "cached",
        "spec.provider": {"name": "vllm"},
        "spec.model.storage": {"volumes": [{"name": "cache", "purpose": "modelCache", "size": "10Gi", "storageClassName": "fast"}]},
    },
)


def uncommented(text: str) -> str:
    """The documents of a YAML stream without the comment lines between them (every object is a mapping, so a line
    that starts with # at the margin is a comment)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


async def rendered(stack: Stack, name: str, namespace: str = "default") -> tuple[int, str, str]:
    url = f"{stack.api_url}/v1/console/rendered/md/{name}?namespace={namespace}"
    async with stack.http.get(url, headers=stack.auth) as response:
        return response.status, response.content_type, (await response.read()).decode()


async def recorded_by_both(stack: Stack, name: str) -> str | None:
    """The route's text once the storage and the workload services have both recorded their objects."""
    _, _, text = await rendered(stack, name)
    return text if "# recorded by the storage service" in text and "# recorded by the workload service" in text else None


def client_config(stack: Stack, directory: Path) -> str:
    ClientConfig(stack.api_url, stack.router_url, stack.token, stack.nats_url).write(directory)
    return str(directory)


def test_the_dumper_writes_no_aliases() -> None:
    labels = {"app": "x"}
    job = {"metadata": {"labels": labels}, "spec": {"template": {"metadata": {"labels": labels}}}}
    text = yamlstream.dump(job)
    assert "&" not in text and "*" not in text
    assert text == yamlstream.dump(json.loads(json.dumps(job)))  # the same objects read back from JSON: the same bytes
    assert yamlstream.documents([job, {"a": 1}]) == f"---\n{text}---\na: 1\n"
    assert yamlstream.recorded("ModelDeployment", "x", {}) == "# nothing recorded for ModelDeployment/x yet\n"


async def test_the_route_is_the_text_of_jetway_render_md_name_and_the_offline_render_has_the_same_objects(
    stack: Stack, tmp_path: Path
) -> None:
    status, body = await stack.apply(CACHED)
    assert status == 201, body
    text = await eventually(lambda: recorded_by_both(stack, "cached"), timeout=20, message="storage and workload recorded")
    status, content_type, again = await rendered(stack, "cached")
    assert (status, content_type) == (200, "application/yaml")

    # the command, as a user runs it, against the same API: the same bytes
    data_dir = client_config(stack, tmp_path / "jetway")
    command = await asyncio.to_thread(run_jetway, "render", "md/cached", "-n", "default", "--data-dir", data_dir)
    assert command.returncode == 0, command.stderr
    assert command.stdout.encode() == text.encode() == again.encode()
    assert command.stdout.startswith("# recorded by the storage service\n---\napiVersion: v1\nkind: PersistentVolumeClaim\n")
    assert "&id" not in text and "*id" not in text

    # offline, from the deployment's manifest with its stored uid: the same documents, byte for byte
    _, view = await stack.get("/v1/kinds/md/cached")
    manifest = tmp_path / "cached.yaml"
    manifest.write_text(yaml.safe_dump(changed(CACHED, {"metadata.uid": view["metadata"]["uid"]}), sort_keys=False))
    offline = await asyncio.to_thread(run_jetway, "render", "-f", str(manifest))
    assert offline.returncode == 0, offline.stderr
    assert uncommented(offline.stdout).encode() == uncommented(text).encode()
    comments = [line for line in offline.stdout.splitlines() if line.startswith("#")]
    assert view["status"]["provider"]["name"] == "vllm"
    assert len(comments) == 1 and comments[0].startswith("# ModelDeployment/default/cached: provider vllm (explicit provider selection)")
    kinds = [d["kind"] for d in yaml.safe_load_all(text) if d]
    assert kinds[:2] == ["PersistentVolumeClaim", "Job"] and len(kinds) > 2
    pvc = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "fast" and pvc["metadata"]["ownerReferences"][0]["uid"] == view["metadata"]["uid"]


async def test_the_route_says_when_nothing_was_recorded_and_answers_like_the_api(stack: Stack, tmp_path: Path) -> None:
    # a deployment that fails validation gets no objects: the route says so, as the command does
    cpu_only = {"metadata.name": "cpu", "spec.engine": {"type": "trtllm"}, "spec.resources": {"gpu": {"count": 0}}}
    status, _ = await stack.apply(changed(MD, cpu_only))
    assert status == 201
    _, _, text = await rendered(stack, "cpu")
    assert text == "# nothing recorded for ModelDeployment/cpu yet\n"
    command = await asyncio.to_thread(run_jetway, "render", "md/cpu", "--data-dir", client_config(stack, tmp_path / "jetway"))
    assert command.stdout == text
    status, content_type, body = await rendered(stack, "missing")
    assert status == 404 and content_type == "application/json" and json.loads(body)["code"] == "not_found"
    async with stack.http.get(f"{stack.api_url}/v1/console/rendered/nope/x", headers=stack.auth) as response:
        assert response.status == 404 and (await response.json())["code"] == "unknown_kind"
    async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{stack.api_url}/v1/console/rendered/md/cpu") as response:
        assert response.status == 401


async def test_the_deployment_page_shows_the_same_bytes(page: Any, stack: Stack) -> None:
    status, body = await stack.apply(CACHED)
    assert status == 201, body
    text = await eventually(lambda: recorded_by_both(stack, "cached"), timeout=20, message="storage and workload recorded")
    await page.goto(f"{stack.api_url}/ui/#/deployments/default/cached")
    shown = page.get_by_role("region", name="Rendered objects (YAML)")
    await shown.wait_for(timeout=TIMEOUT)
    await page.wait_for_function("expected => document.getElementById('rendered').textContent === expected", arg=text, timeout=TIMEOUT)
    assert (await shown.text_content()) == text
    await page.get_by_text("jetway render md/cached -n default").wait_for(timeout=TIMEOUT)
