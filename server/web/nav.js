// Navigation as the views use it: the URL a form's state makes, going to a URL, back, and the state of
// the search on screen. It draws nothing itself: router.js registers the function that draws the view
// a URL names (onRedraw), so the views call down to this module and never up to the router.

import { showError, ApiError } from "./api.js";

// {queryId, pageIds} of the search the user is looking at, for click feedback (views/search.js sets it)
export const state = { lastSearch: null };

let drawer = async () => {};

export function onRedraw(fn) {
  drawer = fn;
}

export function redraw() {
  return drawer();
}

export function go(url, { replace = false } = {}) {
  history[replace ? "replaceState" : "pushState"]({ inApp: true }, "", url);
  return redraw();
}

export function searchUrl(fields) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) {
    if (v !== undefined && v !== null && v !== "" && v !== false) p.set(k, v === true ? "1" : String(v));
  }
  return "/?" + p.toString();
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
