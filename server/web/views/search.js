// The search view: the query, its filters (with the workspace's facets), the ranked pages with
// their snippets, explain blocks and similar pages, and the pager.

import { api, facets, showError } from "../api.js";
import { field, fmt, h, main, messageRegion, safeHref, shortDate } from "../dom.js";
import { go, onQuerySubmit, redraw, searchUrl, state as app } from "../nav.js";

function nextDay(date) {
  const d = new Date(`${date}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + 1);
  return d.toISOString().slice(0, 10);
}

function searchState(p) {
  return {
    q: p.get("q") || "", page: Math.max(1, parseInt(p.get("page") || "1", 10) || 1),
    k: Math.min(50, Math.max(1, parseInt(p.get("k") || "10", 10) || 10)),
    domain: p.get("domain") || "", from: p.get("from") || "", to: p.get("to") || "",
    cluster: p.get("cluster") || "", entity: p.get("entity") || "", explain: p.get("explain") === "1",
    ws: p.get("ws") || "",
  };
}

export async function renderSearch(p) {
  const st = searchState(p);
  document.title = st.q ? `${st.q} — Refindery` : "Refindery";
  const q = h("input", { id: "q", type: "search", name: "q", value: st.q, autocomplete: "off",
    placeholder: "What do you remember of the page? Words, a phrase, or its URL",
    "aria-required": "true",
    "aria-describedby": "q-hint" });
  const domain = h("input", { id: "f-domain", list: "domains", value: st.domain, autocomplete: "off",
    placeholder: "any" });
  const from = h("input", { id: "f-from", type: "date", value: st.from });
  const to = h("input", { id: "f-to", type: "date", value: st.to });
  const cluster = h("select", { id: "f-cluster" }, h("option", { value: "" }, "any"));
  const entity = h("input", { id: "f-entity", list: "entities", value: st.entity, autocomplete: "off",
    placeholder: "any" });
  const perPage = h("select", { id: "f-k" },
    [10, 20, 50].map((n) => h("option", { value: n, selected: n === st.k }, String(n))));
  const explain = h("input", { id: "explain", type: "checkbox", checked: st.explain });
  const filtersOn = Boolean(st.domain || st.from || st.to || st.cluster || st.entity);

  const form = h("form", { role: "search", id: "search-form", "aria-label": "Search pages" },
    h("div", { class: "searchbar" },
      h("label", { for: "q", class: "sr-only" }, "Search pages"), q,
      h("button", { type: "submit" }, "Search")),
    h("small", { id: "q-hint", class: "hint" }, "Enter searches. ↓ moves into the results."),
    h("details", { id: "filters", open: filtersOn || undefined },
      h("summary", {}, "Filters", filtersOn ? h("span", { class: "badge" }, "on") : null),
      h("div", { class: "filters" },
        field("f-domain", "Domain", domain),
        field("f-from", "Last seen from", from),
        field("f-to", "Last seen until", to),
        field("f-cluster", "Cluster", cluster),
        field("f-entity", "Entity", entity),
        field("f-k", "Per page", perPage),
        h("div", { class: "field" }, h("button", { type: "button", id: "clear-filters", onclick: () => {
          go(searchUrl({ q: st.q, k: st.k, explain: st.explain, ws: st.ws }));
        } }, "Clear filters")))),
    h("div", { class: "field inline" }, explain,
      h("label", { for: "explain" }, "Explain ranking (arm ranks, RRF, rerank, decay, pin)")),
    h("datalist", { id: "domains" }), h("datalist", { id: "entities" }));

  const state = () => ({
    q: q.value.trim(), k: perPage.value === "10" ? undefined : perPage.value, domain: domain.value.trim(),
    from: from.value, to: to.value, cluster: cluster.value, entity: entity.value.trim(), explain: explain.checked,
    ws: st.ws,
  });
  onQuerySubmit(form, q, "Type something to search for", () => searchUrl(state()));
  explain.addEventListener("change", () => {
    if (st.q) go(searchUrl({ ...state(), q: st.q, page: st.page > 1 ? st.page : undefined }), { replace: true });
  });

  const results = h("section", { id: "results", "aria-label": "Results", "aria-busy": "false" });
  main.replaceChildren(form, messageRegion(), results);
  q.focus();
  if (st.q) q.select();

  facets(st.ws).then((f) => {
    document.getElementById("domains")?.replaceChildren(
      ...f.domains.map((d) => h("option", { value: d.domain }, `${d.pages} pages`)));
    document.getElementById("entities")?.replaceChildren(
      ...f.entities.map((e) => h("option", { value: e.canonical }, `${e.pages} pages`)));
    for (const c of f.clusters) {
      const label = `#${c.cluster_id} · ${c.pages} pages${c.titles.length ? " · " + c.titles.join("; ") : ""}`;
      cluster.append(h("option", { value: c.cluster_id, selected: String(c.cluster_id) === st.cluster }, label));
    }
    if (!f.clusters.length) cluster.append(h("option", { value: "", disabled: true }, "no clusters yet"));
    if (st.cluster && !f.clusters.some((c) => String(c.cluster_id) === st.cluster)) {
      cluster.append(h("option", { value: st.cluster, selected: true }, `#${st.cluster} (not live)`));
    }
  }).catch((err) => showError(err));

  if (!st.q) {
    results.append(h("p", { class: "empty" }, "Search the pages you have seen. Filters narrow by domain, when you " +
      "last saw a page, its cluster or the entities it mentions."));
    return;
  }
  const filters = {};
  if (st.domain) filters.domain = [st.domain];
  if (st.from) filters.after = `${st.from}T00:00:00Z`;
  if (st.to) filters.before = `${nextDay(st.to)}T00:00:00Z`;
  if (st.cluster) filters.cluster_id = [Number(st.cluster)];
  if (st.entity) filters.entity = [st.entity];
  const req = { query: st.q, k: st.k, offset: (st.page - 1) * st.k, explain: st.explain };
  if (Object.keys(filters).length) req.filters = filters;
  if (st.ws) req.workspace = st.ws;

  results.setAttribute("aria-busy", "true");
  results.append(h("p", { class: "status", role: "status" }, "Searching…"));
  let res;
  try {
    res = await api("POST", "/v1/search", req);
  } catch (err) {
    results.replaceChildren();
    results.setAttribute("aria-busy", "false");
    showError(err);
    return;
  }
  app.lastSearch = { queryId: res.query_id, pageIds: new Set(res.pages.map((x) => x.page_id)) };
  results.setAttribute("aria-busy", "false");
  const first = res.total ? res.offset + 1 : 0;
  const last = res.offset + res.pages.length;
  const summary = res.total
    ? `Results ${first}–${last} of ${res.total} pages · ${Math.round(res.timings_ms.total)} ms`
    : (res.offset > 0 ? `No results past ${res.offset} — there are ${res.total} in all` : "No pages match.");
  const list = h("ol", { class: "results", start: first || 1 },
    res.pages.map((hit) => resultItem(hit, st)));
  const pageCount = Math.max(1, Math.ceil(res.total / st.k));
  const pager = h("nav", { class: "pager", "aria-label": "Result pages" },
    h("button", { type: "button", id: "prev", disabled: st.page <= 1 || undefined,
      onclick: () => turn(-1) }, "← Previous"),
    h("span", {}, `Page ${st.page} of ${pageCount}`),
    h("button", { type: "button", id: "next", disabled: last >= res.total || undefined,
      onclick: () => turn(+1) }, "Next →"));
  results.replaceChildren(h("p", { class: "summary", role: "status", id: "summary" }, summary), list,
    res.total > st.k || st.page > 1 ? pager : null);

  function turn(step) {
    const page = st.page + step;
    if (page < 1 || (step > 0 && last >= res.total)) return;
    history.pushState({ inApp: true }, "", searchUrl({ ...state(), q: st.q, page: page > 1 ? page : undefined }));
    redraw().then(() => document.querySelector("#results [data-item]")?.focus());
  }
  results.turn = turn;
}

