// Agents: the agent frameworks (AgentProviderConfigs) with readiness and install instructions, their catalog, and
// each AgentDeployment's model binding and phase.
import { age, h } from "./api.js";
import { Rows, connection, part, watch } from "./live.js";
import { annotationJson, badge, condition, copyable, table } from "./providers.js";

const CATALOG = "airunway.ai/agent-catalog";
const INSTRUCTIONS = "airunway.ai/install-instructions";

const enc = encodeURIComponent;

function phaseBadge(phase) {
  const name = phase || "Pending";
  return h("span", { class: `phase phase-${name.toLowerCase()}`, "data-phase": name }, name);
}

// Where the agent's model is: the binding the binding service resolved, else what the spec asks for.
function binding(agent) {
  const resolved = agent.status?.modelBinding;
  const model = agent.spec?.model || {};
  const mode = resolved?.bindingMode || Object.keys(model).find((m) => model[m]) || "—";
  const asked = model.deploymentRef
    ? `ModelDeployment ${model.deploymentRef.namespace || agent.metadata.namespace}/${model.deploymentRef.name}`
    : model.gatewayEndpoint
      ? `Gateway ${model.gatewayEndpoint.gatewayRef?.namespace || agent.metadata.namespace}/${model.gatewayEndpoint.gatewayRef?.name}, model ${model.gatewayEndpoint.modelName}`
      : model.externalAPI
        ? `${model.externalAPI.type} API, model ${model.externalAPI.modelName}`
        : "—";
  return { mode, asked, baseURL: resolved?.baseURL, model: resolved?.modelName, api: resolved?.apiType };
}

function frameworkRow(config) {
  const caps = config.spec?.capabilities || {};
  const ready = condition(config, "Ready");
  return h(
    "tr",
    { "data-name": config.metadata.name },
    [
      h("a", { href: `#/timeline/AgentProviderConfig//${enc(config.metadata.name)}` }, config.metadata.name),
      caps.backend || "—",
      badge(config.status?.ready, "Ready", "Not ready"),
      ready ? `${ready.reason}: ${ready.message}` : "not assessed yet",
      (caps.modelBindingModes || []).join(", ") || "any",
      (caps.protocols || []).join(", ") || "—",
      caps.operatorAPIGroup || "—",
    ].map((c) => h("td", {}, c)),
  );
}

function agentRow(agent) {
  const bound = binding(agent);
  const ns = agent.metadata.namespace || "default";
  return h(
    "tr",
    { "data-name": agent.metadata.name, "data-namespace": ns },
    [
      h("a", { href: `#/timeline/AgentDeployment/${enc(ns)}/${enc(agent.metadata.name)}` }, agent.metadata.name),
      ns,
      agent.spec?.framework?.name || "—",
      phaseBadge(agent.status?.phase),
      h("span", { "data-binding": bound.mode }, bound.mode),
      bound.model ? `${bound.model}${bound.api ? ` (${bound.api})` : ""}` : bound.asked,
      bound.baseURL ? h("code", { "data-base-url": bound.baseURL }, bound.baseURL) : h("span", { class: "live" }, unresolvedWhy(agent)),
      agent.status?.message || "—",
      age(agent.metadata.created_at),
    ].map((c) => h("td", {}, c)),
  );
}

function instructionsOf(configs) {
  const listed = configs.filter((c) => (c.metadata.annotations?.[INSTRUCTIONS] || "").trim());
  if (!listed.length) return null;
  return [
    h("h3", {}, "Install instructions"),
    ...listed.map((config) =>
      h("section", { "aria-label": `Install ${config.metadata.name}`, "data-framework": config.metadata.name }, [
        h("p", {}, h("strong", {}, config.metadata.name), config.status?.ready === false ? " (not ready: install it first)" : ""),
        copyable(config.metadata.annotations[INSTRUCTIONS].trim(), `install instructions for ${config.metadata.name}`),
      ]),
    ),
  ];
}

function catalogOf(configs) {
  const entries = [];
  const problems = [];
  for (const config of configs) {
    const { value, problem } = annotationJson(config, CATALOG);
    if (problem) problems.push(`${config.metadata.name}: ${problem}`);
    for (const entry of Array.isArray(value) ? value : []) entries.push({ framework: config.metadata.name, ...entry });
  }
  return [
    ...problems.map((problem) => h("p", { class: "error" }, problem)),
    entries.length
      ? table(
          "Agent catalog",
          ["Title", "Name", "Framework", "Description", "Image", "Tags"],
          entries.map((e) =>
            h(
              "tr",
              { "data-entry": e.name },
              [e.title || e.name, h("code", {}, e.name), e.framework, e.description || "—", e.image ? h("code", {}, e.image) : "template", (e.tags || []).join(", ") || "—"].map(
                (c) => h("td", {}, c),
              ),
            ),
          ),
        )
      : h("p", { class: "empty" }, "No catalog entries: no framework carries an ", h("code", {}, CATALOG), " annotation."),
  ];
}

