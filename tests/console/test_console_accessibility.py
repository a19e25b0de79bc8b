"""The console's accessibility and layout, in a real browser (chromium through Playwright).

Every page is audited with axe-core (bundled by the `axe-playwright-python` package and evaluated in the page by
Playwright: never served to users) and has no violation of impact serious or critical, at 1280 px and at a phone's
390 px, and in the states a user brings about (field errors, a dialog open, two events compared, an answer streamed).
A deployment is created from the form, opened, and its timeline replayed with the keyboard alone; every page is
reached from the header by the keyboard; every control the keyboard lands on shows an outline that stands out from
what is behind it and is not cut off; the skip link moves the keyboard past the header. Every page at 1280 px and at
390 px: no sideways scroll of the page, the same header, every navigation link on screen and uncovered.

Every wait is on a condition (`expect`, `eventually`), never on the clock."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.routing import RoutingRecord
from testbed.waiting import eventually
from tests.console.conftest import store_records
from tests.contracts.cases import MD, changed
from tests.support.stack import Stack, echo_member

pytest.importorskip("playwright", reason="the console's browser tests need the playwright package: pip install -e '.[test]'")
from playwright.async_api import expect

TIMEOUT = 20_000  # ms
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WIDE = 1280
NARROW = 390  # px: a phone held upright
BLOCKING = {"serious", "critical"}
NAV = [  # the header's links, in order: (name, the route it opens, the page's heading)
    ("Deployments", "#/deployments", "Deployments"),
    ("Create", "#/create", "Create a deployment"),
    ("Pool members", "#/members", "Pool members"),
    ("Providers", "#/providers", "Providers"),
    ("Agents", "#/agents", "Agents"),
    ("Playground", "#/playground", "Playground"),
]


async def seed(stack: Stack) -> None:
    """Something on every page: a deployment with its decisions, a served echo member, agent frameworks and agents."""
    status, body = await stack.apply(changed(MD, {"metadata.name": "audited"}))
    assert status == 201, body
    status, body = await stack.apply(echo_member("echo"))
    assert status == 201, body
    for file in ("agentproviderconfig-container.yaml", "agentdeployments.yaml"):
        for doc in yaml.safe_load_all((EXAMPLES / file).read_text()):
            status, body = await stack.apply(doc)
            assert status in (200, 201), (file, body)
    await eventually(lambda: stack.served("echo"), timeout=20, message="the echo member served")
    await eventually(lambda: _rendered(stack, "audited"), timeout=20, message="the deployment's workload rendered")
    # routing decisions for echo, as a router replica records them: one chosen, one refused for want of a member
    decided = RoutingRecord(
        at=1_700_000_000.0,
        model="echo",
        status=200,
        member="echo",
        candidates=("echo",),
        policy="prefix-cache",
        reason="only",
        key="team-a",
        tokens_in=9,
        tokens_out=3,
        ttft=0.012,
        elapsed=0.04,
        router="replica-a",
    )
    refused = RoutingRecord(at=1_700_000_001.0, model="echo", status=503, policy="prefix-cache", elapsed=0.001, router="replica-a")
    await store_records(stack.nats_url, [[decided, refused]])


async def _rendered(stack: Stack, name: str) -> bool:
    _, body = await stack.get(f"/v1/kinds/md/{name}/history?limit=1000")
    return any(e["type"] == "WorkloadRendered.v1" for e in body.get("events", []))


# Every page, with what it shows once its data has arrived (what the audit and the layout checks wait for), and the
# header link marked as the current page there.
PAGES: list[tuple[str, str, str, str]] = [
    ("deployments", "#/deployments", 'tr[data-name="audited"]', "Deployments"),
    ("detail", "#/deployments/default/audited", "table[aria-label=Conditions] tbody tr", "Deployments"),
    ("create", "#/create", ".verdict:not(:empty)", "Create"),
    ("timeline", "#/timeline/ModelDeployment/default/audited", "#state[data-seq]", "Deployments"),
    ("providers", "#/providers", 'tr[data-name="kaito"]', "Providers"),
    ("provider", "#/providers/kaito", "table[aria-label='CRD checks']", "Providers"),
    ("agents", "#/agents", 'tr[data-name="personal-assistant"]', "Agents"),
    ("members", "#/members", 'tr[data-name="echo"] [data-phase="Healthy"]', "Pool members"),
    ("routing", "#/routing/echo", "table[aria-label='Routing decisions for echo'] tbody tr", "Pool members"),
    ("routing, no model", "#/routing", "#routing-model", "Pool members"),
    ("playground", "#/playground", '#model option[value="echo"]', "Playground"),
]


async def open_page(page: Any, stack: Stack, route: str, ready: str) -> None:
    await page.goto(f"{stack.api_url}/ui/{route}")
    await expect(page.locator(ready).first).to_be_attached(timeout=TIMEOUT)


# --- the audit ---------------------------------------------------------------------------------


async def audit(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is now: every rule axe runs by default (WCAG 2.x A and AA, best practice)."""
    from axe_playwright_python.async_playwright import Axe

    results = await Axe().run(page)
    return list(results.response["violations"])


