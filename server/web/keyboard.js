// The keyboard: / to the search box, arrows (and j/k) through the results, left/right to the other
// list or the next page of results, s similar, e explain, Esc back.

import { main } from "./dom.js";
import { goBack } from "./nav.js";

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
