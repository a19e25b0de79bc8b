// Timeline: every event about one resource in stream order, its state as of any of them (`jetway replay --until`), and
// what changed between two of them (the API's `?since=A&until=B`: the diff is computed by services/console/timeline.py).
// `#/timeline/KIND/NS/NAME?event=ID&seq=SEQ` opens it at one event (pages are loaded until it is there): where a
// causation or correlation link leads when its event is another resource's (`GET /v1/console/events/ID`).
import { call, h, toYaml } from "./api.js";

const enc = encodeURIComponent;
const OVERSCAN = 20; // rows painted above and below the visible ones

export async function page(main, kind, namespace, named) {
  // The event to open at rides after the name (a name has no "?": the links here encode one); app.js passes it along.
  const [name, query = ""] = named.split("?");
  const target = new URLSearchParams(query);
  const wanted = target.get("event");
  const wantedSeq = Number(target.get("seq")) || undefined;
  const base = `/v1/kinds/${enc(kind)}/${enc(name)}/history`;
  const scope = namespace ? `namespace=${enc(namespace)}&` : "";
  const events = [];
  const body = h("tbody");
  const slider = h("input", { type: "range", id: "as-of", min: 0, max: 0, value: 0, step: 1 });
  const label = h("label", { for: "as-of", id: "as-of-label" }, "As of");
  const facet = h("select", { id: "facet", "aria-label": "Filter by facet" }, h("option", { value: "" }, "every facet"));
  const more = h("button", { type: "button", class: "quiet", hidden: true }, "Load more");
  const state = h("pre", { class: "code", id: "state", "aria-live": "polite", "aria-label": "State as of the chosen event" });
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const followed = h("p", { class: "note", id: "followed", role: "status" }); // where a followed link led
  // The diff: "Compare from this event" pins point A; the slider is point B; the changes from A to B are listed.
  const compare = h("button", { type: "button", class: "quiet", id: "compare" }, "Compare from this event");
  const stop = h("button", { type: "button", class: "quiet", hidden: true }, "Stop comparing");
  const comparing = h("span", { class: "note", id: "comparing" });
  const changesNote = h("p", { class: "note", id: "changes-note", "aria-live": "polite" });
  const changesBody = h("tbody");
  const changesTable = h(
    "table",
    { class: "grid changes", "aria-label": "Changes" },
    h("thead", {}, h("tr", {}, ["Field", "Change", "Before (A)", "After (B)"].map((c) => h("th", { scope: "col" }, c)))),
    changesBody,
  );
  const changes = h(
    "section",
    { "aria-label": "Changes", id: "changes", hidden: true },
    h("h2", {}, "Changes"),
    changesNote,
    h("div", { class: "scroll" }, changesTable),
  );
  let pinned = -1; // the index of point A, the event compared from; -1 when not comparing
  let nextAfter = null;
  let here = null; // this history's resource as the API names it ({kind, namespace, name}), from its first page
  const byId = new Map(); // event id → its index in `events`: a causation link is found without a scan
  const facets = new Set();
  let chosen = -1; // the index of the event the slider is on
  let shown = []; // the indexes of the events the facet filter lets through, in order
  let painted = [0, 0]; // the part of `shown` that has rows now
  let rowHeight = 0; // measured from the first row painted
  const box = h("div", { class: "scroll tall virtual" });
  const back = namespace ? `#/deployments/${enc(namespace)}/${enc(name)}` : "#/deployments";
  const table = h(
    "table",
    { class: "grid", "aria-label": "Events" },
    h("thead", {}, h("tr", {}, ["Seq", "Facet by producer", "Type", "Summary", "Caused by", "Correlation"].map((c) => h("th", { scope: "col" }, c)))),
    body,
  );
  box.append(table);
  main.append(
    h("div", { class: "bar" }, h("h1", {}, `Timeline: ${kind}/${name}`), h("a", { class: "button quiet", href: back }, "Back")),
    problem,
    followed,
    h("div", { class: "slider" }, label, slider, h("div", { class: "bar" }, compare, comparing, stop)),
    h(
      "div",
      { class: "split timeline" },
      h(
        "section",
        { "aria-label": "Events" },
        h("div", { class: "bar" }, h("h2", {}, "Events"), facet),
        box,
        more,
      ),
      h("div", {}, changes, h("section", { "aria-label": "State" }, h("h2", {}, "State"), state)),
    ),
  );

  // A link to another event of this history moves the slider there and the keyboard to its row. Any other id (an
  // event of another resource, or of a page not loaded yet) is asked where it lives, then followed there.
  function link(id, from) {
    if (!id) return "—";
    const index = byId.get(id) ?? -1;
    if (index >= 0) {
      const go = (event) => {
        event.stopPropagation(); // not also a click on the row around it
        reach(index);
      };
      return h("button", { type: "button", class: "link", title: id, onclick: go }, `#${events[index].seq}`);
    }
    const find = (event) => {
      event.stopPropagation();
      follow(id, from.seq);
    };
    return h("button", { type: "button", class: "link", title: `${id}: find this event`, onclick: find }, `${id.slice(0, 8)}…`);
  }
  // The event's row: chosen (the slider on it), in view, and focused.
  function reach(index) {
    if (!shown.includes(index)) {
      facet.value = ""; // the facet filter hid it: every facet again
      filter();
    }
    const done = select(index, true); // its row is painted before the state is asked for
    body.querySelector(`tr[data-seq="${events[index].seq}"]`)?.focus();
    return done;
  }
  // Load pages until the event `id` is there (or the history ends, or passes `seq`), then go to it.
  async function open(id, seq) {
    while (!byId.has(id) && nextAfter !== null && !(seq !== undefined && events.length && events[events.length - 1].seq >= seq)) {
      if (!(await load())) return false;
    }
    const index = byId.get(id);
    if (index === undefined) {
      const at = seq === undefined ? "" : ` (seq ${seq})`;
      Object.assign(problem, { hidden: false, textContent: `Event ${id}${at} is not in this timeline (no longer stored, or not this resource's).` });
      return false;
    }
    const e = events[index];
    followed.textContent = `Event ${id.slice(0, 8)}… is seq ${e.seq} here: ${e.type}${e.facet ? ` (${e.facet} by ${e.producer})` : ""}.`;
    await reach(index);
    return true;
  }
  // An id not loaded here: where does it live? This history (a later page) or another resource's timeline.
  async function follow(id, before) {
    problem.hidden = true;
    followed.textContent = `Looking for event ${id.slice(0, 8)}…`;
    const answer = await call(`/v1/console/events/${enc(id)}${before ? `?before=${before}` : ""}`);
    if (!answer.ok) {
      followed.textContent = "";
      Object.assign(problem, { hidden: false, textContent: `Event ${id}: ${answer.data.error}` });
      return;
    }
    const where = answer.data;
    const same = here && where.kind === here.kind && (where.namespace || "") === here.namespace && where.name === here.name;
    if (same) {
      await open(id, where.seq);
      return;
    }
    location.hash = `#/timeline/${enc(where.kind)}/${enc(where.namespace || "")}/${enc(where.name)}?event=${enc(id)}&seq=${where.seq}`;
  }
  // Only the rows in view are in the DOM (and a margin of OVERSCAN each side): 10,000 events scroll like 60.
  // Every row has the same height (one line each, cut with an ellipsis; the whole text on hover), so the
  // table's margins stand for the rows above and below, and a scroll position is a row index.
  function rowFor(index) {
    const e = events[index];
    const summary = e.summary || "";
    return h(
      "tr",
      {
        "data-seq": e.seq,
        "data-facet": e.facet || "",
        class: [index === chosen && "current", index === pinned && "pinned"].filter(Boolean).join(" ") || undefined,
        "aria-current": index === chosen ? "true" : undefined,
        tabindex: -1, // focused when a link leads to it (not a Tab stop of its own)
        title: index === pinned ? "A: compared from here" : undefined,
        onclick: () => select(index, false),
      },
      [e.seq, e.facet ? `${e.facet} by ${e.producer}` : "", e.type].map((v) => h("td", {}, v)),
      h("td", { title: summary }, summary),
      h("td", {}, link(e.causation_id, e)),
      h("td", {}, link(e.correlation_id, e)),
    );
  }
  function paint(force = false) {
    const height = rowHeight || 32;
    const top = Math.max(0, Math.floor(box.scrollTop / height) - OVERSCAN);
    const bottom = Math.min(shown.length, Math.ceil((box.scrollTop + box.clientHeight) / height) + OVERSCAN);
    if (!force && painted[0] === top && painted[1] === bottom) return;
    painted = [top, bottom];
    // the keyboard's place survives the rows being rebuilt: on the same event's row when it is still painted
    const focused = body.contains(document.activeElement) ? document.activeElement.closest("tr")?.dataset.seq : undefined;
    body.replaceChildren(...shown.slice(top, bottom).map(rowFor));
    if (focused !== undefined) body.querySelector(`tr[data-seq="${focused}"]`)?.focus({ preventScroll: true });
    table.style.marginTop = `${top * height}px`;
    table.style.marginBottom = `${(shown.length - bottom) * height}px`;
    if (!rowHeight && body.firstElementChild) {
      rowHeight = body.firstElementChild.getBoundingClientRect().height;
      if (rowHeight) paint(true);
    }
  }
  // A page of events: indexed, and shown when the facet filter lets them through.
  function append(from) {
    for (let index = from; index < events.length; index++) {
      const e = events[index];
      if (e.id) byId.set(e.id, index);
      if (e.facet && !facets.has(e.facet)) {
        facets.add(e.facet);
        facet.append(h("option", { value: e.facet }, e.facet));
      }
      if (facet.value === "" || e.facet === facet.value) shown.push(index);
    }
    paint(true);
  }
  function filter() {
    shown = events.map((e, index) => index).filter((index) => facet.value === "" || events[index].facet === facet.value);
    paint(true);
  }
  // The chosen event's row in view (the middle when it was far away), then painted.
  function reveal(index) {
    const at = shown.indexOf(index);
    if (at < 0) return;
    const height = rowHeight || 32;
    const head = table.tHead?.getBoundingClientRect().height || 0;
    const y = at * height;
    if (y < box.scrollTop || y + height + head > box.scrollTop + box.clientHeight) box.scrollTop = Math.max(0, y - box.clientHeight / 2);
  }
  // A value as a cell shows it: text as it is, anything else as compact JSON; absent is a dash.
  function cell(change, side) {
    if (!(side in change)) return h("span", { class: "note" }, "—");
    const value = change[side];
    return h("code", {}, typeof value === "string" ? value : JSON.stringify(value));
  }
  function showChanges(answer, a, b) {
    const list = answer.changes || [];
    const from = `seq ${a.seq}`;
    const to = `seq ${b.seq}`;
    changesNote.textContent = list.length
      ? `${list.length} field${list.length === 1 ? "" : "s"} changed from ${from} (A) to ${to} (B)${answer.existed_since ? "" : "; it did not exist at A"}`
      : `No change from ${from} (A) to ${to} (B)`;
    changesBody.replaceChildren(
      ...list.map((c) =>
        h(
          "tr",
          { "data-path": c.path, "data-change": c.change, class: `change-${c.change}` },
          h("td", {}, h("code", {}, c.path)),
          h("td", {}, c.change),
          h("td", {}, cell(c, "old")),
          h("td", {}, cell(c, "new")),
        ),
      ),
    );
    changes.hidden = false;
  }
  function pin(index) {
    pinned = index;
    const a = events[index];
    comparing.textContent = a ? `Comparing from A: seq ${a.seq}, ${a.type}. Move the slider to choose B.` : "";
    stop.hidden = index < 0;
    if (index < 0) changes.hidden = true;
    if (chosen >= 0) select(chosen, false);
  }
  compare.addEventListener("click", () => pin(chosen));
  stop.addEventListener("click", () => {
    pin(-1);
    compare.focus();
  });

  let asked = 0;
  async function select(index, scroll) {
    slider.value = String(index);
    const event = events[index];
    if (!event) return;
    label.textContent = `As of event ${index + 1} of ${events.length}: seq ${event.seq}, ${event.type} (${event.time || ""})`;
    chosen = index;
    if (scroll) reveal(index);
    paint(true);
    const mine = ++asked;
    const a = pinned >= 0 ? events[pinned] : null;
    const answer = await call(`${base}?${scope}until=${event.seq}${a ? `&since=${a.seq}` : ""}`);
    if (mine !== asked) return; // the slider moved on meanwhile
    state.dataset.seq = String(event.seq);
    state.textContent = answer.ok ? (answer.data.state ? toYaml(answer.data.state) : "(it did not exist at this point)") : answer.data.error;
    if (a && answer.ok) showChanges(answer.data, a, event);
    else if (a) changesNote.textContent = answer.data.error;
  }
  // The first page selects its last event (unless an event was asked for); a later page keeps the slider where it was.
  // It answers whether a page came.
  let loading = null;
  async function fetchPage() {
    const after = nextAfter === null ? "" : `after=${nextAfter}&`;
    const answer = await call(`${base}?${scope}${after}limit=200`);
    if (!answer.ok) {
      Object.assign(problem, { hidden: false, textContent: answer.data.error });
      return false;
    }
    here ??= { kind: answer.data.kind, namespace: answer.data.namespace || "", name: answer.data.name };
    const from = events.length;
    events.push(...answer.data.events);
    nextAfter = answer.data.next_after;
    more.hidden = nextAfter === null;
    slider.max = String(Math.max(0, events.length - 1));
    append(from);
    if (from === 0 && !wanted) await select(events.length - 1, false);
    else label.textContent = label.textContent.replace(/ of \d+:/, ` of ${events.length}:`);
    return true;
  }
  function load() {
    loading ??= fetchPage().finally(() => {
      loading = null;
    });
    return loading;
  }
  slider.addEventListener("input", () => select(Number(slider.value), true));
  facet.addEventListener("change", filter);
  more.addEventListener("click", load);
  // Scrolling near the end of the loaded rows loads the next page (the button stays, for the keyboard).
  let frame = 0;
  box.addEventListener("scroll", () => {
    if (!frame) {
      frame = requestAnimationFrame(() => {
        frame = 0;
        paint();
      });
    }
    if (nextAfter !== null && box.scrollTop + box.clientHeight > box.scrollHeight - 400) load();
  });
  const first = await load();
  if (first && wanted && !(await open(wanted, wantedSeq)) && events.length) await select(events.length - 1, false);
}