def described(where: str, violations: list[dict[str, Any]]) -> list[str]:
    return [
        f"{where}: {v['id']} ({v['impact']}): {v['help']}: "
        + "; ".join(f"{' '.join(n['target'])}: {n.get('failureSummary', '')} {n['html'][:200]}" for n in v["nodes"][:5])
        for v in violations
    ]


async def test_every_page_passes_an_accessibility_audit(page: Any, stack: Stack) -> None:
    pytest.importorskip(
        "axe_playwright_python", reason="the audit runs axe-core from the axe-playwright-python package: pip install -e '.[test]'"
    )
    await seed(stack)
    blocking: list[str] = []
    reported: list[str] = []

    async def check(where: str) -> None:
        violations = await audit(page)
        blocking.extend(described(where, [v for v in violations if v["impact"] in BLOCKING]))
        reported.extend(described(where, [v for v in violations if v["impact"] not in BLOCKING]))

    async def check_dialog(route: str, ready: str, button: str, where: str) -> None:
        """Open the page, open its dialog with `button`, audit it, and close it with Escape."""
        await open_page(page, stack, route, ready)
        await page.get_by_role("button", name=button).click()
        await expect(page.get_by_role("dialog")).to_be_visible()
        await check(where)
        await page.keyboard.press("Escape")
        await expect(page.get_by_role("dialog")).to_be_hidden()

    for width in (WIDE, NARROW):
        await page.set_viewport_size({"width": width, "height": 800})
        for name, route, ready, _ in PAGES:
            await open_page(page, stack, route, ready)
            await check(f"{name} at {width} px")

    # the states a user brings about: field errors, a confirmation dialog, two events compared, an answer streamed
    await page.set_viewport_size({"width": WIDE, "height": 800})
    await open_page(page, stack, "#/create", ".verdict:not(:empty)")
    await page.get_by_label("Name", exact=True).fill("Not_A_Valid_Name")
    await page.get_by_label("Replicas").fill("many")
    await expect(page.locator('.field-error[data-field="name"]')).not_to_be_empty(timeout=TIMEOUT)
    await check("create, with errors")
    detail = ("#/deployments/default/audited", "table[aria-label=Conditions] tbody tr")
    await check_dialog(*detail, "Delete…", "detail, the delete dialog open")
    await open_page(page, stack, "#/timeline/ModelDeployment/default/audited", "#state[data-seq]")
    await page.get_by_role("button", name="Compare from this event").click()
    await page.get_by_role("slider").focus()
    await page.keyboard.press("Home")
    await expect(page.get_by_role("table", name="Changes").locator("tbody tr").first).to_be_visible(timeout=TIMEOUT)
    await check("timeline, comparing two events")
    await check_dialog("#/members", 'tr[data-name="echo"] [data-phase="Healthy"]', "Drain echo", "members, the drain dialog open")
    await open_page(page, stack, "#/playground", '#model option[value="echo"]')
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator("#answer")).to_have_attribute("data-done", "true", timeout=TIMEOUT)
    await check("playground, an answer streamed")

    for line in reported:  # moderate and minor: shown in pytest's warnings summary, not failed
        warnings.warn(f"accessibility: {line}", stacklevel=1)
    assert not blocking, "axe-core found serious or critical violations:\n" + "\n".join(blocking)


# --- the keyboard --------------------------------------------------------------------------------

