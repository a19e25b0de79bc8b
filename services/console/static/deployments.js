// Deployments: the live table, a deployment's detail (conditions, rendered objects, delete) and the create form.
import { LoggedOut, age, call, h, request, toYaml } from "./api.js";
import { connection, watch } from "./live.js";

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

// The name the router knows the deployment's model by (as the gateway and binding services derive it): where its
// routing decisions are listed (#/routing/NAME).
function routedName(item) {
  return item.status?.gateway?.modelName || item.spec?.model?.servedName || item.spec?.model?.id || item.metadata.name;
}

function routingLink(item) {
  const name = routedName(item);
  return h("a", { href: `#/routing/${enc(name)}`, title: `Routing decisions for ${name}` }, `Decisions for ${name}`);
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

// The storage volumes of a deployment, one line each (the stored spec has its defaults: mount path, claim name).
function volumeLine(v) {
  const claim = v.size
    ? [`${v.size}, claim ${v.claimName || "—"}`, v.storageClassName !== undefined && `class ${JSON.stringify(v.storageClassName)}`, v.accessMode]
    : [`existing claim ${v.claimName || "—"}`];
  return [`${v.name}: ${v.purpose || "custom"}`, ...claim, `at ${v.mountPath || "—"}`, v.readOnly && "read-only"].filter(Boolean).join(", ");
}

function volumesOf(spec) {
  const volumes = spec?.model?.storage?.volumes || [];
  if (!volumes.length) return "—";
  return h("ul", { class: "plain" }, volumes.map((v) => h("li", { "data-volume": v.name }, volumeLine(v))));
}

// A deployment's page, live: the phase, facts and conditions follow the watch (GET /v1/watch, this one deployment), and the
// rendered objects are fetched again on each change, as the text `jetway render md/NAME` prints (byte for byte).
export async function detail(main, namespace, name) {
  const query = `?namespace=${enc(namespace)}`;
  const path = `/v1/kinds/${KIND}/${enc(name)}`;
  const found = await call(path + query);
  if (!found.ok) {
    main.append(h("h1", {}, name), h("p", { class: "error", role: "alert" }, found.data.error));
    return null;
  }
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
  const badge = h("span", { id: "detail-phase" });
  const live = h("p", { class: "live", role: "status" }, "Connecting…");
  const facts = h("dl", { class: "facts" });
  const conditionRows = h("tbody");
  const command = `jetway render md/${name} -n ${namespace}`;
  const rendered = h("pre", { class: "code", id: "rendered", "aria-label": "Rendered objects (YAML)" });
  const root = h(
    "div",
    { class: "detail" },
    h(
      "div",
      { class: "bar" },
      h("h1", {}, name, " ", badge),
      h("a", { class: "button", href: `#/timeline/${KIND}/${enc(namespace)}/${enc(name)}` }, "Timeline"),
      h("button", { type: "button", class: "danger", onclick: () => dialog.showModal() }, "Delete…"),
    ),
    live,
    problem,
    facts,
    h("h2", {}, "Conditions"),
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { class: "grid", "aria-label": "Conditions" },
        h("thead", {}, h("tr", {}, ["Type", "Status", "Reason", "Message", "Since"].map((c) => h("th", { scope: "col" }, c)))),
        conditionRows,
      ),
    ),
    h("h2", {}, "Rendered objects"),
    h("p", { class: "note" }, "The objects Jetway's services recorded for it, as ", h("code", {}, command), " prints them."),
    rendered,
    dialog,
  );
  main.append(root);

  let shown = "";
  function show(item) {
    const signature = JSON.stringify(item);
    if (signature === shown) return;
    shown = signature;
    const status = item.status || {};
    badge.replaceChildren(phaseBadge(status.phase));
    facts.replaceChildren(
      ...[
        ["Namespace", namespace],
        ["Model", item.spec?.model?.id || "—"],
        ["Provider", status.provider?.name || item.spec?.provider?.name || "auto"],
        ["Engine", status.engine?.type || item.spec?.engine?.type || "auto"],
        ["Endpoint", endpointOf(status)],
        ["Routing", routingLink(item)],
        ["Storage", volumesOf(item.spec)],
        ["Generation", `${item.metadata.generation} (observed ${item.metadata.observed_generation ?? "—"})`],
        ["Message", status.message || "—"],
      ].flatMap(([term, value]) => [h("dt", {}, term), h("dd", { "data-fact": term }, value)]),
    );
    conditionRows.replaceChildren(
      ...(status.conditions || []).map((c) =>
        h("tr", { "data-type": c.type }, [c.type, c.status, c.reason || "", c.message || "", age(c.lastTransitionTime)].map((v) => h("td", {}, v))),
      ),
    );
  }

  // The rendered objects: the server's text as it is (GET /v1/console/rendered/...), fetched again after a change;
  // one request at a time, and one more if something changed meanwhile.
  let fetching = false;
  let again = false;
  async function loadRendered() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      do {
        again = false;
        const response = await request(`/v1/console/rendered/${KIND}/${enc(name)}${query}`);
        const text = response.ok ? await response.text() : ((await response.json().catch(() => null))?.error ?? `${response.status} ${response.statusText}`);
        if (rendered.textContent !== text) rendered.textContent = text;
      } while (again && root.isConnected);
    } catch (error) {
      if (!(error instanceof LoggedOut)) throw error;
    } finally {
      fetching = false;
    }
  }

  show(found.data);
  loadRendered();
  const liveText = "Live: updated as it changes";
  let gone = false;
  const markDeleted = () => {
    gone = true;
    live.textContent = "Deleted: this deployment no longer exists.";
  };
  return watch(KIND, {
    root,
    namespace,
    name,
    snapshot(items) {
      const item = items.find((i) => i.metadata.name === name);
      if (item) show(item);
      else markDeleted();
      loadRendered();
    },
    changed(item) {
      if (item.metadata.name !== name) return;
      gone = false;
      live.textContent = liveText;
      show(item);
      loadRendered();
    },
    deleted(which) {
      if (which.name === name) markDeleted();
    },
    status(state) {
      if (!gone) live.textContent = connection(state, liveText);
    },
  });
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

