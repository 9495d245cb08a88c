// Every view is a URL on `/` (?view=…), so the back button, reloads and shared links work: links
// marked data-nav and forms change the URL (nav.js), and render() draws the view it names. A click on
// a result of a logged search is sent as feedback. The views import nav.js, never this module.

import { api } from "./api.js";
import { go, onRedraw, state } from "./nav.js";
import { renderCompare } from "./views/compare.js";
import { renderPage } from "./views/page.js";
import { renderSearch } from "./views/search.js";

export function feedback(pageId) {
  // "click" on a result of a logged query: the query log turns these into implicit judgments.
  if (!state.lastSearch || !state.lastSearch.pageIds.has(pageId)) return;
  api("POST", "/v1/feedback", { query_id: state.lastSearch.queryId, page_id: pageId, kind: "click" }).catch(() => {});
}

export async function render() {
  const p = new URLSearchParams(location.search);
  const view = p.get("view") || "search";
  document.getElementById("nav-search").toggleAttribute("aria-current", view === "search");
  document.getElementById("nav-compare").toggleAttribute("aria-current", view === "compare");
  if (view === "page") return renderPage(p);
  if (view === "compare") return renderCompare(p);
  return renderSearch(p);
}

export function start() {
  onRedraw(render);
  window.addEventListener("popstate", render);
  document.addEventListener("click", (e) => {
    const a = e.target.closest("a[data-nav]");
    if (!a || e.defaultPrevented || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    if (a.dataset.pageId && state.lastSearch) feedback(a.dataset.pageId);
    go(a.getAttribute("href"));
  });
}