# What the user sees of the focus: the focused control on screen, with an outline (or a shadow) 3:1 or more against
# what is right behind the outline, not cut off by a box that clips its overflow. Null when so, else what is wrong.
FOCUS_SHOWN = """() => {
  const el = document.activeElement;
  if (!el || el === document.body || el.id === "main") return null; // <main> takes the focus only to move it there
  const rgba = (text) => {
    const n = (text.match(/[\\d.]+/g) || []).map(Number);
    return n.length >= 3 ? [n[0], n[1], n[2], n.length > 3 ? n[3] : 1] : [0, 0, 0, 0];
  };
  const linear = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const luminance = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  const contrast = (a, b) => { const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const text = (el.getAttribute("aria-label") || el.textContent || el.value || "").trim().slice(0, 40);
  const name = `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""} "${text}"`;
  const box = el.getBoundingClientRect();
  if (box.width === 0 || box.height === 0 || box.right <= 0 || box.bottom <= 0 || box.left >= innerWidth || box.top >= innerHeight) {
    return `${name}: focused but not on screen (${JSON.stringify(box)})`;
  }
  const style = getComputedStyle(el);
  const width = parseFloat(style.outlineWidth) || 0;
  if (style.outlineStyle === "none" || width < 2) {
    return style.boxShadow !== "none" ? null : `${name}: no focus indicator (outline ${style.outlineStyle} ${style.outlineWidth})`;
  }
  const reach = width + (parseFloat(style.outlineOffset) || 0);
  // the colour right behind the outline: sampled in its band, left of the control (right of it at the screen's edge)
  const x = box.left - reach + width / 2 >= 0 ? box.left - reach + width / 2 : box.right + reach - width / 2;
  const y = box.top + box.height / 2;
  let behind = null;
  for (const under of document.elementsFromPoint(x, y)) {
    if (el.contains(under)) continue;
    const colour = rgba(getComputedStyle(under).backgroundColor);
    if (colour[3] > 0) { behind = colour; break; }
  }
  behind ??= rgba(getComputedStyle(document.documentElement).backgroundColor);
  if (behind[3] === 0) behind = [255, 255, 255, 1];
  const ratio = contrast(rgba(style.outlineColor), behind);
  if (ratio < 3) return `${name}: its outline ${style.outlineColor} is ${ratio.toFixed(2)}:1 on rgb(${behind.slice(0, 3)}), under 3:1`;
  for (let clip = el.parentElement; clip && clip !== document.documentElement && clip !== document.body; clip = clip.parentElement) {
    const s = getComputedStyle(clip);
    if (s.overflowX === "visible" && s.overflowY === "visible") continue;
    const c = clip.getBoundingClientRect();
    const [left, top] = [c.left + clip.clientLeft, c.top + clip.clientTop];
    const [right, bottom] = [left + clip.clientWidth, top + clip.clientHeight];
    const inside = box.left - reach >= left - 0.5 && box.top - reach >= top - 0.5;
    if (!inside || box.right + reach > right + 0.5 || box.bottom + reach > bottom + 0.5) {
      return `${name}: its outline is cut off by ${clip.tagName.toLowerCase()}.${clip.className}`;
    }
  }
  return null;
}"""


async def tab_to(page: Any, target: Any, *, backwards: bool = False, limit: int = 60) -> int:
    """Tab (Shift+Tab backwards) until `target` has the focus, checking that every control on the way shows it.

    Answers how many presses it took."""
    key = "Shift+Tab" if backwards else "Tab"
    for presses in range(1, limit + 1):
        await page.keyboard.press(key)
        problem = await page.evaluate(FOCUS_SHOWN)
        assert problem is None, problem
        if await target.evaluate("el => el === document.activeElement"):
            return presses
    raise AssertionError(f"{key} never reached {target} in {limit} presses")