// --- storage volumes (spec.model.storage.volumes: contracts/modeldeployment.py StorageVolume) ---

const PURPOSES = ["modelCache", "compilationCache", "custom"];
const ACCESS_MODES = ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"];
const NO_CLASS = '""'; // typed in the storage class field: storageClassName "" (no dynamic provisioning)
// Each field of a volume with its key in the manifest: the API names spec.model.storage.volumes[i].<key> in its errors.
const VOLUME_FIELDS = [
  { key: "name", label: "Volume name", hint: "A DNS label, unique in the deployment" },
  { key: "purpose", label: "Purpose", choices: PURPOSES, hint: "At most one model cache and one compilation cache" },
  { key: "size", label: "Size", hint: "e.g. 100Gi: Jetway creates the PVC. Empty: mount an existing claim" },
  { key: "storageClassName", label: "Storage class", hint: `Only with a size. Empty: the cluster's default; ${NO_CLASS}: no dynamic provisioning` },
  { key: "accessMode", label: "Access mode", choices: ["default", ...ACCESS_MODES], hint: "Only with a size; default ReadWriteMany" },
  { key: "mountPath", label: "Mount path", hint: "Empty: /model-cache or /compilation-cache; required for custom" },
  { key: "claimName", label: "Existing claim", hint: "A PVC in the namespace, when no size is set" },
  { key: "readOnly", label: "Read only", checkbox: true },
];

// A volume as the manifest has it: what was left empty (or at its default) is left out, the rest sent as typed.
function volumeOf(values) {
  const volume = { name: values.name, purpose: values.purpose };
  if (values.size.trim() !== "") volume.size = values.size;
  if (values.storageClassName.trim() === NO_CLASS) volume.storageClassName = "";
  else if (values.storageClassName.trim() !== "") volume.storageClassName = values.storageClassName;
  if (values.accessMode !== "default") volume.accessMode = values.accessMode;
  if (values.mountPath.trim() !== "") volume.mountPath = values.mountPath;
  if (values.claimName.trim() !== "") volume.claimName = values.claimName;
  if (values.readOnly) volume.readOnly = true;
  return volume;
}

// The volume an error path is about, and its field: ["spec.model.storage.volumes[1].size"] → {index: 1, key: "size"}.
function volumePath(path) {
  const found = /^spec\.model\.storage\.volumes\[(\d+)\](?:\.([A-Za-z]+))?/.exec(path);
  return found ? { index: Number(found[1]), key: found[2] } : null;
}