function resultItem(hit, st) {
  const title = hit.title || hit.url;
  const link = h("a", { href: `/?view=page&id=${encodeURIComponent(hit.page_id)}`, "data-nav": true,
    "data-item": true, "data-page-id": hit.page_id, class: "title" }, title);
  const similarBox = h("div", { class: "similar", hidden: true });
  const simButton = h("button", { type: "button", class: "link-button", "aria-expanded": "false",
    "aria-controls": `sim-${hit.page_id}`, onclick: () => toggleSimilar(hit.page_id, simButton, similarBox) },
  "Similar pages");
  similarBox.id = `sim-${hit.page_id}`;
  return h("li", { class: "result", "data-page-id": hit.page_id },
    h("article", { "aria-label": title },
      h("h2", {}, link, hit.pinned ? h("span", { class: "badge pin", title: "pinned: exact match" },
        `pinned (${hit.pinned})`) : null,
        hit.shortcut ? h("span", { class: "badge pin", title: `you chose it for “${hit.shortcut.query}”` },
          "chosen before") : null),
      h("div", { class: "url" }, hit.url),
      h("div", { class: "meta" },
        h("span", {}, hit.domain || "—"),
        h("span", {}, "last seen ", h("time", { datetime: hit.last_seen, title: hit.last_seen },
          shortDate(hit.last_seen))),
        hit.cluster_id !== null ? h("span", {}, `cluster #${hit.cluster_id}`) : null,
        hit.entities.length ? h("span", {}, hit.entities.join(", ")) : null,
        h("span", { class: "score" }, `score ${fmt(hit.score)}`)),
      hit.snippets.map((s) => h("p", { class: "snippet" },
        s.section_path.length ? h("span", { class: "section" }, s.section_path.join(" › ") + ": ") : null,
        marked(s.text, s.highlights))),
      h("div", { class: "actions" }, simButton,
        safeHref(hit.url) ? h("a", { href: safeHref(hit.url), rel: "noopener noreferrer", target: "_blank" },
          "Open original ↗") : ""),
      hit.explain ? explainBlock(hit) : null,
      similarBox));
}

