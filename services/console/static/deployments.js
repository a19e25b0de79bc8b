// Deployments: the live table, a deployment's detail (conditions, rendered objects, delete) and the create form.
import { age, call, h, toYaml } from "./api.js";

const KIND = "ModelDeployment";
const COLUMNS = ["Name", "Namespace", "Phase", "Provider", "Engine", "Replicas", "Endpoint", "Age"];
const ENGINES = ["vllm", "sglang", "trtllm", "llamacpp"];

const enc = encodeURIComponent;
const keyOf = (item) => `${item.metadata.namespace || ""}/${item.metadata.name}`;
const detailHref = (item) => `#/deployments/${enc(item.metadata.namespace || "default")}/${enc(item.metadata.name)}`;

function phaseBadge(phase) {
  const name = phase || "Pending";
  return h("span", { class: `phase phase-${name.toLowerCase()}`, "data-phase": name }, name);
}

function endpointOf(status) {
  if (status.gateway && status.gateway.endpoint) return status.gateway.endpoint;
  if (status.endpoint) return `${status.endpoint.service}:${status.endpoint.port}`;
  return "—";
}

function cells(item) {
  const spec = item.spec || {};
  const status = item.status || {};
  const desired = status.replicas?.desired ?? spec.scaling?.replicas ?? 1;
  return [
    h("a", { href: detailHref(item) }, item.metadata.name),
    item.metadata.namespace || "",
    phaseBadge(status.phase),
    status.provider?.name || spec.provider?.name || "auto",
    status.engine?.type || spec.engine?.type || "auto",
    `${status.replicas?.ready ?? 0}/${desired}`,
    endpointOf(status),
    h("span", { "data-created": item.metadata.created_at || "" }, age(item.metadata.created_at)),
  ];
}

export function list(main) {
  const body = h("tbody");
  const live = h("p", { class: "live", role: "status" }, "Connecting…");
  const empty = h("p", { class: "empty", hidden: true }, "No deployments yet. ", h("a", { href: "#/create" }, "Create one"), ".");
  main.append(
    h("div", { class: "bar" }, h("h1", {}, "Deployments"), h("a", { class: "button", href: "#/create" }, "Create")),
    live,
    h(
      "div",
      { class: "scroll" },
      h("table", { class: "grid", "aria-label": "ModelDeployments" }, h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col" }, c)))), body),
    ),
    empty,
  );
  const rows = new Map(); // namespace/name → <tr>
  const order = []; // the keys of the rows, sorted: where a new row goes is a binary search, not a sort

  function at(key) {
    let low = 0;
    let high = order.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (order[middle] < key) low = middle + 1;
      else high = middle;
    }
    return low;
  }
  const rowOf = (item) =>
    h("tr", { "data-name": item.metadata.name, "data-namespace": item.metadata.namespace || "" }, cells(item).map((c) => h("td", {}, c)));
  function upsert(item) {
    const key = keyOf(item);
    const row = rowOf(item);
    const old = rows.get(key);
    rows.set(key, row);
    if (old) {
      old.replaceWith(row); // a change: only its row is rebuilt
      return;
    }
    const index = at(key);
    body.insertBefore(row, index < order.length ? rows.get(order[index]) : null);
    order.splice(index, 0, key);
  }
  function remove(key) {
    rows.get(key)?.remove();
    if (rows.delete(key)) order.splice(at(key), 1);
  }
  // The whole list at once: built off the page, sorted once, put in with one DOM change.
  function replaceAll(items) {
    rows.clear();
    order.length = 0;
    for (const item of items) rows.set(keyOf(item), rowOf(item));
    order.push(...[...rows.keys()].sort());
    body.replaceChildren(...order.map((key) => rows.get(key)));
  }
  function counted() {
    empty.hidden = rows.size > 0;
    live.textContent = `Live: ${rows.size} deployment${rows.size === 1 ? "" : "s"}, updated as they change`;
  }

  // The watch starts with the whole list (a snapshot) and sends each change after it: nothing is polled.
  const source = new EventSource(`/v1/watch?kind=${KIND}`);
  source.addEventListener("snapshot", (event) => {
    replaceAll(JSON.parse(event.data).items);
    counted();
  });
  source.addEventListener("changed", (event) => {
    upsert(JSON.parse(event.data));
    counted();
  });
  source.addEventListener("deleted", (event) => {
    const gone = JSON.parse(event.data);
    remove(`${gone.namespace}/${gone.name}`);
    counted();
  });
  source.onerror = () => {
    live.textContent = source.readyState === EventSource.CLOSED ? "Disconnected: reload the page (or log in again)." : "Reconnecting…";
  };
  const ticking = setInterval(() => {
    for (const span of body.querySelectorAll("[data-created]")) span.textContent = age(span.dataset.created);
  }, 30000);
  return () => {
    source.close();
    clearInterval(ticking);
  };
}

