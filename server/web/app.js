// Refindery's web page: refind search, a page and its similar pages, and an A/B comparison of two
// embedders. Plain ES module, no build step; every view is a URL on `/` (?view=…), so the back
// button, reloads and shared links work. All text from the API goes into the DOM as text nodes.

const main = document.getElementById("main");
const KEY_STORE = "refindery.api_key";
const facetCache = new Map();
let modelsCache = null;
let lastSearch = null; // {query_id, page ids} of the search the user is looking at, for click feedback

// ---- DOM -------------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A page's URL as a link target only when it is http(s) or file: never javascript:, data: and the like.
function safeHref(url) {
  try {
    const u = new URL(String(url), "http://placeholder.invalid/");
    return ["http:", "https:", "file:"].includes(u.protocol) && /^(https?|file):/i.test(String(url)) ? u.href : null;
  } catch {
    return null;
  }
}

const sr = (text) => h("span", { class: "sr-only" }, text);

function shortDate(iso) {
  if (!iso) return "—";
  return String(iso).slice(0, 10);
}

function fmt(x, digits = 4) {
  return x === null || x === undefined ? "—" : Number(x).toFixed(digits);
}

// ---- API -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(detail.title || `HTTP ${status}`);
    this.status = status;
    this.type = detail.type || "http_error";
    this.detail = detail;
  }
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, { type: "network", title: `Could not reach the server (${err.message})` });
  }
  let data = null;
  try {
    data = JSON.parse(await resp.text(), exactIntegers);
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const detail = data && typeof data.detail === "object" && data.detail ? data.detail
      : { type: "http_error", title: (data && data.detail) || resp.statusText || `HTTP ${resp.status}` };
    throw new ApiError(resp.status, detail);
  }
  return data;
}

// Chunk ids are 64-bit integers, past what a JS number holds exactly (2^53): keep any such integer
// as the digits the server sent (JSON.parse source text access; older browsers round them).
function exactIntegers(key, value, ctx) {
  if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value) && ctx && ctx.source) {
    return ctx.source;
  }
  return value;
}

// A validation error lists what was wrong with which field; say that, not just "invalid request".
function errorText(err) {
  const d = err.detail || {};
  let text = d.title || err.message;
  const problems = d.errors || d.problems;
  if (Array.isArray(problems) && problems.length) {
    text += ": " + problems.slice(0, 3).map((p) => {
      const where = Array.isArray(p.loc) ? p.loc.filter((x) => x !== "body").join(".") : p.field || "";
      return where ? `${where} — ${p.msg || p.message || ""}` : (p.msg || p.message || JSON.stringify(p));
    }).join("; ");
  }
  return text;
}

function showError(err, where = document.getElementById("message")) {
  if (!where) return;
  where.replaceChildren();
  if (!err) return;
  const status = err.status ? `HTTP ${err.status}` : err.type === "network" ? "no answer" : null;
  where.append(h("p", { class: "message error" },
    h("strong", {}, "Error: "), errorText(err), " ",
    status ? h("span", { class: "err-type" }, `(${err.type}, ${status})`) : null,
    err.status === 401 || err.status === 403
      ? [" ", h("button", { type: "button", onclick: openKeyDialog }, "Enter an API key")] : null));
}

function messageRegion() {
  return h("div", { id: "message", role: "alert", "aria-live": "assertive" });
}

// ---- routing ---------------------------------------------------------------------------------

function go(url, { replace = false } = {}) {
  history[replace ? "replaceState" : "pushState"]({ inApp: true }, "", url);
  render();
}

function searchUrl(state) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) {
    if (v !== undefined && v !== null && v !== "" && v !== false) p.set(k, v === true ? "1" : String(v));
  }
  return "/?" + p.toString();
}

window.addEventListener("popstate", render);
document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (!a || e.defaultPrevented || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  if (a.dataset.pageId && lastSearch) feedback(a.dataset.pageId);
  go(a.getAttribute("href"));
});

function feedback(pageId) {
  // "click" on a result of a logged query: the query log turns these into implicit judgments.
  if (!lastSearch || !lastSearch.pageIds.has(pageId)) return;
  api("POST", "/v1/feedback", { query_id: lastSearch.queryId, page_id: pageId, kind: "click" }).catch(() => {});
}

async function render() {
  const p = new URLSearchParams(location.search);
  const view = p.get("view") || "search";
  document.getElementById("nav-search").toggleAttribute("aria-current", view === "search");
  document.getElementById("nav-compare").toggleAttribute("aria-current", view === "compare");
  if (view === "page") return renderPage(p);
  if (view === "compare") return renderCompare(p);
  return renderSearch(p);
}

