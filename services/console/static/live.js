// Live pages: the API's watch (GET /v1/watch?kind=KIND, Server-Sent Events) and keyed table rows that follow it.
import { h } from "./api.js";

const enc = encodeURIComponent;

export const keyOf = (item) => `${item.metadata.namespace || ""}/${item.metadata.name}`;

// Opens the watch of a kind: `snapshot(items)` first, then `changed(item)` and `deleted({kind, namespace, name})`;
// `status(state)` says how the connection is ("live", "reconnecting", "closed"). `namespace` and `name` narrow it
// (a resource's own page watches that one alone). The watch closes itself once `root` has left the page (another
// page was opened meanwhile); the function returned closes it too (a page's cleanup).
export function watch(kind, { root, namespace, name, snapshot, changed, deleted, status = () => {} }) {
  const query = `kind=${enc(kind)}${namespace ? `&namespace=${enc(namespace)}` : ""}${name ? `&name=${enc(name)}` : ""}`;
  const source = new EventSource(`/v1/watch?${query}`);
  const gone = () => {
    if (root && !root.isConnected) {
      source.close();
      return true;
    }
    return false;
  };
  const on = (type, handle) =>
    source.addEventListener(type, (event) => {
      if (!gone()) handle(JSON.parse(event.data));
    });
  on("snapshot", (data) => {
    snapshot(data.items);
    status("live");
  });
  on("changed", (item) => changed(item));
  on("deleted", (removed) => deleted(removed));
  source.onerror = () => {
    if (!gone()) status(source.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
  };
  return () => source.close();
}

// What a connection state reads as, for a page's status line.
export function connection(state, live) {
  if (state === "closed") return "Disconnected: reload the page (or log in again).";
  if (state === "reconnecting") return "Reconnecting…";
  return live;
}

// A table body whose rows follow a watch: one row per item (by namespace/name), in key order. A row is rebuilt only
// when what it shows changed (`signature`), so a change elsewhere leaves focus and selection where they are.
export class Rows {
  constructor(body, rowOf, signature = (item) => JSON.stringify(item)) {
    this.body = body;
    this.rowOf = rowOf;
    this.signature = signature;
    this.rows = new Map(); // key → {row, sig}
  }

  get size() {
    return this.rows.size;
  }

  replaceAll(items) {
    const previous = this.rows;
    this.rows = new Map();
    for (const item of items) {
      const key = keyOf(item);
      const sig = this.signature(item);
      const kept = previous.get(key);
      this.rows.set(key, kept && kept.sig === sig ? kept : { row: this.rowOf(item), sig });
    }
    this.body.replaceChildren(...[...this.rows.keys()].sort().map((key) => this.rows.get(key).row));
  }

  upsert(item) {
    const key = keyOf(item);
    const sig = this.signature(item);
    const old = this.rows.get(key);
    if (old && old.sig === sig) return false;
    const row = this.rowOf(item);
    this.rows.set(key, { row, sig });
    if (old) {
      old.row.replaceWith(row);
      return true;
    }
    const after = [...this.rows.keys()].sort().find((other) => other > key);
    this.body.insertBefore(row, after === undefined ? null : this.rows.get(after).row);
    return true;
  }

  remove(namespace, name) {
    const key = `${namespace || ""}/${name}`;
    const old = this.rows.get(key);
    if (!old) return false;
    old.row.remove();
    this.rows.delete(key);
    return true;
  }
}

// A part of a page rebuilt only when what it shows changed: `update(signature, build)` replaces its children.
export function part(tag = "div", props = {}) {
  const node = h(tag, props);
  let shown;
  return {
    node,
    update(signature, build) {
      if (signature === shown) return false;
      shown = signature;
      node.replaceChildren(...[build()].flat().filter((c) => c !== null && c !== undefined && c !== false));
      return true;
    },
  };
}
