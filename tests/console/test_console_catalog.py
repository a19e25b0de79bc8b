"""The console's Providers and Agents pages in a real browser (chromium through Playwright).

The example manifests (examples/) are applied through the stack's apply API, then the pages are read as a user
reads them: the provider's row, its rules by priority, an install command whose button copies it, the CRD checks
(not checked in standalone; found or missing once the watcher has recorded what a cluster serves), the agent
frameworks with their install instructions, the catalog, and each agent's resolved base URL. Every wait is on a
condition (`expect`, `eventually`), never on the clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from contracts.cluster import DISCOVERY, ApisDiscovered
from contracts.subjects import WATCHER
from runtime.service import Runner
from testbed.waiting import eventually
from tests.console.conftest import screenshot
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, running_binding

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - the browser fixture skips the browser tests, saying how to get playwright
    expect = None  # type: ignore[assignment]

TIMEOUT = 20_000  # ms
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KAGENT_INSTALL = "helm install kagent oci://ghcr.io/kagent-dev/kagent/helm/kagent --namespace kagent --create-namespace"
KAGENT = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "AgentProviderConfig",
    "metadata": {"name": "kagent", "annotations": {"airunway.ai/install-instructions": KAGENT_INSTALL}},
    "spec": {"capabilities": {"backend": "crd", "requiresOperator": True, "operatorAPIGroup": "kagent.dev"}},
}
# bound by reference to the example ModelDeployment: its base URL is the model's Service
HELPER = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "AgentDeployment",
    "metadata": {"name": "helper", "namespace": "default"},
    "spec": {"framework": {"name": "openclaw"}, "model": {"deploymentRef": {"name": "qwen3-0-6b-vllm"}}},
}


async def apply_examples(stack: Stack, *files: str) -> None:
    for file in files:
        for doc in yaml.safe_load_all((EXAMPLES / file).read_text()):
            status, body = await stack.apply(doc)
            assert status in (200, 201), (file, body)


@pytest.fixture
async def binding(nats: NatsEndpoint, stack: Stack) -> AsyncIterator[Runner]:
    """The binding service beside the stack (as `jetway up` runs it), so agents get a resolved model binding."""
    async with running_binding(nats.url) as runner:
        yield runner


async def no_horizontal_overflow(page: Any) -> None:
    """At a phone's width the page itself never scrolls sideways (wide tables and commands scroll in their boxes)."""
    await page.set_viewport_size({"width": 420, "height": 800})
    widths = await page.evaluate("() => [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]")
    assert max(widths[:2]) <= widths[2], f"the page overflows sideways at 420 px: {widths}"


async def test_discovery_is_not_checked_in_standalone_and_needs_a_credential(stack: Stack) -> None:
    assert await stack.get("/v1/console/discovery") == (200, {"checked": False, "served": []})
    async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{stack.api_url}/v1/console/discovery") as answer:
        assert answer.status == 401