// A query form: an empty query never reaches the API (the page says what to do); otherwise go to
// the URL the form's state makes.
function onQuerySubmit(form, input, emptyMessage, url) {
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!input.value.trim()) {
      showError(new ApiError(0, { type: "empty_query", title: emptyMessage }));
      input.focus();
      return;
    }
    go(url());
  });
}

// ---- facets (filter values) --------------------------------------------------------------------

async function facets(ws) {
  const key = ws || "";
  if (!facetCache.has(key)) {
    const q = ws ? `?workspace=${encodeURIComponent(ws)}` : "";
    facetCache.set(key, api("GET", `/v1/facets${q}`).catch((err) => {
      facetCache.delete(key);
      throw err;
    }));
  }
  return facetCache.get(key);
}

// ---- search view -------------------------------------------------------------------------------

function field(id, label, input, hint) {
  return h("div", { class: "field" }, h("label", { for: id }, label), input,
    hint ? h("small", { id: `${id}-hint` }, hint) : null);
}

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

async function renderSearch(p) {
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
  lastSearch = { queryId: res.query_id, pageIds: new Set(res.pages.map((x) => x.page_id)) };
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
    render().then(() => document.querySelector("#results [data-item]")?.focus());
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

function similarList(pages, label) {
  if (!pages.length) return h("p", { class: "empty" }, "No similar pages.");
  return h("ol", { class: "similar-list", "aria-label": label }, pages.map((s) => h("li", {},
    h("a", { href: `/?view=page&id=${encodeURIComponent(s.page_id)}`, "data-nav": true, "data-item": true },
      s.title || s.url),
    " ", h("span", { class: "score" }, fmt(s.score, 3)))));
}

// ---- page view ---------------------------------------------------------------------------------

async function renderPage(p) {
  const id = p.get("id") || "";
  const back = h("p", {}, h("a", { href: "#", onclick: (e) => { e.preventDefault(); goBack(); } }, "← Back"));
  const body = h("div", { id: "page-body" });
  main.replaceChildren(back, messageRegion(), body);
  let page;
  try {
    page = await api("GET", `/v1/pages/${encodeURIComponent(id)}`);
  } catch (err) {
    showError(err);
    back.querySelector("a").focus();
    return;
  }
  document.title = `${page.title || page.url} — Refindery`;
  const heading = h("h1", { tabindex: "-1", id: "page-title" }, page.title || page.url);
  const mediation = h("div", { role: "radiogroup", "aria-label": "Similar by", class: "mediation" },
    [["vector", "meaning (page vectors)"], ["cluster", "same cluster"], ["entity", "shared entities"]].map(
      ([value, label], i) => h("label", {}, h("input", { type: "radio", name: "mediation", value, checked: i === 0 }),
        " ", label)));
  const simBox = h("div", { id: "page-similar" });
  body.replaceChildren(
    h("article", { class: "page" }, heading,
      h("p", { class: "url" }, safeHref(page.url) ? h("a", { href: safeHref(page.url), rel: "noopener noreferrer",
        target: "_blank" }, page.url) : page.url),
      h("dl", { class: "facts" },
        h("dt", {}, "Domain"), h("dd", {}, page.domain || "—"),
        h("dt", {}, "First seen"), h("dd", {}, shortDate(page.first_seen)),
        h("dt", {}, "Last seen"), h("dd", {}, shortDate(page.last_seen)),
        h("dt", {}, "Visits"), h("dd", {}, String(page.visit_count ?? "—")),
        page.published ? [h("dt", {}, "Published"), h("dd", {}, shortDate(page.published))] : null,
        h("dt", {}, "Cluster"), h("dd", {}, page.cluster_id === null ? "—" : `#${page.cluster_id}`),
        h("dt", {}, "Entities"), h("dd", {}, page.entities.map((e) => e.canonical).join(", ") || "—")),
      h("section", { "aria-labelledby": "similar-h" }, h("h2", { id: "similar-h" }, "Similar pages"), mediation,
        simBox),
      h("section", { "aria-labelledby": "text-h" }, h("h2", { id: "text-h" }, "Text"),
        page.chunks.map((c) => h("section", { class: "chunk" },
          c.section_path && c.section_path.length ? h("h3", {}, c.section_path.join(" › ")) : null,
          h("p", {}, c.text))))));
  heading.focus();
  const loadSimilar = async (how) => {
    simBox.replaceChildren(h("p", { class: "status", role: "status" }, "Finding similar pages…"));
    try {
      const res = await api("GET", `/v1/pages/${encodeURIComponent(id)}/similar?k=8&mediation=${how}`);
      simBox.replaceChildren(similarList(res.pages, "Similar pages"));
    } catch (err) {
      simBox.replaceChildren();
      showError(err, simBox);
    }
  };
  mediation.addEventListener("change", (e) => loadSimilar(e.target.value));
  loadSimilar("vector");
}

// Back within the app when the page was reached from it; a page opened directly goes to search.
function goBack() {
  if (history.state && history.state.inApp) history.back();
  else go("/");
}

// ---- compare view ------------------------------------------------------------------------------

async function models() {
  if (!modelsCache) modelsCache = api("GET", "/v1/models").catch((err) => { modelsCache = null; throw err; });
  const reg = await modelsCache;
  // a model being embedded in the server's background: ask again next time, for its progress
  if (reg.models.some((m) => m.embedding && m.embedding.state === "embedding")) modelsCache = null;
  return reg;
}

async function renderCompare(p) {
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

// ---- keyboard ----------------------------------------------------------------------------------

function items() {
  return Array.from(main.querySelectorAll("[data-item]")).filter((el) => el.offsetParent !== null);
}

document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  const typing = t.matches && t.matches("input, textarea, select");
  if (typing) {
    if (e.key === "ArrowDown" && (t.type === "search") && items().length) {
      e.preventDefault();
      items()[0].focus();
    } else if (e.key === "Escape") {
      t.blur();
    }
    return;
  }
  if (document.querySelector("dialog[open]")) return;
  const list = items();
  const at = list.indexOf(document.activeElement);
  const view = new URLSearchParams(location.search).get("view") || "search";
  switch (e.key) {
    case "/": {
      const box = document.getElementById("q") || document.getElementById("cq");
      if (box) { e.preventDefault(); box.focus(); box.select(); }
      break;
    }
    case "ArrowDown": case "j":
      if (list.length) { e.preventDefault(); list[Math.min(list.length - 1, at + 1)].focus(); }
      break;
    case "ArrowUp": case "k":
      if (at > 0) { e.preventDefault(); list[at - 1].focus(); } else if (at === 0) {
        e.preventDefault();
        (document.getElementById("q") || document.getElementById("cq"))?.focus();
      }
      break;
    case "ArrowLeft": case "ArrowRight": {
      if (view === "compare" && at >= 0) {
        e.preventDefault();
        const side = document.activeElement.dataset.side === "A" ? "B" : "A";
        const twin = main.querySelector(`#list-${side.toLowerCase()} li[data-page-id="${CSS.escape(
          document.activeElement.closest("li").dataset.pageId)}"] a`);
        const row = Array.from(main.querySelectorAll(`#list-${side.toLowerCase()} a[data-item]`));
        const idx = Array.from(document.activeElement.closest("ol").querySelectorAll("a[data-item]"))
          .indexOf(document.activeElement);
        (twin || row[Math.min(idx, row.length - 1)])?.focus();
      } else if (view === "search") {
        const res = document.getElementById("results");
        if (res && res.turn) { e.preventDefault(); res.turn(e.key === "ArrowRight" ? 1 : -1); }
      }
      break;
    }
    case "s": {
      const li = document.activeElement.closest?.("li.result");
      if (li) { e.preventDefault(); li.querySelector("button[aria-controls]")?.click(); }
      break;
    }
    case "e": {
      const box = document.getElementById("explain");
      if (box) { e.preventDefault(); box.click(); }
      break;
    }
    case "Escape":
      if (view === "page") { e.preventDefault(); goBack(); }
      break;
    default:
  }
});

// ---- API key dialog ----------------------------------------------------------------------------

function openKeyDialog() {
  const dlg = document.getElementById("key-dialog");
  document.getElementById("key-input").value = sessionStorage.getItem(KEY_STORE) || "";
  dlg.showModal();
}

document.getElementById("key-button").addEventListener("click", openKeyDialog);
document.getElementById("key-dialog").addEventListener("close", (e) => {
  const dlg = e.target;
  if (dlg.returnValue === "save") sessionStorage.setItem(KEY_STORE, document.getElementById("key-input").value.trim());
  if (dlg.returnValue === "clear") sessionStorage.removeItem(KEY_STORE);
  if (dlg.returnValue === "save" || dlg.returnValue === "clear") {
    facetCache.clear();
    modelsCache = null;
    render();
  }
});

render();
