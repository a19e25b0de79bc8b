// Routing decisions: a model's latest routed requests, from the router's routing records (GET /v1/console/routing),
// newest first, each with the member chosen and why. Read again every few seconds (a checkbox stops it) or on demand.
import { call, h } from "./api.js";

const POLL_MS = 5000;
const LIMITS = [20, 50, 100, 200, 500];
const COLUMNS = [
  ["time", "Time"],
  ["member", "Member"],
  ["reason", "Reason"],
  ["policy", "Policy"],
  ["score", "Score"],
  ["prefix", "Prefix"],
  ["candidates", "Candidates"],
  ["status", "Status"],
  ["ttft", "TTFT"],
  ["elapsed", "Elapsed"],
  ["tokens", "Tokens in / out"],
  ["key", "Key"],
  ["router", "Replica"],
];
// The reasons the router gives (services/router/policy.py, docs/router.md "Routing policies").
const REASONS = [
  ["only", "the one member ready for the model: nothing to choose"],
  ["session", "the member this session (x-session-id or user) went to last, still ready and not saturated"],
  ["prefix", "the best score, with part of the prompt's prefix already sent there (prefix-cache)"],
  ["load", "the best score on load alone: no member had the prompt's prefix (prefix-cache)"],
  ["least-outstanding", "the fewest requests in flight from this router"],
  ["round-robin", "in turn"],
];
const EXPLAINED = new Map(REASONS);

const enc = encodeURIComponent;
const ms = (seconds) => (seconds === null || seconds === undefined ? "—" : `${(seconds * 1000).toFixed(seconds < 0.01 ? 1 : 0)} ms`);

function when(decision) {
  const date = new Date(decision.at * 1000);
  const shown = date.toLocaleTimeString("en-GB", { hour12: false }) + `.${String(date.getMilliseconds()).padStart(3, "0")}`;
  return h("time", { datetime: decision.time, title: decision.time }, shown);
}

function rowOf(decision, id) {
  const failed = decision.status >= 500;
  const member = decision.member
    ? h("a", { href: `#/timeline/InferencePoolMember//${enc(decision.member)}` }, decision.member)
    : h("span", { class: "note" }, "none");
  return h(
    "tr",
    { "data-id": id, "data-seq": decision.seq },
    h("td", { "data-col": "time" }, when(decision)),
    h("td", { "data-col": "member" }, member),
    h("td", { "data-col": "reason", title: EXPLAINED.get(decision.reason) || "" }, decision.reason || "—"),
    h("td", { "data-col": "policy" }, decision.policy || "—"),
    h("td", { "data-col": "score", class: "number" }, decision.reason === "only" ? "—" : decision.score.toFixed(3)),
    h("td", { "data-col": "prefix", class: "number" }, `${Math.round(decision.prefix * 100)}%`),
    h("td", { "data-col": "candidates" }, decision.candidates.length ? decision.candidates.join(", ") : "—"),
    h("td", { "data-col": "status", class: failed ? "number error" : "number" }, String(decision.status)),
    h("td", { "data-col": "ttft", class: "number" }, ms(decision.ttft)),
    h("td", { "data-col": "elapsed", class: "number" }, ms(decision.elapsed)),
    h("td", { "data-col": "tokens", class: "number" }, `${decision.tokens_in} / ${decision.tokens_out}`),
    h("td", { "data-col": "key" }, decision.key || "—"),
    h(
      "td",
      { "data-col": "router", title: decision.placer ? "a new conversation: the placer replica chose its member (docs/router.md)" : "" },
      decision.router ? (decision.placer ? `${decision.router} (placed by ${decision.placer})` : decision.router) : "—",
    ),
  );
}