// The snippet's text with the matched words in <mark>; long chunks are cut to a window that starts
// just before the first match. Offsets from the API count code points, so slice code points too.
function marked(text, spans = [], max = 360) {
  const cps = Array.from(text);
  let start = 0;
  let end = cps.length;
  if (cps.length > max) {
    const firstMatch = spans.length ? spans[0][0] : 0;
    start = Math.max(0, firstMatch - 100);
    while (start > 0 && start < firstMatch && cps[start - 1] !== " ") start++;
    end = Math.min(cps.length, start + max);
    while (end < cps.length && end > start + max / 2 && cps[end] !== " ") end--;
  }
  const out = [];
  if (start > 0) out.push("… ");
  let pos = start;
  for (const [s, e] of spans) {
    if (e <= start || s >= end) continue;
    const s2 = Math.max(s, start);
    const e2 = Math.min(e, end);
    if (s2 > pos) out.push(cps.slice(pos, s2).join(""));
    out.push(h("mark", {}, cps.slice(s2, e2).join("")));
    pos = e2;
  }
  if (pos < end) out.push(cps.slice(pos, end).join(""));
  if (end < cps.length) out.push(" …");
  return out;
}

const EXPLAIN_ROWS = 5; // chunks shown per page before "show all"

function explainBlock(hit) {
  const x = hit.explain;
  const rows = x.chunks.map((c, i) => h("tr", { class: i >= EXPLAIN_ROWS ? "more" : null, hidden: i >= EXPLAIN_ROWS },
    h("th", { scope: "row" }, String(c.chunk_id)),
    h("td", {}, c.dense ? `#${c.dense.rank} (${fmt(c.dense.score, 3)})` : "—"),
    h("td", {}, c.sparse ? `#${c.sparse.rank} (${fmt(c.sparse.score, 2)})` : "—"),
    h("td", {}, fmt(c.rrf.dense)), h("td", {}, fmt(c.rrf.sparse)),
    h("td", {}, c.rerank === null ? "—" : fmt(c.rerank, 3)), h("td", {}, fmt(c.score))));
  const d = x.decay;
  const decay = !d ? "off"
    : d.band !== undefined   // recency_mode band: ordered by last seen among pages about as relevant
      ? `band ${d.band} (arm level ${fmt(d.level, 3)}, within ${d.band_width} of the band's best; seen ${fmt(d.age_days, 1)} days ago)`
      : d.factor !== undefined
        ? `×${fmt(d.factor, 3)} (age ${fmt(d.age_days, 1)} days, half-life ${d.half_life_days} days)`
        : `on (age ${fmt(d.age_days, 1)} days)`;
  return h("div", { class: "explain" },
    h("dl", {},
      h("dt", {}, "Rollup"), h("dd", {}, `${x.rollup.how} of its chunks = ${fmt(x.rollup.value)}`),
      h("dt", {}, "Focus"), h("dd", {}, !x.focus ? "off"   // how much of the page is about the query
        : `×${fmt(x.focus.factor, 3)} (${x.focus.chunks_matched} of its ${x.focus.chunks} chunks among the candidates` +
          `${x.focus.results_page < 1 ? ", a search results page" : ""}; ${fmt(x.focus.before)} before)`),
      h("dt", {}, "Recency"), h("dd", {}, decay),
      h("dt", {}, "Pinned"), h("dd", {}, x.pinned ? `yes, exact ${x.pinned} match (placed first)` : "no"),
      ...(x.shortcut ? [h("dt", {}, "Shortcut"), h("dd", {}, `${x.shortcut} (placed first)`)] : []),
      h("dt", {}, "Page score"), h("dd", {}, fmt(x.score))),
    h("table", {},
      h("caption", {}, `Chunks that carried this page, best first (${x.chunks.length})`),
      h("thead", {}, h("tr", {}, ["chunk", "dense rank", "BM25 rank", "RRF dense", "RRF BM25", "rerank", "score"]
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows)),
    x.chunks.length > EXPLAIN_ROWS ? h("button", { type: "button", class: "link-button", "aria-expanded": "false",
      onclick: (e) => {
        const open = e.target.getAttribute("aria-expanded") !== "true";
        e.target.setAttribute("aria-expanded", String(open));
        e.target.textContent = open ? "Show the top chunks only" : `Show all ${x.chunks.length} chunks`;
        for (const tr of e.target.parentElement.querySelectorAll("tr.more")) tr.hidden = !open;
      } }, `Show all ${x.chunks.length} chunks`) : null);
}

async function toggleSimilar(pageId, button, box) {
  const open = button.getAttribute("aria-expanded") === "true";
  button.setAttribute("aria-expanded", String(!open));
  box.hidden = open;
  if (open || box.dataset.loaded) return;
  box.replaceChildren(h("p", { class: "status", role: "status" }, "Finding similar pages…"));
  try {
    const res = await api("GET", `/v1/pages/${encodeURIComponent(pageId)}/similar?k=5`);
    box.dataset.loaded = "1";
    box.replaceChildren(similarList(res.pages, "Similar pages"));
  } catch (err) {
    box.replaceChildren();
    showError(err, box);
  }
}

export function similarList(pages, label) {
  if (!pages.length) return h("p", { class: "empty" }, "No similar pages.");
  return h("ol", { class: "similar-list", "aria-label": label }, pages.map((s) => h("li", {},
    h("a", { href: `/?view=page&id=${encodeURIComponent(s.page_id)}`, "data-nav": true, "data-item": true },
      s.title || s.url),
    " ", h("span", { class: "score" }, fmt(s.score, 3)))));
}