export async function detail(main, namespace, name) {
  const query = `?namespace=${enc(namespace)}`;
  const path = `/v1/kinds/${KIND}/${enc(name)}`;
  const [found, objects] = await Promise.all([call(path + query), call(`${path}/objects${query}`)]);
  if (!found.ok) {
    main.append(h("h1", {}, name), h("p", { class: "error", role: "alert" }, found.data.error));
    return;
  }
  const item = found.data;
  const status = item.status || {};
  const conditions = status.conditions || [];
  const dialog = h(
    "dialog",
    { "aria-labelledby": "confirm-title" },
    h("h2", { id: "confirm-title" }, `Delete ${name}?`),
    h("p", {}, `ModelDeployment ${namespace}/${name} and the objects Jetway made for it will be removed.`),
    h(
      "form",
      { method: "dialog", class: "actions" },
      h("button", { value: "cancel", class: "quiet" }, "Cancel"),
      h("button", { value: "delete", class: "danger" }, "Delete"),
    ),
  );
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "delete") return;
    const deleted = await call(path + query, { method: "DELETE" });
    if (deleted.ok) location.hash = "#/deployments";
    else Object.assign(problem, { hidden: false, textContent: deleted.data.error });
  });
  const rendered = Object.entries(objects.ok ? objects.data.objects : {});
  main.append(
    h(
      "div",
      { class: "bar" },
      h("h1", {}, name, " ", phaseBadge(status.phase)),
      h("a", { class: "button", href: `#/timeline/${KIND}/${enc(namespace)}/${enc(name)}` }, "Timeline"),
      h("button", { type: "button", class: "danger", onclick: () => dialog.showModal() }, "Delete…"),
    ),
    problem,
    h(
      "dl",
      { class: "facts" },
      ...[
        ["Namespace", namespace],
        ["Model", item.spec?.model?.id || "—"],
        ["Provider", status.provider?.name || item.spec?.provider?.name || "auto"],
        ["Engine", status.engine?.type || item.spec?.engine?.type || "auto"],
        ["Endpoint", endpointOf(status)],
        ["Generation", `${item.metadata.generation} (observed ${item.metadata.observed_generation ?? "—"})`],
        ["Message", status.message || "—"],
      ].flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
    ),
    h("h2", {}, "Conditions"),
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { class: "grid", "aria-label": "Conditions" },
        h("thead", {}, h("tr", {}, ["Type", "Status", "Reason", "Message", "Since"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          conditions.map((c) =>
            h("tr", {}, [c.type, c.status, c.reason || "", c.message || "", age(c.lastTransitionTime)].map((v) => h("td", {}, v))),
          ),
        ),
      ),
    ),
    h("h2", {}, "Rendered objects"),
    rendered.length
      ? rendered.map(([owner, items]) => [
          h("h3", {}, `Recorded by the ${owner} service`),
          h("pre", { class: "code" }, items.map((o) => `---\n${toYaml(o)}`).join("\n")),
        ])
      : h("p", {}, "Nothing rendered yet."),
    dialog,
  );
}

// --- the create form -------------------------------------------------------------------------

// Each field with the manifest path the apply API names in its errors.
const FIELDS = [
  { id: "name", label: "Name", path: "metadata.name", value: "my-model" },
  { id: "namespace", label: "Namespace", path: "metadata.namespace", value: "default" },
  { id: "model", label: "Model id", path: "spec.model.id", value: "Qwen/Qwen3-0.6B", hint: "A Hugging Face model id" },
  { id: "engine", label: "Engine", path: "spec.engine.type", choices: ["auto", ...ENGINES] },
  { id: "provider", label: "Provider", path: "spec.provider.name", choices: ["auto"] },
  { id: "gpus", label: "GPUs per replica", path: "spec.resources.gpu.count", value: "1", numeric: true },
  { id: "context", label: "Context length", path: "spec.engine.contextLength", value: "", numeric: true, hint: "Empty: the engine's default" },
  { id: "replicas", label: "Replicas", path: "spec.scaling.replicas", value: "1", numeric: true },
];

// A whole number typed becomes a number; anything else is sent as typed, for the API to name the field it breaks.
function numberOrText(text) {
  return /^-?\d+$/.test(text.trim()) ? Number(text.trim()) : text;
}

function manifestOf(values) {
  const spec = { model: { id: values.model } };
  const engine = {};
  if (values.engine !== "auto") engine.type = values.engine;
  if (values.context.trim() !== "") engine.contextLength = numberOrText(values.context);
  if (Object.keys(engine).length) spec.engine = engine;
  if (values.provider !== "auto") spec.provider = { name: values.provider };
  if (values.gpus.trim() !== "") spec.resources = { gpu: { count: numberOrText(values.gpus) } };
  if (values.replicas.trim() !== "") spec.scaling = { replicas: numberOrText(values.replicas) };
  return { apiVersion: "airunway.ai/v1alpha1", kind: KIND, metadata: { name: values.name, namespace: values.namespace }, spec };
}

