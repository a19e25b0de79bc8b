// Pool members: every InferencePoolMember, live (the watch), with the router's figures (polled) and a drain toggle.
import { call, h } from "./api.js";

const KIND = "InferencePoolMember";
const POLL_MS = 2000;
const COLUMNS = ["Name", "Health", "Models advertised", "Saturated", "Draining", "Models", "Requests", "Req/s", "In flight", "Errors", "TTFT p50", "TTFT p90", "Action"];
const FIGURES = ["requests", "rps", "in_flight", "error_rate", "ttft_p50_ms", "ttft_p90_ms"];
const MODEL_COLUMNS = ["Model", "Requests", "Req/s", "Errors", "TTFT p50", "TTFT p90"];

const enc = encodeURIComponent;
const condition = (item, type) => (item.status?.conditions || []).find((c) => c.type === type);

// One figure as the tables show it; "—" when the router has no figure for it (no answer, no stream, no baseline yet).
export function shown(name, value) {
  if (value === null || value === undefined) return "—";
  if (name === "rps") return value.toFixed(2);
  if (name === "error_rate") return `${(value * 100).toFixed(1)}%`;
  if (name.endsWith("_ms")) return `${value.toFixed(value < 10 ? 1 : 0)} ms`;
  return String(value);
}

function conditionCell(found, { yes = "yes", no = "no" } = {}) {
  if (!found) return h("span", { "data-status": "" }, "—");
  const word = found.status === "True" ? yes : found.status === "False" ? no : found.status;
  return h("span", { "data-status": found.status, title: found.message || found.reason || "" }, word, found.reason ? ` (${found.reason})` : "");
}

function health(item) {
  const phase = item.status?.phase || "Pending";
  const healthy = condition(item, "Healthy");
  return h("span", { class: `phase phase-${phase.toLowerCase()}`, "data-phase": phase, title: healthy?.message || "" }, phase);
}

function models(item) {
  const advertised = new Set(item.status?.advertisedModels || []);
  const known = item.status?.advertisedModels !== undefined && item.status?.advertisedModels !== null;
  return h(
    "ul",
    { class: "plain" },
    (item.spec?.models || []).map((m) =>
      h(
        "li",
        { "data-model": m.name },
        m.name,
        m.contextWindow ? h("small", {}, ` · ${m.contextWindow.toLocaleString("en")} tokens`) : null,
        known && !advertised.has(m.name) ? h("small", { class: "error" }, " · not advertised") : null,
      ),
    ),
  );
}