async def test_a_deployment_is_created_opened_and_replayed_with_the_keyboard_alone(page: Any, stack: Stack) -> None:
    await expect(page).to_have_url(f"{stack.api_url}/ui/", timeout=TIMEOUT)
    await expect(page.get_by_role("status")).to_contain_text("Live: 0 deployments", timeout=TIMEOUT)

    # the header's Create link; the keyboard lands on the new page's content, then on its first field
    await tab_to(page, page.get_by_role("navigation").get_by_role("link", name="Create"))
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/create")
    await expect(page.locator("main")).to_be_focused()
    name = page.get_by_label("Name", exact=True)
    await expect(page.locator(".verdict")).to_contain_text("Valid", timeout=TIMEOUT)
    assert await tab_to(page, name) == 1
    await page.keyboard.press("Control+A")
    await page.keyboard.type("by-keyboard")
    engine = page.get_by_label("Engine")
    await tab_to(page, engine)
    await page.keyboard.press("ArrowDown")  # a closed select steps through its options with the arrows
    await expect(engine).to_have_value("vllm")
    gpus = page.get_by_label("GPUs per replica")
    await tab_to(page, gpus)
    await page.keyboard.press("Control+A")
    await page.keyboard.type("2")
    preview = page.locator("#preview")
    await expect(preview).to_contain_text("name: by-keyboard")
    await expect(preview).to_contain_text("type: vllm")
    await expect(preview).to_contain_text("count: 2")
    await expect(page.locator(".verdict")).to_contain_text("Valid: would create", timeout=TIMEOUT)
    create = page.get_by_role("button", name="Create", exact=True)
    await tab_to(page, create)
    await page.keyboard.press("Space")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/deployments/default/by-keyboard", timeout=TIMEOUT)
    _, view = await stack.get("/v1/kinds/md/by-keyboard")
    assert view["spec"]["engine"]["type"] == "vllm" and view["spec"]["resources"]["gpu"]["count"] == 2

    # its detail: Delete… opens the dialog on Cancel, Escape closes it and gives the focus back
    await expect(page.locator("main")).to_be_focused()
    delete = page.get_by_role("button", name="Delete…")
    await tab_to(page, delete)
    await page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    await expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    await expect(delete).to_be_focused()
    assert (await stack.get("/v1/kinds/md/by-keyboard"))[0] == 200

    # its timeline, once the services decided: the slider moves with the arrows, Home and End
    await eventually(lambda: _rendered(stack, "by-keyboard"), timeout=20, message="the workload rendered")
    await tab_to(page, page.get_by_role("link", name="Timeline"), backwards=True)
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/timeline/ModelDeployment/default/by-keyboard")
    label = page.locator("#as-of-label")
    rows = page.get_by_role("table", name="Events").locator("tbody tr")
    state = page.locator("#state")
    await expect(label).to_have_text(re.compile(r"^As of event (\d+) of \1: .*WorkloadRendered\.v1"), timeout=TIMEOUT)
    await tab_to(page, page.get_by_role("slider"))
    await page.keyboard.press("Home")  # the spec alone: no decision yet
    await expect(label).to_contain_text("As of event 1 of")
    await expect(rows.first).to_have_class("current")
    await expect(state).to_have_attribute("data-seq", await rows.first.get_attribute("data-seq") or "", timeout=TIMEOUT)
    await expect(state).to_contain_text("generation: 1")
    await expect(state).not_to_contain_text("provider:")
    await page.keyboard.press("ArrowRight")  # the first decision taken
    await expect(label).to_contain_text("As of event 2 of")
    await expect(rows.nth(1)).to_have_class("current")
    await expect(state).to_have_attribute("data-seq", await rows.nth(1).get_attribute("data-seq") or "", timeout=TIMEOUT)
    await page.keyboard.press("ArrowLeft")
    await expect(label).to_contain_text("As of event 1 of")
    await page.keyboard.press("End")
    await expect(label).to_have_text(re.compile(r"^As of event (\d+) of \1: .*WorkloadRendered\.v1"))
    await expect(rows.last).to_have_class("current")
    await expect(state).to_have_attribute("data-seq", await rows.last.get_attribute("data-seq") or "", timeout=TIMEOUT)
    await expect(state).to_contain_text("reason: ResourceCreated")  # the workload rendered, as of the last event

    # and back to the deployment
    await tab_to(page, page.get_by_role("link", name="Back"), backwards=True)
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/deployments/default/by-keyboard")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("by-keyboard")


async def test_the_skip_link_and_every_page_from_the_header_by_keyboard(page: Any, stack: Stack) -> None:
    await expect(page).to_have_url(f"{stack.api_url}/ui/", timeout=TIMEOUT)
    await expect(page.get_by_role("status")).to_contain_text("Live: 0 deployments", timeout=TIMEOUT)

    # the first Tab shows the skip link; Enter moves the keyboard past the header, on the same page
    skip = page.get_by_role("link", name="Skip to content")
    assert await tab_to(page, skip) == 1
    await expect(skip).to_be_in_viewport()
    await page.keyboard.press("Enter")
    await expect(page.locator("main")).to_be_focused()
    await expect(page).to_have_url(f"{stack.api_url}/ui/")
    await page.keyboard.press("Tab")
    await expect(page.locator("main").get_by_role("link", name="Create", exact=True)).to_be_focused()

    # each page from the header's links: Shift+Tab back into the header, Enter; the page opens with its title
    nav = page.get_by_role("navigation", name="Pages")
    for link_name, route, heading in NAV:
        link = nav.get_by_role("link", name=link_name)
        await tab_to(page, link, backwards=True)
        await page.keyboard.press("Enter")
        await expect(page).to_have_url(f"{stack.api_url}/ui/{route}")
        await expect(link).to_have_attribute("aria-current", "page")
        await expect(nav.locator("[aria-current]")).to_have_count(1)
        await expect(page.get_by_role("heading", level=1)).to_have_text(heading, timeout=TIMEOUT)
        await expect(page).to_have_title(f"{heading} · Jetway console")
        await expect(page.locator("main")).to_be_focused()

    # from a list to an item: Tab to a provider's link, Enter
    await tab_to(page, nav.get_by_role("link", name="Providers"), backwards=True)
    await page.keyboard.press("Enter")
    kaito = page.get_by_role("link", name="kaito", exact=True)
    await expect(kaito).to_be_visible(timeout=TIMEOUT)  # the rows come with the page's event stream, a moment later
    await tab_to(page, kaito)
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/providers/kaito")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("KAITO", timeout=TIMEOUT)
    await expect(page).to_have_title("Provider kaito · Jetway console")