// The field an error path belongs to: the longest field path that starts it.
function fieldFor(path) {
  const owners = FIELDS.filter((f) => path === f.path || path.startsWith(`${f.path}.`) || path.startsWith(`${f.path}[`));
  return owners.sort((a, b) => b.path.length - a.path.length)[0];
}

export async function create(main) {
  const providers = await call("/v1/kinds/InferenceProviderConfig");
  FIELDS.find((f) => f.id === "provider").choices = ["auto", ...(providers.ok ? providers.data.items.map((p) => p.metadata.name) : [])];
  const inputs = {};
  const errors = {};
  const form = h("form", { class: "form", novalidate: true, "aria-label": "New ModelDeployment" });
  for (const field of FIELDS) {
    const id = `field-${field.id}`;
    const control = field.choices
      ? h("select", { id, name: field.id }, field.choices.map((c) => h("option", { value: c }, c)))
      : h("input", { id, name: field.id, value: field.value, inputmode: field.numeric ? "numeric" : undefined, autocomplete: "off" });
    control.setAttribute("aria-describedby", `${id}-error`);
    inputs[field.id] = control;
    errors[field.id] = h("p", { class: "field-error", id: `${id}-error`, "data-field": field.id });
    form.append(h("div", { class: "field" }, h("label", { for: id }, field.label), control, field.hint ? h("small", {}, field.hint) : null, errors[field.id]));
  }
  const general = h("ul", { class: "errors", role: "alert" });
  const verdict = h("p", { class: "verdict", role: "status" });
  const format = h("select", { id: "preview-format", "aria-label": "Preview format" }, h("option", { value: "yaml" }, "YAML"), h("option", { value: "json" }, "JSON"));
  const preview = h("pre", { class: "code", id: "preview", "aria-label": "Manifest preview" });
  const submit = h("button", { type: "submit" }, "Create");
  form.append(general, verdict, h("div", { class: "actions" }, submit));
  main.append(
    h("h1", {}, "Create a deployment"),
    h("div", { class: "split" }, form, h("section", { "aria-label": "Preview" }, h("div", { class: "bar" }, h("h2", {}, "Preview"), format), preview)),
  );

  const values = () => Object.fromEntries(Object.entries(inputs).map(([id, control]) => [id, control.value]));
  function showPreview() {
    const manifest = manifestOf(values());
    preview.textContent = format.value === "json" ? JSON.stringify(manifest, null, 2) : toYaml(manifest);
    return manifest;
  }
  function showProblems(problems) {
    for (const [id, slot] of Object.entries(errors)) {
      slot.textContent = "";
      inputs[id].removeAttribute("aria-invalid");
    }
    general.replaceChildren();
    for (const problem of problems) {
      const field = fieldFor(problem.path || "");
      if (field) {
        errors[field.id].textContent = errors[field.id].textContent ? `${errors[field.id].textContent}; ${problem.message}` : problem.message;
        inputs[field.id].setAttribute("aria-invalid", "true");
      } else {
        general.append(h("li", {}, problem.path ? `${problem.path}: ${problem.message}` : problem.message));
      }
    }
  }
  // The same rules as `jetway validate`, and those that need the store (update rules, the named provider): a dry run.
  let asked = 0;
  async function check() {
    const mine = ++asked;
    const answer = await call("/v1/apply?dry-run=true", { method: "POST", body: showPreview() });
    if (mine !== asked) return null; // a newer check is on its way
    const problems = answer.ok ? [] : answer.data.errors || [{ path: answer.data.path || "", message: answer.data.error }];
    showProblems(problems);
    verdict.textContent = answer.ok ? `Valid: ${answer.data.action.replace("_", " ")}${answer.data.warnings ? ` (warnings: ${answer.data.warnings.join("; ")})` : ""}` : "";
    return answer.ok;
  }
  let pause = null;
  form.addEventListener("input", () => {
    showPreview();
    clearTimeout(pause);
    pause = setTimeout(check, 250);
  });
  format.addEventListener("change", showPreview);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearTimeout(pause);
    submit.disabled = true;
    try {
      if (!(await check())) return;
      const applied = await call("/v1/apply", { method: "POST", body: showPreview() });
      if (applied.ok) location.hash = `#/deployments/${enc(applied.data.namespace)}/${enc(applied.data.name)}`;
      else showProblems(applied.data.errors || [{ path: applied.data.path || "", message: applied.data.error }]);
    } finally {
      submit.disabled = false;
    }
  });
  showPreview();
  check();
}
