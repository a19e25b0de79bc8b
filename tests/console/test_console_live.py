"""The deployment, Providers and Agents pages follow the API's watch (`GET /v1/watch`): a change made through the API
while a page is open shows on it with no reload. A reload would lose a mark left on `window`, so each test checks the
mark is still there at the end.

Every wait is on a condition (Playwright's `expect`, or `eventually` on the API), never on the clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime.service import Runner
from testbed.waiting import eventually
from tests.console.test_console_catalog import HELPER, apply_examples
from tests.contracts.cases import MD, changed
from tests.support.nats import NatsEndpoint
from tests.support.stack import Stack, next_sse_event, running_binding

pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
from playwright.async_api import expect

TIMEOUT = 20_000  # ms
ACME = {
    "apiVersion": "airunway.ai/v1alpha1",
    "kind": "InferenceProviderConfig",
    "metadata": {"name": "acme-serve", "annotations": {"airunway.ai/display-name": "Acme Serve"}},
    "spec": {"capabilities": {"engines": [{"name": "vllm", "servingModes": ["aggregated"], "gpuSupport": True}]}},
    "status": {"ready": True, "version": "acme-serve:v1.4.0"},
}


async def mark(page: Any) -> None:
    await page.evaluate("() => { window.jetwayNotReloaded = true; }")


async def not_reloaded(page: Any) -> None:
    assert await page.evaluate("() => window.jetwayNotReloaded === true"), "the page was reloaded"


@pytest.fixture
async def binding(nats: NatsEndpoint, stack: Stack) -> AsyncIterator[Runner]:
    """The binding service beside the stack (as `jetway up` runs it), so agents get a resolved model binding."""
    async with running_binding(nats.url) as runner:
        yield runner


async def test_the_deployment_page_follows_its_phase_conditions_and_objects(page: Any, stack: Stack) -> None:
    cpu_only = {"metadata.name": "live", "spec.engine": {"type": "trtllm"}, "spec.resources": {"gpu": {"count": 0}}}
    status, body = await stack.apply(changed(MD, cpu_only))
    assert status == 201, body
    await page.goto(f"{stack.api_url}/ui/#/deployments/default/live")
    live = page.locator('.detail [role="status"]')
    await expect(live).to_have_text("Live: updated as it changes", timeout=TIMEOUT)
    phase = page.locator("h1 [data-phase]")
    await expect(phase).to_have_attribute("data-phase", "Failed", timeout=TIMEOUT)
    validated = page.get_by_role("table", name="Conditions").locator('tr[data-type="Validated"] td')
    await expect(validated.nth(1)).to_have_text("False", timeout=TIMEOUT)
    rendered = page.get_by_role("region", name="Rendered objects (YAML)")
    await expect(rendered).to_have_text("# nothing recorded for ModelDeployment/live yet")
    await mark(page)

    # fixed through the API while the page is open: the phase, the conditions, the facts and the objects follow
    status, body = await stack.apply(changed(MD, {**cpu_only, "spec.resources": {"gpu": {"count": 1}}}))
    assert status == 200, body
    await expect(phase).to_have_attribute("data-phase", "Pending", timeout=TIMEOUT)
    await expect(validated.nth(1)).to_have_text("True", timeout=TIMEOUT)
    await expect(validated.nth(2)).to_have_text("ValidationPassed")
    await expect(page.locator('[data-fact="Generation"]')).to_have_text("2 (observed 2)", timeout=TIMEOUT)
    await expect(page.locator('[data-fact="Provider"]')).not_to_have_text("auto", timeout=TIMEOUT)
    routing = page.locator('[data-fact="Routing"] a')  # the model's routing decisions, by the name the router knows it by
    await expect(routing).to_have_attribute("href", f"#/routing/{MD['spec']['model']['id'].replace('/', '%2F')}")
    await expect(rendered).to_contain_text("# recorded by the workload service", timeout=TIMEOUT)

    # and its deletion
    await stack.delete("/v1/kinds/md/live")
    await expect(live).to_have_text("Deleted: this deployment no longer exists.", timeout=TIMEOUT)
    await not_reloaded(page)


async def _rules_checked(stack: Stack, name: str) -> bool:
    _, view = await stack.get(f"/v1/kinds/ipc/{name}")
    return any(c["type"] == "SelectionRulesValid" for c in view.get("status", {}).get("conditions", []))


async def test_the_providers_pages_follow_each_config(page: Any, stack: Stack) -> None:
    await page.goto(f"{stack.api_url}/ui/#/providers")
    table = page.get_by_role("table", name="InferenceProviderConfigs")
    await expect(table.locator('tr[data-name="kaito"]')).to_be_visible(timeout=TIMEOUT)  # built in, registered at start-up
    live = page.locator('main .live[role="status"]')
    await expect(live).to_contain_text("Live: ", timeout=TIMEOUT)
    await mark(page)

    # a provider applied while the list is open: its row appears, then its rules are checked by the selector
    status, body = await stack.apply(ACME)
    assert status == 201, body
    acme = table.locator('tr[data-name="acme-serve"]')
    await expect(acme.locator("td").nth(1)).to_have_text("Acme Serve", timeout=TIMEOUT)
    await expect(acme.locator("td").nth(2)).to_have_text("Ready")
    await expect(acme.locator("td").nth(3)).to_have_text("RulesValid", timeout=TIMEOUT)
    await eventually(lambda: _rules_checked(stack, "acme-serve"), timeout=20, message="acme-serve's rules checked")
    status, body = await stack.apply(changed(ACME, {"status.ready": False}))
    assert status == 200, body
    await expect(acme.locator("td").nth(2)).to_have_text("Not ready", timeout=TIMEOUT)

    # its page: the readiness and the version it reports follow it
    await acme.get_by_role("link", name="acme-serve").click()
    await expect(page.locator("h1 [data-state]")).to_have_text("Not ready", timeout=TIMEOUT)
    status, body = await stack.apply(changed(ACME, {"status.version": "acme-serve:v1.5.0"}))
    assert status == 200, body
    await expect(page.locator("h1 [data-state]")).to_have_text("Ready", timeout=TIMEOUT)
    await expect(page.locator(".facts")).to_contain_text("acme-serve:v1.5.0")
    await stack.delete("/v1/kinds/ipc/acme-serve")
    await expect(page.locator('main [role="status"]')).to_have_text("Deleted: this provider's config no longer exists.", timeout=TIMEOUT)

    await page.get_by_role("link", name="← Providers").click()
    await expect(table.locator('tr[data-name="kaito"]')).to_be_visible(timeout=TIMEOUT)
    await expect(acme).to_have_count(0)
    await not_reloaded(page)


async def _bound(stack: Stack, name: str) -> bool:
    _, view = await stack.get(f"/v1/kinds/agentdeployment/{name}")
    return bool(view.get("status", {}).get("modelBinding", {}).get("baseURL"))


async def test_the_agents_page_follows_frameworks_and_agents(page: Any, stack: Stack, binding: Runner) -> None:
    await page.goto(f"{stack.api_url}/ui/#/agents")
    await expect(page.get_by_text("No AgentDeployment applied yet.")).to_be_visible(timeout=TIMEOUT)
    await mark(page)

    # the framework, its catalog and an agent bound to a deployment, applied while the page is open
    await apply_examples(stack, "modeldeployment-vllm.yaml", "agentproviderconfig-container.yaml")
    frameworks = page.get_by_role("table", name="AgentProviderConfigs")
    await expect(frameworks.locator('tr[data-name="openclaw"] td').nth(2)).to_have_text("Ready", timeout=TIMEOUT)
    await expect(page.get_by_role("table", name="Agent catalog").locator('tr[data-entry="personal-assistant"]')).to_be_visible()
    status, body = await stack.apply(HELPER)
    assert status == 201, body
    helper = page.get_by_role("table", name="AgentDeployments").locator('tr[data-name="helper"]')
    await expect(helper.locator("[data-binding]")).to_have_text("deploymentRef", timeout=TIMEOUT)
    await eventually(lambda: _bound(stack, "helper"), timeout=20, message="helper's model binding resolved")
    base_url = "http://qwen3-0-6b-vllm.default.svc.cluster.local:8000/v1"
    await expect(helper.locator("[data-base-url]")).to_have_text(base_url, timeout=TIMEOUT)
    await expect(page.get_by_text("No AgentDeployment applied yet.")).to_be_hidden()

    await stack.delete("/v1/kinds/agentdeployment/helper?namespace=default")
    await expect(helper).to_have_count(0, timeout=TIMEOUT)
    await not_reloaded(page)


async def test_the_watch_of_one_resource_sends_nothing_about_the_others(stack: Stack) -> None:
    await stack.apply(changed(MD, {"metadata.name": "mine"}))
    await stack.apply(changed(MD, {"metadata.name": "other"}))
    url = f"{stack.api_url}/v1/watch?kind=ModelDeployment&namespace=default&name=mine"
    async with stack.http.get(url, headers=stack.auth) as response:
        assert response.status == 200

        kind, snapshot = await next_sse_event(response)
        assert kind == "snapshot" and [i["metadata"]["name"] for i in snapshot["items"]] == ["mine"]
        # the other one changes first, then this one: the first change sent is this one's
        await stack.apply(changed(MD, {"metadata.name": "other", "spec.scaling": {"replicas": 2}}))
        await stack.apply(changed(MD, {"metadata.name": "mine", "spec.scaling": {"replicas": 3}}))
        while True:
            kind, item = await next_sse_event(response)
            assert kind == "changed" and item["metadata"]["name"] == "mine", item["metadata"]["name"]
            if item["spec"].get("scaling", {}).get("replicas") == 3:
                break
