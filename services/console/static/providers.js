// Providers: every InferenceProviderConfig with its readiness, engines, selection rules, install steps and health checks.
import { age, call, h } from "./api.js";
import { Rows, connection, part, watch } from "./live.js";

const KIND = "InferenceProviderConfig";
const INSTALLATION = "airunway.ai/installation";
const HEALTH = "airunway.ai/health";
const DISPLAY_NAME = "airunway.ai/display-name";
const DESCRIPTION = "airunway.ai/description";
const DOCUMENTATION = "airunway.ai/documentation-url";

const enc = encodeURIComponent;

// A badge in the look of the deployments' phases: green when true, red when false, amber when unknown.
export function badge(ok, yes, no, unknown = "Unknown") {
  const state = ok === true ? "running" : ok === false ? "failed" : "pending";
  const text = ok === true ? yes : ok === false ? no : unknown;
  return h("span", { class: `phase phase-${state}`, "data-state": text }, text);
}

export function condition(item, type) {
  return (item.status?.conditions || []).find((c) => c.type === type);
}

function conditionBadge(found) {
  if (!found) return badge(undefined, "", "", "Not reported");
  return badge(found.status === "True" ? true : found.status === "False" ? false : undefined, found.reason || "True", found.reason || "False");
}

// An annotation's JSON, or the reason it cannot be read (shown as such, never guessed around).
export function annotationJson(item, name) {
  const text = item.metadata.annotations?.[name];
  if (text === undefined || text === null || text === "") return { value: null };
  try {
    return { value: JSON.parse(text) };
  } catch (error) {
    return { value: null, problem: `the ${name} annotation is not valid JSON: ${error.message}` };
  }
}

// A command (or any text to paste) with a button that copies it: the text is also the button's data-copy.
export function copyable(text, label) {
  const done = h("span", { class: "copied", role: "status" });
  const button = h("button", { type: "button", class: "quiet copy", "data-copy": text, "aria-label": `Copy ${label}` }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      done.textContent = "Copied";
    } catch {
      done.textContent = "Copy failed: select the text and copy it";
    }
  });
  return h("div", { class: "copyable" }, h("pre", { class: "code" }, text), h("div", { class: "copy-action" }, button, done));
}

// Quoted for a POSIX shell when it has to be.
function shellWord(word) {
  return /^[A-Za-z0-9_./:=@%+,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'"'"'`)}'`;
}

// The helm command a chart entry stands for (the steps carry the provider's own commands).
function chartCommand(chart) {
  const words = ["helm", "upgrade", "--install", chart.name, chart.chart];
  if (chart.version) words.push("--version", chart.version);
  if (chart.namespace) words.push("--namespace", chart.namespace);
  if (chart.createNamespace) words.push("--create-namespace");
  if (chart.skipCrds) words.push("--skip-crds");
  for (const [key, value] of Object.entries(chart.values || {})) words.push("--set-json", `${key}=${JSON.stringify(value)}`);
  return words.map(shellWord).join(" ");
}

export function table(label, columns, rows) {
  return h(
    "div",
    { class: "scroll" },
    h(
      "table",
      { class: "grid", "aria-label": label },
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows),
    ),
  );
}

const yesNo = (value) => (value ? "yes" : "no");

const COLUMNS = ["Name", "Display name", "Ready", "Selection rules", "Engines", "Version", "Heartbeat"];

function providerRow(item) {
  const engines = item.spec?.capabilities?.engines || [];
  return h(
    "tr",
    { "data-name": item.metadata.name },
    [
      h("a", { href: `#/providers/${enc(item.metadata.name)}` }, item.metadata.name),
      item.metadata.annotations?.[DISPLAY_NAME] || "—",
      badge(item.status?.ready, "Ready", "Not ready"),
      conditionBadge(condition(item, "SelectionRulesValid")),
      engines.map((e) => e.name).join(", ") || "—",
      item.status?.version || "—",
      item.status?.lastHeartbeat ? age(item.status.lastHeartbeat) : "—",
    ].map((c) => h("td", {}, c)),
  );
}

// Every provider, live: the watch (GET /v1/watch?kind=InferenceProviderConfig) brings each change, no reload.
export function list(main) {
  const live = h("p", { class: "live", role: "status" }, "Connecting…");
  const empty = h("p", { class: "empty", hidden: true }, "No provider has registered yet.");
  const box = table("InferenceProviderConfigs", COLUMNS, []);
  const rows = new Rows(box.querySelector("tbody"), providerRow);
  const root = h("div", {}, h("h1", {}, "Providers"), live, box, empty);
  main.append(root);
  let state = "live";
  function counted() {
    empty.hidden = rows.size > 0;
    const text = `Live: ${rows.size} InferenceProviderConfig${rows.size === 1 ? "" : "s"}, updated as they change. Open one for its engines, rules, install steps and health checks.`;
    live.textContent = connection(state, text);
  }
  return watch(KIND, {
    root,
    snapshot(items) {
      rows.replaceAll(items);
      counted();
    },
    changed(item) {
      rows.upsert(item);
      counted();
    },
    deleted(gone) {
      rows.remove(gone.namespace, gone.name);
      counted();
    },
    status(now) {
      state = now;
      counted();
    },
  });
}