// The frameworks, their catalog and the agents, live: two watches (AgentProviderConfig, AgentDeployment). A row is
// rebuilt when its item changed; the install instructions and the catalog when what they show changed.
export function page(main) {
  const live = h("p", { class: "live", role: "status" }, "Connecting…");
  const frameworksBox = table("AgentProviderConfigs", ["Name", "Backend", "Ready", "Reason", "Binding modes", "Protocols", "Operator API group"], []);
  const agentsBox = table("AgentDeployments", ["Name", "Namespace", "Framework", "Phase", "Binding", "Model", "Base URL", "Message", "Age"], []);
  const noFrameworks = h("p", { class: "empty" }, "No AgentProviderConfig applied yet.");
  const noAgents = h("p", { class: "empty" }, "No AgentDeployment applied yet.");
  const frameworks = new Rows(frameworksBox.querySelector("tbody"), frameworkRow);
  const agents = new Rows(agentsBox.querySelector("tbody"), agentRow);
  const instructions = part();
  const catalog = part();
  const configs = new Map(); // name → AgentProviderConfig: the instructions and the catalog are made of all of them
  const root = h(
    "div",
    {},
    h("h1", {}, "Agents"),
    live,
    h("h2", { id: "frameworks" }, "Agent frameworks"),
    noFrameworks,
    frameworksBox,
    instructions.node,
    h("h2", { id: "catalog" }, "Agent catalog"),
    catalog.node,
    h("h2", { id: "deployments" }, "AgentDeployments"),
    noAgents,
    agentsBox,
  );
  main.append(root);

  const states = { frameworks: "connecting", agents: "connecting" };
  function counted() {
    // "none yet" only once a watch's snapshot said so
    frameworksBox.hidden = frameworks.size === 0;
    noFrameworks.hidden = frameworks.size > 0 || states.frameworks === "connecting";
    agentsBox.hidden = agents.size === 0;
    noAgents.hidden = agents.size > 0 || states.agents === "connecting";
    const worst = ["closed", "reconnecting", "connecting"].find((s) => Object.values(states).includes(s));
    live.textContent = worst === "connecting" ? "Connecting…" : connection(worst, "Live: updated as they change");
  }
  function frameworksChanged() {
    const sorted = [...configs.keys()].sort().map((name) => configs.get(name));
    const shown = (c) => [c.metadata.name, c.metadata.annotations?.[INSTRUCTIONS] || "", c.status?.ready];
    instructions.update(JSON.stringify(sorted.map(shown)), () => instructionsOf(sorted));
    catalog.update(JSON.stringify(sorted.map((c) => [c.metadata.name, c.metadata.annotations?.[CATALOG] || ""])), () => catalogOf(sorted));
    counted();
  }
  const closeFrameworks = watch("AgentProviderConfig", {
    root,
    snapshot(items) {
      configs.clear();
      for (const item of items) configs.set(item.metadata.name, item);
      frameworks.replaceAll(items);
      frameworksChanged();
    },
    changed(item) {
      configs.set(item.metadata.name, item);
      frameworks.upsert(item);
      frameworksChanged();
    },
    deleted(gone) {
      configs.delete(gone.name);
      frameworks.remove(gone.namespace, gone.name);
      frameworksChanged();
    },
    status(state) {
      states.frameworks = state;
      counted();
    },
  });
  const closeAgents = watch("AgentDeployment", {
    root,
    snapshot(items) {
      agents.replaceAll(items);
      counted();
    },
    changed(item) {
      agents.upsert(item);
      counted();
    },
    deleted(gone) {
      agents.remove(gone.namespace, gone.name);
      counted();
    },
    status(state) {
      states.agents = state;
      counted();
    },
  });
  counted();
  return () => {
    closeFrameworks();
    closeAgents();
  };
}

function unresolvedWhy(agent) {
  const bound = condition(agent, "ModelBound");
  return bound && bound.status !== "True" ? `not resolved: ${bound.message || bound.reason}` : "not resolved yet";
}
