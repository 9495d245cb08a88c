// The page view: one page's facts and text, and its similar pages by meaning, cluster or entities.

import { api, showError } from "../api.js";
import { h, main, messageRegion, safeHref, shortDate } from "../dom.js";
import { goBack } from "../nav.js";
import { similarList } from "./search.js";

export async function renderPage(p) {
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
