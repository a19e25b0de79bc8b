// Playground: a streamed chat through the router (relayed by the apply API), with who served it, TTFT and tokens/s.
import { call, h, request } from "./api.js";

function contentOf(chunk) {
  const choice = chunk.choices && chunk.choices[0];
  return (choice && choice.delta && choice.delta.content) || "";
}

export async function page(main) {
  const models = await call("/v1/console/models");
  const ids = models.ok ? models.data.data.map((m) => m.id) : [];
  const model = h("select", { id: "model" }, ids.map((id) => h("option", { value: id }, id)));
  const prompt = h("textarea", { id: "prompt", rows: 4 }, "Hello from the Jetway console.");
  const key = h("input", { id: "client-key", type: "password", autocomplete: "off" });
  const send = h("button", { type: "submit" }, "Send");
  const answer = h("pre", { class: "code answer", id: "answer", "aria-live": "polite", "aria-label": "Answer" });
  const stats = h("dl", { class: "facts", id: "stats" });
  const problem = h("p", { class: "error", role: "alert", hidden: models.ok && ids.length > 0 }, models.ok ? "The router serves no model yet: apply an InferencePoolMember." : models.data.error);
  const form = h(
    "form",
    { class: "form" },
    h("div", { class: "field" }, h("label", { for: "model" }, "Model"), model),
    h("div", { class: "field wide" }, h("label", { for: "prompt" }, "Message"), prompt),
    h("div", { class: "field" }, h("label", { for: "client-key" }, "Client key"), key, h("small", {}, "Only when the router requires client keys; never stored")),
    h("div", { class: "actions" }, send),
  );
  main.append(h("h1", {}, "Playground"), problem, form, h("h2", {}, "Answer"), answer, stats);

  function show(figures) {
    stats.replaceChildren(...Object.entries(figures).flatMap(([term, value]) => [h("dt", {}, term), h("dd", { "data-stat": term }, value)]));
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    send.disabled = true;
    answer.textContent = "";
    delete answer.dataset.done;
    problem.hidden = true;
    stats.replaceChildren();
    const started = performance.now();
    let first = null;
    let pieces = 0;
    let usage = null;
    try {
      const headers = key.value ? { "x-jetway-client-key": key.value } : {};
      const body = { model: model.value, stream: true, messages: [{ role: "user", content: prompt.value }] };
      const response = await request("/v1/console/chat", { method: "POST", body, headers });
      const member = response.headers.get("x-jetway-member") || "—";
      if (!response.ok) {
        const failed = await response.json().catch(() => ({}));
        Object.assign(problem, { hidden: false, textContent: `${response.status}: ${failed.error?.message || failed.error || response.statusText}` });
        return;
      }
      // Server-Sent Events from the router: `data: {chunk}` lines, then `data: [DONE]`.
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        const lines = buffer.split("\n");
        buffer = lines.pop();
        for (const line of lines) {
          if (!line.startsWith("data:") || line.includes("[DONE]")) continue;
          const chunk = JSON.parse(line.slice(5));
          if (chunk.usage) usage = chunk.usage;
          const text = contentOf(chunk);
          if (!text) continue;
          if (first === null) first = performance.now();
          pieces += 1;
          answer.textContent += text;
        }
      }
      const ended = performance.now();
      const tokens = usage?.completion_tokens ?? pieces;
      const seconds = first === null ? 0 : (ended - first) / 1000;
      show({
        Member: member,
        TTFT: first === null ? "—" : `${Math.round(first - started)} ms`,
        Tokens: `${tokens}${usage ? "" : " (chunks)"}`,
        "Tokens/s": seconds > 0 ? (tokens / seconds).toFixed(1) : "—",
      });
      answer.dataset.done = "true";
    } finally {
      send.disabled = false;
    }
  });
}