// One provider, live: each part of the page is rebuilt when what it shows changed (a status report changes the
// readiness, version, heartbeat and conditions; the install steps, and the focus on their Copy buttons, stay put).
export async function detail(main, name) {
  const [found, discovery] = await Promise.all([call(`/v1/kinds/${KIND}/${enc(name)}`), call("/v1/console/discovery")]);
  main.append(h("p", {}, h("a", { href: "#/providers" }, "← Providers")));
  if (!found.ok) {
    main.append(h("h1", {}, name), h("p", { class: "error", role: "alert" }, found.data.error));
    return null;
  }
  const discovered = discovery.ok ? discovery.data : null;
  const heading = part("h1");
  const description = part("p");
  const facts = part("dl", { class: "facts" });
  const engineList = part();
  const rules = part();
  const steps = part();
  const checks = part();
  const conditions = part();
  const live = h("p", { class: "live", role: "status" }, "Connecting…");
  const root = h(
    "div",
    {},
    h("div", { class: "bar" }, heading.node, h("a", { class: "button quiet", href: `#/timeline/${KIND}//${enc(name)}` }, "Timeline")),
    live,
    description.node,
    facts.node,
    h("h2", {}, "Engines"),
    engineList.node,
    h("h2", {}, "Selection rules"),
    rules.node,
    h("h2", {}, "Install"),
    steps.node,
    h("h2", {}, "Health checks"),
    checks.node,
    h("h2", {}, "Conditions"),
    conditions.node,
  );
  main.append(root);

  function show(item) {
    const annotations = item.metadata.annotations || {};
    const status = item.status || {};
    const sig = (...parts) => JSON.stringify(parts);
    heading.update(sig(annotations[DISPLAY_NAME], status.ready), () => [annotations[DISPLAY_NAME] || name, " ", badge(status.ready, "Ready", "Not ready")]);
    description.node.hidden = !annotations[DESCRIPTION];
    description.update(sig(annotations[DESCRIPTION]), () => annotations[DESCRIPTION] || "");
    const docs = annotations[DOCUMENTATION];
    const selection = item.status && condition(item, "SelectionRulesValid");
    facts.update(sig(status.version, status.lastHeartbeat, status.upstreamCRDVersion, docs, selection), () =>
      [
        ["Name", name],
        ["Version", status.version || "—"],
        ["Heartbeat", status.lastHeartbeat ? `${age(status.lastHeartbeat)} ago` : "—"],
        ["Upstream CRD", status.upstreamCRDVersion || "—"],
        ["Documentation", docs ? h("a", { href: docs, rel: "noreferrer" }, docs) : "—"],
        [
          "Selection rules",
          selection ? h("span", { "data-condition": "SelectionRulesValid" }, conditionBadge(selection), " ", selection.message || "") : "not checked yet",
        ],
      ].flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
    );
    engineList.update(sig(item.spec?.capabilities?.engines), () => engines(item));
    rules.update(sig(item.spec?.selectionRules), () => selectionRules(item));
    steps.update(sig(annotations[INSTALLATION]), () => install(item));
    checks.update(sig(annotations[HEALTH]), () => health(item, discovered));
    conditions.update(sig(status.conditions), () =>
      table(
        "Conditions",
        ["Type", "Status", "Reason", "Message", "Since"],
        (status.conditions || []).map((c) =>
          h("tr", { "data-type": c.type }, [c.type, c.status, c.reason || "", c.message || "", age(c.lastTransitionTime)].map((v) => h("td", {}, v))),
        ),
      ),
    );
  }

  show(found.data);
  const liveText = "Live: updated as it changes";
  let gone = false;
  return watch(KIND, {
    root,
    name,
    snapshot(items) {
      const item = items.find((i) => i.metadata.name === name);
      gone = !item;
      if (item) show(item);
      live.textContent = gone ? "Deleted: this provider's config no longer exists." : liveText;
    },
    changed(item) {
      if (item.metadata.name !== name) return;
      gone = false;
      live.textContent = liveText;
      show(item);
    },
    deleted(which) {
      if (which.name !== name) return;
      gone = true;
      live.textContent = "Deleted: this provider's config no longer exists.";
    },
    status(state) {
      if (!gone) live.textContent = connection(state, liveText);
    },
  });
}

