"""The create form's storage volumes in a real browser (chromium through Playwright): each volume a group of fields,
checked by the API's dry run (the rules of `jetway validate`), each error under the field it names, then created.

Every wait is on a condition (Playwright's `expect`, or `eventually` on the API), never on the clock."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.waiting import eventually
from tests.support.stack import Stack

pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
from playwright.async_api import expect

TIMEOUT = 20_000  # ms


async def _rendered(stack: Stack, name: str) -> bool:
    async with stack.http.get(f"{stack.api_url}/v1/console/rendered/md/{name}", headers=stack.auth) as response:
        return "# recorded by the workload service" in await response.text()


async def test_a_deployment_with_a_storage_volume_from_the_form(page: Any, stack: Stack) -> None:
    await page.goto(f"{stack.api_url}/ui/#/create")
    await page.get_by_label("Name", exact=True).fill("from-form")
    await page.get_by_label("Engine").select_option("vllm")
    verdict = page.locator(".verdict")
    await expect(verdict).to_contain_text("Valid: would create", timeout=TIMEOUT)

    # the first volume is a model cache, with a size: Jetway creates its PVC
    await page.get_by_role("button", name="Add volume").click()
    first = page.get_by_role("group", name="Volume 1")
    await expect(first.get_by_label("Volume name")).to_be_focused()
    await expect(first.get_by_label("Purpose")).to_have_value("modelCache")
    size = first.get_by_label("Size")

    # a size that is no quantity: the API's message, in place, under the size
    await size.fill("ten gigs")
    size_error = first.locator('.field-error[data-volume-field="size"]')
    await expect(size_error).to_contain_text("must be a Kubernetes quantity such as '100Gi'", timeout=TIMEOUT)
    await expect(size).to_have_attribute("aria-invalid", "true")
    await expect(verdict).to_be_empty()
    await expect(page.locator("#field-name-error")).to_be_empty()  # no other field is blamed
    await expect(page.locator(".form > .errors")).to_be_empty()

    await size.fill("20Gi")
    storage_class = first.get_by_label("Storage class")
    await storage_class.fill('""')  # typed as two quotes: storageClassName "" (no dynamic provisioning), not left out
    preview = page.locator("#preview")
    await expect(preview).to_contain_text('storageClassName: ""')
    await storage_class.fill("fast-ssd")
    await first.get_by_label("Access mode").select_option("ReadWriteOnce")
    await expect(size_error).to_be_empty(timeout=TIMEOUT)
    await expect(size).not_to_have_attribute("aria-invalid", "true")
    await expect(verdict).to_contain_text("Valid: would create", timeout=TIMEOUT)
    await expect(preview).to_contain_text("storageClassName: fast-ssd")
    await expect(preview).to_contain_text("accessMode: ReadWriteOnce")

    # a second volume, custom: without a mount path the error goes to that volume's mount path, not the first's
    await page.get_by_role("button", name="Add volume").click()
    second = page.get_by_role("group", name="Volume 2")
    await expect(second.get_by_label("Purpose")).to_have_value("custom")
    await second.get_by_label("Mount path").fill("")
    mount_error = second.locator('.field-error[data-volume-field="mountPath"]')
    await expect(mount_error).to_contain_text("mountPath is required when purpose is custom", timeout=TIMEOUT)
    await expect(second.get_by_label("Mount path")).to_have_attribute("aria-invalid", "true")
    await expect(first.locator('.field-error[data-volume-field="mountPath"]')).to_be_empty()
    await page.get_by_role("button", name="Remove volume 2").click()
    await expect(second).to_have_count(0)
    await expect(page.get_by_role("button", name="Add volume")).to_be_focused()
    await expect(verdict).to_contain_text("Valid: would create", timeout=TIMEOUT)

    await page.get_by_role("button", name="Create").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/deployments/default/from-form", timeout=TIMEOUT)
    _, view = await stack.get("/v1/kinds/md/from-form")
    assert view["spec"]["model"]["storage"]["volumes"] == [
        {
            "name": "model-cache",
            "purpose": "modelCache",
            "claimName": "from-form-model-cache",
            "mountPath": "/model-cache",
            "readOnly": False,
            "size": "20Gi",
            "storageClassName": "fast-ssd",
            "accessMode": "ReadWriteOnce",
        }
    ]
    # the page shows the volume, and once rendered its PVC (the rendered objects follow the deployment, no reload)
    await expect(page.locator('[data-volume="model-cache"]')).to_contain_text("modelCache, 20Gi, claim from-form-model-cache")
    await eventually(lambda: _rendered(stack, "from-form"), timeout=20, message="workload rendered")
    rendered = page.get_by_role("region", name="Rendered objects (YAML)")
    await expect(rendered).to_contain_text("kind: PersistentVolumeClaim", timeout=TIMEOUT)
    await expect(rendered).to_contain_text("storageClassName: fast-ssd")
    await expect(rendered).to_contain_text("# recorded by the workload service", timeout=TIMEOUT)