async def test_a_models_routing_decisions_are_asked_and_read_with_the_keyboard_alone(page: Any, stack: Stack) -> None:
    await seed(stack)
    await open_page(page, stack, "#/routing", "#routing-model")
    await expect(page.get_by_role("status")).to_contain_text("Name a model")
    model = page.get_by_label("Model", exact=True)
    await tab_to(page, model)
    await page.keyboard.type("echo")
    await page.keyboard.press("Enter")  # the form's Show
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/routing/echo")
    await expect(page.get_by_role("status")).to_contain_text("2 decisions for echo", timeout=TIMEOUT)
    rows = page.get_by_role("table", name="Routing decisions for echo").locator("tbody tr")
    await expect(rows.first.locator('[data-col="status"]')).to_have_text("503")  # the newest arrival first
    await expect(rows.nth(1).locator('[data-col="reason"]')).to_have_text("only")
    await expect(rows.nth(1).locator('[data-col="key"]')).to_have_text("team-a")
    refresh = page.get_by_role("button", name="Refresh now")
    await tab_to(page, refresh)
    await page.keyboard.press("Enter")
    await expect(rows).to_have_count(2)
    member = rows.nth(1).get_by_role("link", name="echo")
    await tab_to(page, member)  # the table's box scrolls: its member links are reached and shown in turn
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/timeline/InferencePoolMember//echo")


# --- the layout --------------------------------------------------------------------------------

# What the eye checks of a page: does it scroll sideways; the header (its links and look); is each header link on
# screen and the thing under its middle; the look of the page's heading and body text.
LAYOUT = """() => {
  const header = document.querySelector("header");
  const look = (el) => {
    const s = getComputedStyle(el);
    return [s.fontFamily, s.fontSize, s.fontWeight, s.color, s.backgroundColor].join(" ");
  };
  const links = [...header.querySelectorAll("a, button")];
  return {
    scrollWidth: document.scrollingElement.scrollWidth,
    innerWidth,
    innerHeight,
    header: links.map((a) => [a.tagName, a.textContent.trim(), a.getAttribute("href"), look(a)]).concat([[look(header)]]),
    headerHeight: header.getBoundingClientRect().height,
    current: [...header.querySelectorAll("nav [aria-current=page]")].map((a) => a.textContent.trim()),
    hidden: links.filter((a) => {
      const r = a.getBoundingClientRect();
      const under = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
      return r.width === 0 || r.left < 0 || r.right > innerWidth || !(under && a.contains(under));
    }).map((a) => a.textContent.trim()),
    look: [look(document.querySelector("main h1")), look(document.querySelector("main")), look(document.body)],
  };
}"""


async def test_every_page_fits_a_wide_and_a_narrow_screen_with_the_same_header(page: Any, stack: Stack) -> None:
    await seed(stack)
    for width in (WIDE, NARROW):
        await page.set_viewport_size({"width": width, "height": 800})
        first: dict[str, Any] | None = None
        for name, route, ready, current in PAGES:
            await open_page(page, stack, route, ready)
            seen = await page.evaluate(LAYOUT)
            where = f"{name} at {width} px"
            assert seen["scrollWidth"] <= seen["innerWidth"], f"{where}: the page scrolls sideways ({seen['scrollWidth']} px wide)"
            assert not seen["hidden"], f"{where}: header links off screen or covered: {seen['hidden']}"
            assert seen["current"] == [current], f"{where}: the current page in the header is {seen['current']}"
            assert seen["headerHeight"] <= seen["innerHeight"] / 4, f"{where}: the header takes {seen['headerHeight']} px"
            first = first or seen
            assert seen["header"] == first["header"], f"{where}: the header differs from the deployments page's"
            assert seen["look"] == first["look"], f"{where}: the heading or text looks unlike the deployments page's"

    # on the phone, the header's links work as they are
    await page.get_by_role("navigation").get_by_role("link", name="Agents").click()
    await expect(page).to_have_url(f"{stack.api_url}/ui/#/agents")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Agents")
