// What every page shares: calls to the apply API with the session cookie, a DOM builder, YAML for reading.

// A change made with the session cookie must carry this header: a cross-site form cannot set it (CSRF guard).
const CONSOLE_HEADER = { "x-jetway-console": "1" };

export class LoggedOut extends Error {}

// fetch on this origin; the session cookie goes along by itself. 401 means the session ended.
export async function request(path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, headers: { ...headers }, credentials: "same-origin" };
  if (method !== "GET") Object.assign(init.headers, CONSOLE_HEADER);
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    loggedOut();
    throw new LoggedOut("session ended");
  }
  return response;
}

export async function call(path, options) {
  const response = await request(path, options);
  const data = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  return { status: response.status, ok: response.ok, data };
}

export function loggedOut() {
  const main = document.getElementById("main");
  main.replaceChildren(
    h("h1", {}, "Logged out"),
    h("p", {}, "Your console session ended. Under ", h("code", {}, "jetway up"), ", run ", h("code", {}, "jetway console"),
      " for a new one-time login link; in a cluster, ", h("a", { href: "/ui/login" }, "log in again with your Kubernetes token"), "."),
  );
}

// h("a", {href: "#/x", class: "button"}, "text", child): text is always text (textContent), never HTML.
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function age(iso) {
  if (!iso) return "—";
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const PLAIN = /^[A-Za-z0-9_./@-][A-Za-z0-9_ ./@:-]*$/;
const LOOKS_TYPED = /^(true|false|null|yes|no|on|off|~|[-+]?[0-9][0-9_.eE+-]*)$/i;

function scalar(value) {
  if (value === null || value === undefined) return "null";
  if (typeof value !== "string") return String(value);
  const plain = PLAIN.test(value) && !LOOKS_TYPED.test(value) && !value.endsWith(" ") && !value.includes(": ");
  return plain ? value : JSON.stringify(value);
}

function nonEmpty(value) {
  return (isObject(value) && Object.keys(value).length > 0) || (Array.isArray(value) && value.length > 0);
}

function leaf(value) {
  if (isObject(value)) return "{}";
  if (Array.isArray(value)) return "[]";
  return scalar(value);
}

// Block-style YAML for reading (previews, rendered objects, states); JSON strings quote what YAML would misread.
export function toYaml(value, indent = "") {
  if (Array.isArray(value)) {
    return value
      .map((item) => (nonEmpty(item) ? `${indent}- ${toYaml(item, `${indent}  `).trimStart()}` : `${indent}- ${leaf(item)}`))
      .join("\n");
  }
  if (isObject(value)) {
    return Object.entries(value)
      .map(([key, item]) => (nonEmpty(item) ? `${indent}${scalar(key)}:\n${toYaml(item, `${indent}  `)}` : `${indent}${scalar(key)}: ${leaf(item)}`))
      .join("\n");
  }
  return indent + scalar(value);
}