async def test_the_providers_page_shows_readiness_rules_install_steps_and_crd_checks(page: Any, stack: Stack) -> None:
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.api_url)
    await apply_examples(stack, "inferenceproviderconfig-external.yaml")
    await eventually(lambda: _rules_checked(stack, "acme-serve"), timeout=20, message="the selector checked acme-serve's rules")
    await page.goto(f"{stack.api_url}/ui/#/providers")
    await expect(page.get_by_role("link", name="Providers")).to_have_attribute("aria-current", "page")

    table = page.get_by_role("table", name="InferenceProviderConfigs")
    acme = table.locator('tr[data-name="acme-serve"]')
    await expect(acme).to_contain_text("Acme Serve", timeout=TIMEOUT)
    await expect(acme.locator("td").nth(2)).to_have_text("Ready")
    await expect(acme.locator("td").nth(3)).to_have_text("RulesValid")
    await expect(acme.locator("td").nth(5)).to_have_text("acme-serve:v1.4.0")
    await expect(table.locator('tr[data-name="kaito"]')).to_be_visible()  # the built-in providers, registered at start-up
    await expect(page.locator("main")).not_to_contain_text("null")
    await screenshot(page, "providers")

    # the external provider: one engine, one rule, no install steps
    await acme.get_by_role("link", name="acme-serve").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/providers/acme-serve")
    vllm = page.get_by_role("table", name="Engines").locator('tr[data-engine="vllm"]')
    await expect(vllm).to_contain_text("aggregated")
    await expect(vllm.locator("td").nth(2)).to_have_text("yes")  # GPU
    await expect(vllm.locator("td").nth(3)).to_have_text("no")  # CPU
    rule = page.get_by_role("table", name="Selection rules").locator('tr[data-priority="200"]')
    await expect(rule).to_contain_text("spec.resources.gpu.count >= 8")
    await expect(page.locator('[data-condition="SelectionRulesValid"]')).to_contain_text("every selection rule compiles")
    await expect(page.get_by_text("No install steps")).to_be_visible()

    # a built-in provider: install commands that copy, CRD checks not invented in standalone
    await page.goto(f"{stack.api_url}/ui/#/providers/kaito")
    install = page.get_by_role("region", name="Install steps")
    await expect(install).to_contain_text("helm repo add kaito https://kaito-project.github.io/kaito/charts/kaito")
    step = install.get_by_role("button", name="Copy command: Install the KAITO workspace operator")
    command = await step.get_attribute("data-copy")
    assert command is not None and command.startswith("helm upgrade --install kaito-workspace kaito/workspace")
    await step.focus()
    await page.keyboard.press("Enter")  # a real button: the keyboard copies as the mouse does
    await expect(install.get_by_role("status").filter(has_text="Copied")).to_have_count(1)
    assert await page.evaluate("() => navigator.clipboard.readText()") == command
    await install.get_by_role("button", name="Copy helm repo kaito").click()
    # the copy lands when the clipboard's promise settles: wait for it, not for the click
    await page.wait_for_function(
        "text => navigator.clipboard.readText().then(found => found === text)",
        arg="helm repo add kaito https://kaito-project.github.io/kaito/charts/kaito",
        timeout=TIMEOUT,
    )

    crd = page.get_by_role("table", name="CRD checks").locator('tr[data-crd="workspaces.kaito.sh"]')
    await expect(crd.locator("[data-found]")).to_have_text("not checked in standalone")
    await page.evaluate("() => window.scrollTo(0, 0)")
    await screenshot(page, "provider")
    await no_horizontal_overflow(page)

    # once the watcher has recorded what a cluster serves, the checks say which CRDs were found
    await stack.watcher.service.record(DISCOVERY, ApisDiscovered(resources=("kaito.sh/v1beta1/workspaces", "v1/pods")), WATCHER)
    await page.set_viewport_size({"width": 1280, "height": 800})
    await page.reload()
    await expect(crd.locator("[data-found]")).to_have_text("found", timeout=TIMEOUT)
    await page.goto(f"{stack.api_url}/ui/#/providers/dynamo")
    missing = page.get_by_role("table", name="CRD checks").locator('tr[data-crd="dynamographdeployments.nvidia.com"]')
    await expect(missing.locator("[data-found]")).to_have_text("missing", timeout=TIMEOUT)

    # its rules, highest priority first (the API has them in the provider's order)
    priorities = page.get_by_role("table", name="Selection rules").locator("tbody tr")
    shown = [int(p) for p in await priorities.evaluate_all("rows => rows.map(r => r.dataset.priority)")]
    dynamo = (await stack.get("/v1/kinds/ipc/dynamo"))[1]
    assert shown == sorted((r.get("priority", 0) for r in dynamo["spec"]["selectionRules"]), reverse=True) == [100, 100, 90, 50]
    await expect(priorities.nth(2)).to_contain_text("spec.serving.mode == 'disaggregated'")