function manifestOf(values, volumes = []) {
  const spec = { model: { id: values.model } };
  if (volumes.length) spec.model.storage = { volumes: volumes.map(volumeOf) };
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
  // Storage: each volume a group of fields (a fieldset), added and removed with buttons.
  const volumes = []; // {values(), controls: {key: control}, errors: {key: slot}, general, group, legend, remove}
  const storageError = h("p", { class: "field-error", id: "storage-error", "data-field": "storage" });
  const volumeList = h("div", { class: "volumes" });
  const addVolume = h("button", { type: "button", class: "quiet", id: "add-volume" }, "Add volume");
  let made = 0;
  function renumber() {
    volumes.forEach((volume, index) => {
      volume.legend.textContent = `Volume ${index + 1}`;
      volume.remove.setAttribute("aria-label", `Remove volume ${index + 1}`);
      volume.group.dataset.index = String(index);
    });
  }
  function newVolume() {
    const n = ++made;
    const cache = !volumes.some((v) => v.controls.purpose.value === "modelCache");
    const initial = cache ? { name: "model-cache", purpose: "modelCache", size: "100Gi" } : { name: `data-${n}`, purpose: "custom", size: "10Gi", mountPath: `/data-${n}` };
    const controls = {};
    const errors = {};
    const legend = h("legend");
    const group = h("fieldset", { class: "form volume" }, legend);
    for (const field of VOLUME_FIELDS) {
      const id = `volume-${n}-${field.key}`;
      let control;
      if (field.choices) control = h("select", { id, name: id }, field.choices.map((c) => h("option", { value: c }, c)));
      else if (field.checkbox) control = h("input", { id, name: id, type: "checkbox" });
      else control = h("input", { id, name: id, value: initial[field.key] || "", autocomplete: "off" });
      if (field.choices && initial[field.key]) control.value = initial[field.key];
      control.setAttribute("aria-describedby", `${id}-error`);
      controls[field.key] = control;
      errors[field.key] = h("p", { class: "field-error", id: `${id}-error`, "data-volume-field": field.key });
      group.append(
        h("div", { class: "field" }, h("label", { for: id }, field.label), control, field.hint ? h("small", {}, field.hint) : null, errors[field.key]),
      );
    }
    const general = h("p", { class: "field-error", "data-volume-field": "" });
    const remove = h("button", { type: "button", class: "quiet" }, "Remove");
    group.append(general, h("div", { class: "actions" }, remove));
    const volume = {
      controls,
      errors,
      general,
      group,
      legend,
      remove,
      values: () => Object.fromEntries(Object.entries(controls).map(([key, c]) => [key, c.type === "checkbox" ? c.checked : c.value])),
    };
    remove.addEventListener("click", () => {
      volumes.splice(volumes.indexOf(volume), 1);
      group.remove();
      renumber();
      changed();
      addVolume.focus();
    });
    volumes.push(volume);
    volumeList.append(group);
    renumber();
    changed();
    controls.name.focus();
  }
  addVolume.addEventListener("click", newVolume);
  form.append(
    h(
      "section",
      { class: "field wide", "aria-labelledby": "storage-title" },
      h("h2", { id: "storage-title" }, "Storage volumes"),
      h("small", {}, "A model cache keeps the downloaded weights across restarts (Jetway downloads them into it first)."),
      storageError,
      volumeList,
      h("div", {}, addVolume),
    ),
  );
  const general = h("ul", { class: "errors", "aria-live": "polite" });
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
    const manifest = manifestOf(values(), volumes.map((v) => v.values()));
    preview.textContent = format.value === "json" ? JSON.stringify(manifest, null, 2) : toYaml(manifest);
    return manifest;
  }
  // Each error under the field its path names: a volume's field, the volume, the storage section, a field of the form.
  function showProblems(problems) {
    const slots = [
      ...Object.entries(errors).map(([id, slot]) => [slot, inputs[id]]),
      ...volumes.flatMap((v) => [...Object.entries(v.errors).map(([key, slot]) => [slot, v.controls[key]]), [v.general, null]]),
      [storageError, null],
    ];
    for (const [slot, control] of slots) {
      slot.textContent = "";
      control?.removeAttribute("aria-invalid");
    }
    general.replaceChildren();
    const say = (slot, control, message) => {
      slot.textContent = slot.textContent ? `${slot.textContent}; ${message}` : message;
      control?.setAttribute("aria-invalid", "true");
    };
    for (const problem of problems) {
      const path = problem.path || "";
      const inVolume = volumePath(path);
      const volume = inVolume && volumes[inVolume.index];
      const field = fieldFor(path);
      if (volume && inVolume.key in volume.errors) say(volume.errors[inVolume.key], volume.controls[inVolume.key], problem.message);
      else if (volume) say(volume.general, null, `${path}: ${problem.message}`);
      else if (path.startsWith("spec.model.storage")) say(storageError, null, `${path}: ${problem.message}`);
      else if (field) say(errors[field.id], inputs[field.id], problem.message);
      else general.append(h("li", {}, path ? `${path}: ${problem.message}` : problem.message));
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
  function changed() {
    showPreview();
    clearTimeout(pause);
    pause = setTimeout(check, 250);
  }
  form.addEventListener("input", changed);
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
