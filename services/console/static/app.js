// The console's shell: a hash router over the pages; each page renders into <main> and returns its cleanup.
import { request, LoggedOut } from "./api.js";
import * as deployments from "./deployments.js";
import * as timeline from "./timeline.js";
import * as playground from "./playground.js";
import * as providers from "./providers.js";
import * as agents from "./agents.js";
import * as members from "./members.js";

const ROUTES = [
  [/^#\/deployments\/([^/]+)\/([^/]+)$/, "deployments", (main, ns, name) => deployments.detail(main, ns, name)],
  [/^#\/create$/, "create", (main) => deployments.create(main)],
  [/^#\/timeline\/([^/]+)\/([^/]*)\/([^/]+)$/, "deployments", (main, kind, ns, name) => timeline.page(main, kind, ns, name)],
  [/^#\/playground$/, "playground", (main) => playground.page(main)],
  [/^#\/providers$/, "providers", (main) => providers.list(main)],
  [/^#\/providers\/([^/]+)$/, "providers", (main, name) => providers.detail(main, name)],
  [/^#\/agents$/, "agents", (main) => agents.page(main)],
  [/^#\/members$/, "members", (main) => members.page(main)],
  [/^(#\/deployments|#\/?|)$/, "deployments", (main) => deployments.list(main)],
];

let cleanup = null;

async function render() {
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
  const [pattern, section, show] = found;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.page === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const args = hash.match(pattern).slice(1).map(decodeURIComponent);
  try {
    cleanup = (await show(main, ...args)) || null;
  } catch (error) {
    if (!(error instanceof LoggedOut)) throw error;
  }
}

document.getElementById("logout").addEventListener("click", async () => {
  await request("/v1/console/logout", { method: "POST" }).catch(() => {});
  location.reload();
});
window.addEventListener("hashchange", render);
render();