export function page(main, model = "") {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const asked = LIMITS.includes(Number(params.get("limit"))) ? Number(params.get("limit")) : 50;
  const modelInput = h("input", { id: "routing-model", name: "model", value: model, required: true, autocomplete: "off" });
  const limitSelect = h("select", { id: "routing-limit", name: "limit" }, LIMITS.map((n) => h("option", { value: n, selected: n === asked }, String(n))));
  const polling = h("input", { id: "routing-poll", type: "checkbox", checked: true });
  const refresh = h("button", { type: "button", class: "quiet" }, "Refresh now");
  const form = h(
    "form",
    { class: "routing-form", "aria-label": "Which model" },
    h("div", { class: "field" }, h("label", { for: "routing-model" }, "Model"), modelInput),
    h("div", { class: "field" }, h("label", { for: "routing-limit" }, "Decisions"), limitSelect),
    h("button", { type: "submit" }, "Show"),
  );
  const live = h("p", { class: "live", role: "status" }, model ? "Reading…" : "Name a model to see how the router chose its members.");
  const read = h("p", { class: "note" });
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const empty = h("p", { class: "empty", hidden: true });
  const body = h("tbody");
  const table = h(
    "div",
    { class: "scroll", hidden: true },
    h(
      "table",
      { class: "grid routing", "aria-label": `Routing decisions for ${model}` },
      h("thead", {}, h("tr", {}, COLUMNS.map(([, label]) => h("th", { scope: "col" }, label)))),
      body,
    ),
  );
  main.append(
    h("div", { class: "bar" }, h("h1", {}, "Routing decisions"), h("a", { href: "#/members" }, "Back to pool members")),
    h(
      "p",
      {},
      "The router's latest decisions for a model, newest first, from its routing records (the stream ",
      h("code", {}, "JETWAY_ROUTING"),
      ", when the router records them: ",
      h("code", {}, "JETWAY_ROUTER_RECORDS"),
      "). A key is shown by its name, never its value.",
    ),
    form,
    h("div", { class: "bar routing-refresh" }, h("label", { class: "check" }, polling, ` Refresh every ${POLL_MS / 1000} s`), refresh),
    live,
    read,
    problem,
    table,
    empty,
    h("h2", {}, "Reasons"),
    h("dl", { class: "facts" }, REASONS.flatMap(([reason, meaning]) => [h("dt", {}, h("code", {}, reason)), h("dd", {}, meaning)])),
  );

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = modelInput.value.trim();
    if (!name) return;
    const target = `#/routing/${enc(name)}${limitSelect.value === "50" ? "" : `?limit=${limitSelect.value}`}`;
    if (location.hash === target) show();
    else location.hash = target;
  });

  let shownIds = "";
  let busy = false;
  async function show() {
    if (!model || busy) return;
    busy = true;
    try {
      const answer = await call(`/v1/console/routing?model=${enc(model)}&limit=${asked}`).catch(() => null);
      if (!answer || !answer.ok) {
        Object.assign(problem, { hidden: false, textContent: answer?.data?.error || "The routing decisions could not be read; trying again." });
        return;
      }
      problem.hidden = true;
      const { decisions, scanned, bounded, recorded } = answer.data;
      const ids = decisions.map((d, i) => `${d.seq}.${d.at}.${d.member}.${i}`);
      if (ids.join(" ") !== shownIds) {
        // a link the keyboard was on stays focused in the new rows
        const focusedId = document.activeElement?.closest?.("tr[data-id]")?.dataset.id;
        body.replaceChildren(...decisions.map((d, i) => rowOf(d, ids[i])));
        shownIds = ids.join(" ");
        if (focusedId) body.querySelector(`tr[data-id="${CSS.escape(focusedId)}"] a`)?.focus();
      }
      table.hidden = decisions.length === 0;
      empty.hidden = decisions.length > 0;
      empty.textContent = recorded
        ? `No routing decision recorded for ${model}${bounded ? " in the latest records read" : ""}.`
        : `No routing decision recorded for ${model}: the router has recorded none yet.`;
      const count = `${decisions.length} decision${decisions.length === 1 ? "" : "s"} for ${model}, newest first`;
      if (live.textContent !== count) live.textContent = count;
      read.textContent =
        `Read at ${new Date().toLocaleTimeString("en-GB", { hour12: false })}: ${scanned.batches} batch${scanned.batches === 1 ? "" : "es"} of records` +
        (bounded ? " (the most read at once: older decisions are not shown)." : ".");
    } finally {
      busy = false;
    }
  }
  refresh.addEventListener("click", show);
  show();
  const timer = setInterval(() => {
    if (polling.checked) show();
  }, POLL_MS);
  return () => clearInterval(timer);
}
