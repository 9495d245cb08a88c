// The compare view: one query through two embedders, both lists side by side with how each page
// moved, and their agreement (Jaccard, RBO, Kendall's tau-b).

import { api, models, showError } from "../api.js";
import { field, fmt, h, main, messageRegion, sr } from "../dom.js";
import { onQuerySubmit, searchUrl } from "../nav.js";

export async function renderCompare(p) {
  const q = p.get("q") || "";
  const k = Math.min(50, Math.max(1, parseInt(p.get("k") || "10", 10) || 10));
  document.title = q ? `Compare: ${q} — Refindery` : "Compare embedders — Refindery";
  const qi = h("input", { id: "cq", type: "search", value: q, autocomplete: "off", "aria-required": "true",
    placeholder: "A query to run through both embedders" });
  const a = h("select", { id: "model-a" });
  const b = h("select", { id: "model-b" });
  const ki = h("select", { id: "ck" }, [5, 10, 20].map((n) => h("option", { value: n, selected: n === k }, String(n))));
  const form = h("form", { id: "compare-form", "aria-label": "Compare two embedders" },
    h("div", { class: "searchbar" }, h("label", { for: "cq", class: "sr-only" }, "Query"), qi,
      h("button", { type: "submit" }, "Compare")),
    h("div", { class: "filters" }, field("model-a", "Embedder A", a), field("model-b", "Embedder B", b),
      field("ck", "Top k", ki)));
  const out = h("section", { id: "compare-out", "aria-label": "Comparison" });
  main.replaceChildren(h("h1", { class: "sr-only" }, "Compare embedders"), form, messageRegion(), out);
  qi.focus();

  let reg;
  try {
    reg = await models();
  } catch (err) {
    showError(err);
    return;
  }
  const embedders = reg.models.filter((m) => m.kind === "embedder");
  const embedding = (m) => m.embedding && m.embedding.state === "embedding";
  const label = (m) => `${m.name}${m.active ? " (active)" : ""} · ${m.backend}` +
    (!m.installed ? " · not installed" : embedding(m) ? ` · embedding, ${m.embedding.percent || 0} %`
      : ` · ${m.chunks_embedded} chunks embedded`);
  for (const sel of [a, b]) {
    sel.replaceChildren(...embedders.map((m) => h("option", { value: m.name, disabled: !m.installed }, label(m))));
  }
  const others = embedders.filter((m) => !m.active && m.installed && !embedding(m));
  const pickB = others.find((m) => m.chunks_embedded > 0) || others[0] || embedders.find((m) => !m.active);
  a.value = p.get("a") || reg.active;
  b.value = p.get("b") || (pickB ? pickB.name : reg.active);

  onQuerySubmit(form, qi, "Type a query to compare the embedders on",
    () => searchUrl({ view: "compare", q: qi.value.trim(), a: a.value, b: b.value, k: ki.value }));
  if (!q) {
    out.append(h("p", { class: "empty" }, "Runs the whole search pipeline once per embedder over one shared BM25 " +
      "arm, and shows both lists with how far they agree. An embedder is compared once it has embedded the " +
      "corpus (`refindery models --embed NAME`; beside a running server it embeds in the server's background, " +
      "and this list shows how far it is)."));
    return;
  }
  out.append(h("p", { class: "status", role: "status" }, "Comparing…"));
  out.setAttribute("aria-busy", "true");
  let res;
  try {
    res = await api("POST", "/v1/compare", { query: q, models: [a.value, b.value], k });
  } catch (err) {
    out.replaceChildren();
    out.setAttribute("aria-busy", "false");
    showError(err);
    return;
  }
  out.setAttribute("aria-busy", "false");
  const ag = res.agreement[0];
  const [ra, rb] = res.runs;
  const rankIn = (run) => new Map(run.pages.map((x) => [x.page_id, x.rank]));
  const ranksA = rankIn(ra);
  const ranksB = rankIn(rb);
  out.replaceChildren(
    h("dl", { class: "agreement", id: "agreement", "aria-label": "Agreement" },
      h("div", {}, h("dt", {}, `Jaccard@${ag.k}`), h("dd", {}, fmt(ag.jaccard, 3))),
      h("div", {}, h("dt", {}, `RBO (p=${ag.rbo_p})`), h("dd", {}, fmt(ag.rbo_ext, 3))),
      h("div", {}, h("dt", {}, "Kendall's τ-b (shared)"), h("dd", {}, fmt(ag.kendall_tau_b, 3))),
      h("div", {}, h("dt", {}, "Shared pages"), h("dd", {}, `${ag.shared} of ${ag.k}`))),
    h("div", { class: "columns" },
      compareColumn(ra, "A", ranksB, "B", false), compareColumn(rb, "B", ranksA, "A", true)));
}

function compareColumn(run, side, otherRanks, otherSide, isB) {
  const items = run.pages.map((x) => {
    const other = otherRanks.get(x.page_id);
    let mark;
    if (other === undefined) {
      mark = h("span", { class: "move only" }, `only in ${side}`);
    } else if (!isB) {
      mark = h("span", { class: "move" }, `→ #${other} in ${otherSide}`);
    } else {
      const d = other - x.rank;
      mark = d === 0 ? h("span", { class: "move same" }, "= same rank")
        : d > 0 ? h("span", { class: "move up" }, `▲ ${d}`, sr(` up from #${other} in ${otherSide}`))
          : h("span", { class: "move down" }, `▼ ${-d}`, sr(` down from #${other} in ${otherSide}`));
    }
    return h("li", { "data-page-id": x.page_id, class: other === undefined ? "unshared" : "shared" },
      h("a", { href: `/?view=page&id=${encodeURIComponent(x.page_id)}`, "data-nav": true, "data-item": true,
        "data-side": side }, x.title || x.url),
      " ", mark, h("div", { class: "meta" }, h("span", {}, x.domain || ""), h("span", { class: "score" },
        `score ${fmt(x.score)}`)));
  });
  return h("section", { class: "column", id: `list-${side.toLowerCase()}`, "aria-label": `${side}: ${run.model}` },
    h("h2", {}, `${side}: ${run.model}`, h("small", {}, ` ${Math.round(run.timings_ms.total)} ms`)),
    h("ol", {}, items));
}
