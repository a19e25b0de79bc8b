// Timeline: every event about one resource in stream order, and its state as of any of them (`jetway replay --until`).
import { call, h, toYaml } from "./api.js";

const enc = encodeURIComponent;

export async function page(main, kind, namespace, name) {
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
  let nextAfter = null;
  const back = namespace ? `#/deployments/${enc(namespace)}/${enc(name)}` : "#/deployments";
  main.append(
    h("div", { class: "bar" }, h("h1", {}, `Timeline: ${kind}/${name}`), h("a", { class: "button quiet", href: back }, "Back")),
    problem,
    h("div", { class: "slider" }, label, slider),
    h(
      "div",
      { class: "split timeline" },
      h(
        "section",
        { "aria-label": "Events" },
        h("div", { class: "bar" }, h("h2", {}, "Events"), facet),
        h(
          "div",
          { class: "scroll tall" },
          h(
            "table",
            { class: "grid", "aria-label": "Events" },
            h("thead", {}, h("tr", {}, ["Seq", "Facet by producer", "Type", "Summary", "Caused by", "Correlation"].map((c) => h("th", { scope: "col" }, c)))),
            body,
          ),
        ),
        more,
      ),
      h("section", { "aria-label": "State" }, h("h2", {}, "State"), state),
    ),
  );

  // A link to another event of this history moves the slider there; one outside it shows its id.
  function link(id) {
    if (!id) return "—";
    const index = events.findIndex((e) => e.id === id);
    if (index < 0) return h("code", { title: id }, `${id.slice(0, 8)}…`);
    const follow = (event) => {
      event.stopPropagation(); // not also a click on the row around it
      select(index, true);
    };
    return h("button", { type: "button", class: "link", title: id, onclick: follow }, `#${events[index].seq}`);
  }
  function rows() {
    body.replaceChildren(
      ...events.map((e, index) =>
        h(
          "tr",
          { "data-seq": e.seq, "data-facet": e.facet || "", hidden: facet.value !== "" && e.facet !== facet.value, onclick: () => select(index, false) },
          [e.seq, e.facet ? `${e.facet} by ${e.producer}` : "", e.type, e.summary || ""].map((v) => h("td", {}, v)),
          h("td", {}, link(e.causation_id)),
          h("td", {}, link(e.correlation_id)),
        ),
      ),
    );
    const facets = [...new Set(events.map((e) => e.facet).filter(Boolean))];
    const chosen = facet.value;
    facet.replaceChildren(h("option", { value: "" }, "every facet"), ...facets.map((f) => h("option", { value: f, selected: f === chosen }, f)));
  }
  let asked = 0;
  async function select(index, scroll) {
    slider.value = String(index);
    const chosen = events[index];
    if (!chosen) return;
    label.textContent = `As of event ${index + 1} of ${events.length}: seq ${chosen.seq}, ${chosen.type} (${chosen.time || ""})`;
    for (const row of body.children) row.classList.toggle("current", row.dataset.seq === String(chosen.seq));
    const row = body.querySelector(`tr[data-seq="${chosen.seq}"]`);
    if (scroll && row) row.scrollIntoView({ block: "nearest" });
    const mine = ++asked;
    const answer = await call(`${base}?${scope}until=${chosen.seq}`);
    if (mine !== asked) return; // the slider moved on meanwhile
    state.dataset.seq = String(chosen.seq);
    state.textContent = answer.ok ? (answer.data.state ? toYaml(answer.data.state) : "(it did not exist at this point)") : answer.data.error;
  }
  async function load() {
    const after = nextAfter === null ? "" : `after=${nextAfter}&`;
    const answer = await call(`${base}?${scope}${after}limit=200`);
    if (!answer.ok) {
      Object.assign(problem, { hidden: false, textContent: answer.data.error });
      return;
    }
    events.push(...answer.data.events);
    nextAfter = answer.data.next_after;
    more.hidden = nextAfter === null;
    slider.max = String(Math.max(0, events.length - 1));
    rows();
    await select(events.length - 1, false);
  }
  slider.addEventListener("input", () => select(Number(slider.value), true));
  facet.addEventListener("change", rows);
  more.addEventListener("click", load);
  await load();
}