async def _rules_checked(stack: Stack, name: str) -> bool:
    _, view = await stack.get(f"/v1/kinds/ipc/{name}")
    return any(c["type"] == "SelectionRulesValid" for c in view.get("status", {}).get("conditions", []))


async def test_the_agents_page_shows_frameworks_the_catalog_and_each_binding(page: Any, stack: Stack, binding: Runner) -> None:
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.api_url)
    await apply_examples(stack, "modeldeployment-vllm.yaml", "agentproviderconfig-container.yaml", "agentdeployments.yaml")
    status, body = await stack.apply(KAGENT)
    assert status == 201, body
    status, body = await stack.apply(HELPER)
    assert status == 201, body
    await eventually(lambda: _bound(stack, "helper"), timeout=20, message="helper's model binding resolved")
    await eventually(lambda: _assessed(stack, "kagent"), timeout=20, message="kagent assessed")

    await page.goto(f"{stack.api_url}/ui/#/agents")
    frameworks = page.get_by_role("table", name="AgentProviderConfigs")
    await expect(frameworks.locator('tr[data-name="openclaw"]').locator("td").nth(2)).to_have_text("Ready", timeout=TIMEOUT)
    kagent = frameworks.locator('tr[data-name="kagent"]')
    await expect(kagent.locator("td").nth(2)).to_have_text("Not ready")
    await expect(kagent.locator("td").nth(3)).to_contain_text("OperatorNotInstalled")
    instructions = page.get_by_role("region", name="Install kagent")
    await expect(instructions).to_contain_text(KAGENT_INSTALL)
    await instructions.get_by_role("button", name="Copy install instructions for kagent").click()
    await expect(instructions.get_by_role("status")).to_have_text("Copied")
    assert await page.evaluate("() => navigator.clipboard.readText()") == KAGENT_INSTALL

    entry = page.get_by_role("table", name="Agent catalog").locator('tr[data-entry="personal-assistant"]')
    await expect(entry).to_contain_text("Personal assistant")
    await expect(entry).to_contain_text("ghcr.io/ai-runway/openclaw-agent:latest")
    await expect(entry.locator("td").nth(2)).to_have_text("openclaw")

    agents = page.get_by_role("table", name="AgentDeployments")
    helper = agents.locator('tr[data-name="helper"]')
    await expect(helper.locator("[data-binding]")).to_have_text("deploymentRef")
    await expect(helper.locator("[data-base-url]")).to_have_text("http://qwen3-0-6b-vllm.default.svc.cluster.local:8000/v1")
    await expect(helper.locator("[data-phase]")).to_have_attribute("data-phase", "Deploying")
    external = agents.locator('tr[data-name="personal-assistant"]')
    await expect(external.locator("[data-binding]")).to_have_text("externalAPI")
    await expect(external.locator("[data-base-url]")).to_have_text("https://api.openai.com/v1")
    waiting = agents.locator('tr[data-name="sre-bot"]')  # kagent is not installed: no binding yet, and the page says why
    await expect(waiting.locator("[data-phase]")).to_have_attribute("data-phase", "Pending")
    await expect(waiting).to_contain_text("not resolved")
    await expect(page.locator("main")).not_to_contain_text("null")
    await screenshot(page, "agents")

    # keyboard: the agent's name is a link to its timeline
    await helper.get_by_role("link", name="helper").focus()
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/timeline/AgentDeployment/default/helper")
    await page.go_back()
    await expect(agents).to_be_visible(timeout=TIMEOUT)
    await no_horizontal_overflow(page)


async def _bound(stack: Stack, name: str) -> bool:
    _, view = await stack.get(f"/v1/kinds/agentdeployment/{name}")
    return bool(view.get("status", {}).get("modelBinding", {}).get("baseURL"))


async def _assessed(stack: Stack, name: str) -> bool:
    _, view = await stack.get(f"/v1/kinds/apc/{name}")
    return view.get("status", {}).get("ready") is not None
