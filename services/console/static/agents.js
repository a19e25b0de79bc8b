// Agents: the agent frameworks (AgentProviderConfigs) with readiness and install instructions, their catalog, and
// each AgentDeployment's model binding and phase.
import { age, call, h } from "./api.js";
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

export async function page(main) {
  const [frameworks, agents] = await Promise.all([call("/v1/kinds/AgentProviderConfig"), call("/v1/kinds/AgentDeployment")]);
  main.append(h("h1", {}, "Agents"));
  for (const answer of [frameworks, agents]) {
    if (!answer.ok) main.append(h("p", { class: "error", role: "alert" }, answer.data.error));
  }
  const configs = frameworks.ok ? frameworks.data.items : [];
  const deployed = agents.ok ? agents.data.items : [];

  main.append(h("h2", { id: "frameworks" }, "Agent frameworks"));
  if (!configs.length) main.append(h("p", { class: "empty" }, "No AgentProviderConfig applied yet."));
  else {
    main.append(
      table(
        "AgentProviderConfigs",
        ["Name", "Backend", "Ready", "Reason", "Binding modes", "Protocols", "Operator API group"],
        configs.map((config) => {
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
        }),
      ),
    );
    const instructions = configs.filter((c) => (c.metadata.annotations?.[INSTRUCTIONS] || "").trim());
    if (instructions.length) {
      main.append(h("h3", {}, "Install instructions"));
      for (const config of instructions) {
        main.append(
          h("section", { "aria-label": `Install ${config.metadata.name}`, "data-framework": config.metadata.name }, [
            h("p", {}, h("strong", {}, config.metadata.name), config.status?.ready === false ? " (not ready: install it first)" : ""),
            copyable(config.metadata.annotations[INSTRUCTIONS].trim(), `install instructions for ${config.metadata.name}`),
          ]),
        );
      }
    }
  }

  main.append(h("h2", { id: "catalog" }, "Agent catalog"));
  const entries = [];
  const problems = [];
  for (const config of configs) {
    const { value, problem } = annotationJson(config, CATALOG);
    if (problem) problems.push(`${config.metadata.name}: ${problem}`);
    for (const entry of Array.isArray(value) ? value : []) entries.push({ framework: config.metadata.name, ...entry });
  }
  for (const problem of problems) main.append(h("p", { class: "error" }, problem));
  main.append(
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
  );

  main.append(h("h2", { id: "deployments" }, "AgentDeployments"));
  main.append(
    deployed.length
      ? table(
          "AgentDeployments",
          ["Name", "Namespace", "Framework", "Phase", "Binding", "Model", "Base URL", "Message", "Age"],
          deployed.map((agent) => {
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
          }),
        )
      : h("p", { class: "empty" }, "No AgentDeployment applied yet."),
  );
}

function unresolvedWhy(agent) {
  const bound = condition(agent, "ModelBound");
  return bound && bound.status !== "True" ? `not resolved: ${bound.message || bound.reason}` : "not resolved yet";
}
