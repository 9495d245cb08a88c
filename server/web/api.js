// The API as the page calls it: JSON over fetch with the session's key, refusals as ApiError (its
// detail.type, never its wording), 64-bit ids kept exact, and the facets and models lists cached until
// the key changes (forgetCaches).

import { h } from "./dom.js";

export const KEY_STORE = "refindery.api_key";
const facetCache = new Map();
let modelsCache = null;

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail.title || `HTTP ${status}`);
    this.status = status;
    this.type = detail.type || "http_error";
    this.detail = detail;
  }
}

export async function api(method, path, body) {
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
export function errorText(err) {
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

export function showError(err, where = document.getElementById("message")) {
  if (!where) return;
  where.replaceChildren();
  if (!err) return;
  const status = err.status ? `HTTP ${err.status}` : err.type === "network" ? "no answer" : null;
  where.append(h("p", { class: "message error" },
    h("strong", {}, "Error: "), errorText(err), " ",
    status ? h("span", { class: "err-type" }, `(${err.type}, ${status})`) : null,
    err.status === 401 || err.status === 403
      ? [" ", h("button", { type: "button", onclick: () => document.getElementById("key-button").click() }, "Enter an API key")] : null));
}

export async function facets(ws) {
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

export async function models() {
  if (!modelsCache) modelsCache = api("GET", "/v1/models").catch((err) => { modelsCache = null; throw err; });
  const reg = await modelsCache;
  // a model being embedded in the server's background: ask again next time, for its progress
  if (reg.models.some((m) => m.embedding && m.embedding.state === "embedding")) modelsCache = null;
  return reg;
}

export function forgetCaches() {
  facetCache.clear();
  modelsCache = null;
}
