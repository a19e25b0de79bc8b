// The console's shell: a hash router over the pages; each page renders into <main> and returns its cleanup.
import { request, LoggedOut } from "./api.js";
import * as deployments from "./deployments.js";
import * as timeline from "./timeline.js";
import * as playground from "./playground.js";
import * as providers from "./providers.js";
import * as agents from "./agents.js";
import * as members from "./members.js";
import * as routing from "./routing.js";

// [pattern, the nav link marked current, the page, the window's title]
const ROUTES = [
  [/^#\/deployments\/([^/]+)\/([^/]+)$/, "deployments", (main, ns, name) => deployments.detail(main, ns, name), (ns, name) => `${name} (${ns})`],
  [/^#\/create$/, "create", (main) => deployments.create(main), () => "Create a deployment"],
  [/^#\/timeline\/([^/]+)\/([^/]*)\/([^/]+)$/, "deployments", (main, kind, ns, name) => timeline.page(main, kind, ns, name), (kind, ns, name) => `Timeline: ${kind}/${name}`],
  [/^#\/playground$/, "playground", (main) => playground.page(main), () => "Playground"],
  [/^#\/providers$/, "providers", (main) => providers.list(main), () => "Providers"],
  [/^#\/providers\/([^/]+)$/, "providers", (main, name) => providers.detail(main, name), (name) => `Provider ${name}`],
  [/^#\/agents$/, "agents", (main) => agents.page(main), () => "Agents"],
  [/^#\/members$/, "members", (main) => members.page(main), () => "Pool members"],
  [/^#\/routing\/([^/?]+)(?:\?.*)?$/, "members", (main, model) => routing.page(main, model), (model) => `Routing: ${model}`],
  [/^#\/routing$/, "members", (main) => routing.page(main), () => "Routing decisions"],
  [/^(#\/deployments|#\/?|)$/, "deployments", (main) => deployments.list(main), () => "Deployments"],
];

let cleanup = null;

// `moved`: reached by following a link (not the first load): the keyboard's place moves to the new page's content,
// as a page load would put it at the top, rather than staying on a link the new page no longer has.
async function render(moved = false) {
  if (cleanup) cleanup();
  cleanup = null;
  const main = document.getElementById("main");
  main.replaceChildren();
  const hash = location.hash;
  const found = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!found) {
    location.hash = "#/deployments";
    return;
  }
  const [pattern, section, show, title] = found;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.page === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const args = hash.match(pattern).slice(1).map(decodeURIComponent);
  document.title = `${title(...args)} · Jetway console`;
  try {
    cleanup = (await show(main, ...args)) || null;
  } catch (error) {
    if (!(error instanceof LoggedOut)) throw error;
  }
  const away = document.activeElement;
  if (moved && (away === document.body || away === null || away.closest("header"))) main.focus();
}

// The skip link moves the keyboard to the page's content (its #main would otherwise be read as a route).
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  document.getElementById("main").focus();
});

// A box that scrolls (a wide table, a long manifest or command) is a Tab stop, so the keyboard can scroll it too;
// a labelled <pre> is a named region (a label on a plain <pre> is not announced). Pages add such boxes as their
// data arrives, so they are marked as they appear.
const SCROLLERS = ".scroll, pre.code";
function reachable(node) {
  if (!(node instanceof Element)) return;
  for (const box of node.matches(SCROLLERS) ? [node, ...node.querySelectorAll(SCROLLERS)] : node.querySelectorAll(SCROLLERS)) {
    if (!box.hasAttribute("tabindex")) box.setAttribute("tabindex", "0");
    if (box.tagName === "PRE" && box.hasAttribute("aria-label") && !box.hasAttribute("role")) box.setAttribute("role", "region");
  }
}
new MutationObserver((records) => {
  for (const record of records) for (const node of record.addedNodes) reachable(node);
}).observe(document.getElementById("main"), { childList: true, subtree: true });

document.getElementById("logout").addEventListener("click", async () => {
  await request("/v1/console/logout", { method: "POST" }).catch(() => {});
  location.reload();
});
window.addEventListener("hashchange", () => render(true));
render();