function engines(item) {
  const list = item.spec?.capabilities?.engines || [];
  if (!list.length) return h("p", {}, "No engines declared.");
  return table(
    "Engines",
    ["Engine", "Serving modes", "GPU", "CPU", "API formats", "Inference pool"],
    list.map((e) =>
      h(
        "tr",
        { "data-engine": e.name },
        [
          e.name,
          (e.servingModes || []).join(", ") || "none",
          yesNo(e.gpuSupport),
          yesNo(e.cpuSupport),
          (e.apiFormats || ["openai-chat"]).join(", "),
          e.gateway?.managesInferencePool ? `managed (${e.gateway.inferencePoolNamePattern || "{name}"})` : "—",
        ].map((v) => h("td", {}, v)),
      ),
    ),
  );
}

function selectionRules(item) {
  const rules = [...(item.spec?.selectionRules || [])].sort((a, b) => (b.priority ?? 0) - (a.priority ?? 0));
  if (!rules.length) return h("p", {}, "No selection rules: chosen only when a deployment names it.");
  return h(
    "div",
    {},
    h("p", { class: "live" }, "Highest priority first: when several providers' rules match a deployment, the highest priority wins."),
    table(
      "Selection rules",
      ["Priority", "Condition (CEL over spec)"],
      rules.map((r) => h("tr", { "data-priority": r.priority ?? 0 }, h("td", {}, String(r.priority ?? 0)), h("td", {}, h("code", {}, r.condition)))),
    ),
  );
}

function install(item) {
  const { value, problem } = annotationJson(item, INSTALLATION);
  if (problem) return h("p", { class: "error" }, problem);
  if (!value) return h("p", {}, "No install steps: the provider's config carries no ", h("code", {}, INSTALLATION), " annotation.");
  const parts = [];
  if (value.description) parts.push(h("p", {}, value.description));
  if (value.defaultNamespace) parts.push(h("p", {}, "Default namespace: ", h("code", {}, value.defaultNamespace)));
  if (value.helmRepos?.length) {
    parts.push(h("h3", {}, "Helm repositories"));
    for (const repo of value.helmRepos) parts.push(copyable(`helm repo add ${shellWord(repo.name)} ${shellWord(repo.url)}`, `helm repo ${repo.name}`));
  }
  if (value.helmCharts?.length) {
    parts.push(h("h3", {}, "Helm charts"));
    for (const chart of value.helmCharts) {
      const notes = [chart.version && `version ${chart.version}`, chart.namespace && `namespace ${chart.namespace}`, chart.fetchUrl && `fetched from ${chart.fetchUrl}`];
      parts.push(h("p", {}, h("strong", {}, chart.name), ": ", h("code", {}, chart.chart), notes.some(Boolean) ? ` (${notes.filter(Boolean).join(", ")})` : ""));
      for (const url of chart.preCrdUrls || []) parts.push(copyable(`kubectl apply --server-side -f ${shellWord(url)}`, `CRDs for ${chart.name}`));
      parts.push(copyable(chartCommand(chart), `chart ${chart.name}`));
    }
  }
  if (value.steps?.length) {
    parts.push(h("h3", {}, "Steps"));
    const steps = h("ol", { class: "steps" });
    for (const step of value.steps) {
      steps.append(
        h(
          "li",
          {},
          h("strong", {}, step.title),
          step.description ? h("p", {}, step.description) : null,
          step.command ? copyable(step.command, `command: ${step.title}`) : null,
        ),
      );
    }
    parts.push(steps);
  }
  return h("section", { "aria-label": "Install steps" }, parts);
}

function health(item, discovery) {
  const { value, problem } = annotationJson(item, HEALTH);
  if (problem) return h("p", { class: "error" }, problem);
  const crds = value?.crds || [];
  const pods = value?.operatorPods || [];
  if (!crds.length && !pods.length) return h("p", {}, "No health checks declared (", h("code", {}, HEALTH), ").");
  const checked = discovery?.checked === true;
  const served = new Set(discovery?.served || []);
  const parts = [];
  if (crds.length) {
    parts.push(
      h(
        "p",
        { class: "live" },
        checked
          ? "Found: served by the cluster, from the watcher's last API discovery."
          : "Standalone mode has no cluster: the CRDs are not checked here, only listed.",
      ),
      table(
        "CRD checks",
        ["CRD", "Kind", "Found"],
        crds.map((crd) => {
          const state = !checked ? "not checked in standalone" : served.has(crd.name) ? "found" : "missing";
          const shown = !checked ? h("span", { class: "phase", "data-found": state }, state) : badge(state === "found", "found", "missing");
          if (checked) shown.dataset.found = state;
          return h("tr", { "data-crd": crd.name }, h("td", {}, h("code", {}, crd.name)), h("td", {}, crd.displayName || "—"), h("td", {}, shown));
        }),
      ),
    );
  }
  if (pods.length) {
    parts.push(
      h("h3", {}, "Operator pods"),
      table(
        "Operator pod checks",
        ["Namespace", "Selectors", "Running"],
        pods.map((p) => h("tr", {}, [p.namespace || "any", (p.selectors || []).join(", "), "not checked: Jetway does not watch the operators' pods"].map((v) => h("td", {}, v)))),
      ),
    );
  }
  return h("section", { "aria-label": "Health checks" }, parts);
}
