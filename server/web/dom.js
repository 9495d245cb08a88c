// The page's DOM helpers: elements built from data (all text from the API goes in as text nodes),
// links only to http(s) and file: URLs, the formats every view shares, and the alert region.

export const main = document.getElementById("main");

export function h(tag, attrs = {}, ...children) {
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
export function safeHref(url) {
  try {
    const u = new URL(String(url), "http://placeholder.invalid/");
    return ["http:", "https:", "file:"].includes(u.protocol) && /^(https?|file):/i.test(String(url)) ? u.href : null;
  } catch {
    return null;
  }
}

export const sr = (text) => h("span", { class: "sr-only" }, text);

export function shortDate(iso) {
  if (!iso) return "—";
  return String(iso).slice(0, 10);
}

export function fmt(x, digits = 4) {
  return x === null || x === undefined ? "—" : Number(x).toFixed(digits);
}

export function field(id, label, input, hint) {
  return h("div", { class: "field" }, h("label", { for: id }, label), input,
    hint ? h("small", { id: `${id}-hint` }, hint) : null);
}

export function messageRegion() {
  return h("div", { id: "message", role: "alert", "aria-live": "assertive" });
}
