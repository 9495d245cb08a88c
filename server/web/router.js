// Every view is a URL on `/` (?view=…), so the back button, reloads and shared links work: links
// marked data-nav and forms change the URL, and render() draws the view it names. A click on a result
// of a logged search is sent as feedback.

import { api, showError, ApiError } from "./api.js";
import { renderCompare } from "./views/compare.js";
import { renderPage } from "./views/page.js";
import { renderSearch } from "./views/search.js";

// {queryId, pageIds} of the search the user is looking at, for click feedback (views/search.js sets it)
export const state = { lastSearch: null };

export function go(url, { replace = false } = {}) {
  history[replace ? "replaceState" : "pushState"]({ inApp: true }, "", url);
  render();
}

export function searchUrl(fields) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) {
    if (v !== undefined && v !== null && v !== "" && v !== false) p.set(k, v === true ? "1" : String(v));
  }
  return "/?" + p.toString();
}

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

// A query form: an empty query never reaches the API (the page says what to do); otherwise go to
// the URL the form's state makes.
export function onQuerySubmit(form, input, emptyMessage, url) {
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

// Back within the app when the page was reached from it; a page opened directly goes to search.
export function goBack() {
  if (history.state && history.state.inApp) history.back();
  else go("/");
}

export function start() {
  window.addEventListener("popstate", render);
  document.addEventListener("click", (e) => {
    const a = e.target.closest("a[data-nav]");
    if (!a || e.defaultPrevented || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    if (a.dataset.pageId && state.lastSearch) feedback(a.dataset.pageId);
    go(a.getAttribute("href"));
  });
}