export function page(main) {
  const body = h("tbody");
  const modelBody = h("tbody");
  const live = h("p", { class: "live", role: "status" }, "Connecting…");
  const figuresNote = h("p", { class: "live", id: "figures-note" }, "Router figures: waiting for the first reading…");
  const empty = h("p", { class: "empty", hidden: true }, "No pool members yet: apply an InferencePoolMember (", h("code", {}, "jetway apply -f member.yaml"), ").");
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const dialogTitle = h("h2", { id: "drain-title" });
  const dialogText = h("p");
  const dialog = h(
    "dialog",
    { "aria-labelledby": "drain-title" },
    dialogTitle,
    dialogText,
    h("form", { method: "dialog", class: "actions" }, h("button", { value: "cancel", class: "quiet" }, "Cancel"), h("button", { value: "confirm" }, "Confirm")),
  );
  main.append(
    h("div", { class: "bar" }, h("h1", {}, "Pool members")),
    live,
    problem,
    h(
      "div",
      { class: "scroll" },
      h("table", { class: "grid members", "aria-label": "Pool members" }, h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col" }, c)))), body),
    ),
    empty,
    h("h2", {}, "Models"),
    figuresNote,
    h(
      "div",
      { class: "scroll" },
      h("table", { class: "grid", "aria-label": "Models" }, h("thead", {}, h("tr", {}, MODEL_COLUMNS.map((c) => h("th", { scope: "col" }, c)))), modelBody),
    ),
    dialog,
  );

  const items = new Map(); // name → the member's view
  const rows = new Map(); // name → <tr>
  let latest = { members: {}, models: {} };
  let asking = null; // the member the open dialog is about

  function fillFigures(row, numbers) {
    for (const name of FIGURES) {
      const cell = row.querySelector(`[data-col="${name}"]`);
      if (cell) cell.textContent = shown(name, numbers?.[name]);
    }
  }
  function rowOf(item) {
    const name = item.metadata.name;
    const draining = Boolean(item.spec?.draining);
    const toggle = h(
      "button",
      { type: "button", class: draining ? "" : "quiet", "aria-label": `${draining ? "Undrain" : "Drain"} ${name}`, onclick: () => confirm(name) },
      draining ? "Undrain…" : "Drain…",
    );
    const row = h(
      "tr",
      { "data-name": name, "data-draining": String(draining) },
      h("td", {}, h("a", { href: `#/timeline/${KIND}//${enc(name)}` }, name)),
      h("td", { "data-col": "health" }, health(item)),
      h("td", { "data-col": "advertised" }, conditionCell(condition(item, "ModelsAdvertised"))),
      h("td", { "data-col": "saturated" }, conditionCell(condition(item, "Saturated"))),
      h("td", { "data-col": "draining" }, draining ? h("strong", {}, "draining") : "no"),
      h("td", { "data-col": "models" }, models(item)),
      FIGURES.map((f) => h("td", { "data-col": f, class: "number" })),
      h("td", {}, toggle),
    );
    fillFigures(row, latest.members[name]);
    return row;
  }
  function upsert(item) {
    const name = item.metadata.name;
    items.set(name, item);
    const row = rowOf(item);
    const old = rows.get(name);
    rows.set(name, row);
    if (old) {
      const focused = old.contains(document.activeElement);
      old.replaceWith(row);
      if (focused) row.querySelector("button")?.focus(); // the toggle keeps the keyboard's place
      return;
    }
    const after = [...rows.keys()].sort().find((other) => other > name);
    body.insertBefore(row, after ? rows.get(after) : null);
  }
  function remove(name) {
    rows.get(name)?.remove();
    rows.delete(name);
    items.delete(name);
  }
  function counted() {
    empty.hidden = rows.size > 0;
    live.textContent = `Live: ${rows.size} member${rows.size === 1 ? "" : "s"}, updated as they change`;
  }

  function confirm(name) {
    const item = items.get(name);
    if (!item) return;
    const draining = Boolean(item.spec?.draining);
    asking = name;
    dialogTitle.textContent = `${draining ? "Undrain" : "Drain"} ${name}?`;
    dialogText.textContent = draining
      ? `The router will send new requests to ${name} again.`
      : `The router will send no new requests to ${name}; requests in flight finish.`;
    dialog.returnValue = "";
    dialog.showModal();
  }
  // The member re-applied through the apply API with spec.draining flipped; resourceVersion makes a stale toggle a 409.
  dialog.addEventListener("close", async () => {
    const name = asking;
    asking = null;
    if (dialog.returnValue !== "confirm" || !name) return;
    const current = await call(`/v1/kinds/${KIND}/${enc(name)}`);
    if (!current.ok) {
      Object.assign(problem, { hidden: false, textContent: current.data.error });
      return;
    }
    const { metadata, spec, apiVersion } = current.data;
    const meta = { name, resourceVersion: metadata.resourceVersion };
    if (metadata.labels && Object.keys(metadata.labels).length) meta.labels = metadata.labels;
    if (metadata.annotations && Object.keys(metadata.annotations).length) meta.annotations = metadata.annotations;
    const applied = await call("/v1/apply", { method: "POST", body: { apiVersion, kind: KIND, metadata: meta, spec: { ...spec, draining: !spec.draining } } });
    if (applied.ok) problem.hidden = true;
    else Object.assign(problem, { hidden: false, textContent: applied.data.error });
  });

  const source = new EventSource(`/v1/watch?kind=${KIND}`);
  source.addEventListener("snapshot", (event) => {
    for (const name of [...rows.keys()]) remove(name);
    for (const item of JSON.parse(event.data).items) upsert(item);
    counted();
  });
  source.addEventListener("changed", (event) => {
    upsert(JSON.parse(event.data));
    counted();
  });
  source.addEventListener("deleted", (event) => {
    remove(JSON.parse(event.data).name);
    counted();
  });
  source.onerror = () => {
    live.textContent = source.readyState === EventSource.CLOSED ? "Disconnected: reload the page (or log in again)." : "Reconnecting…";
  };

  // The router's figures: computed by the API between its recent readings of the router's counters (figures.py).
  async function poll() {
    const answer = await call("/v1/console/router-figures").catch(() => null);
    if (!answer || !answer.ok) {
      figuresNote.textContent = "Router figures: not available right now.";
      return;
    }
    latest = answer.data;
    for (const [name, row] of rows) fillFigures(row, latest.members[name]);
    const names = Object.keys(latest.models).sort();
    modelBody.replaceChildren(
      ...names.map((model) =>
        h(
          "tr",
          { "data-model": model },
          h("td", {}, h("a", { href: `#/routing/${enc(model)}`, title: `Routing decisions for ${model}` }, model)),
          ["requests", "rps", "error_rate", "ttft_p50_ms", "ttft_p90_ms"].map((f) => h("td", { "data-col": f, class: "number" }, shown(f, latest.models[model][f]))),
        ),
      ),
    );
    figuresNote.textContent = latest.seconds
      ? `Router figures over the last ${Math.round(latest.seconds)} s, read every ${POLL_MS / 1000} s. Errors: answers of 500 or more.`
      : "Router figures: rates after the next reading.";
  }
  poll();
  const polling = setInterval(poll, POLL_MS);
  return () => {
    source.close();
    clearInterval(polling);
  };
}
