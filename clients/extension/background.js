/* The extension's background: decides what is kept (rules.js), keeps captures in a bounded queue in
   the extension's storage until the server has them (surviving a browser restart, retried with
   backoff, each arriving once: the server takes a page again as a re-visit of the same moment, so a
   retry after a lost reply adds nothing), sends a re-visit of an unchanged page as a visit without its
   body, and searches for the popup and the address bar. It talks to one host only: the configured
   server. It never fetches a page and never sends cookies (credentials: "omit"). */
"use strict";
if (typeof importScripts === "function") importScripts("rules.js");   // Chromium's service worker
const api = globalThis.browser ?? globalThis.chrome;
const { decide } = globalThis.RefinderyRules;

const DEFAULTS = {
  server: "http://127.0.0.1:8000", captureKey: "", searchKey: "", workspace: "",
  mode: null,                     // "skip" (everything but the skip rules) | "allow" (only the allow rules)
  skip: "", allow: "", paused: false, dwellSeconds: 8,
  maxQueue: 500, maxQueueBytes: 25_000_000, maxPageBytes: 5_000_000, retryMaxSeconds: 300,
};
const MAX_SENT = 5000;           // URLs whose last sent text hash is remembered (re-visits as visits)
const BATCH_BYTES = 4_000_000;   // one POST /v1/pages stays under the server's body limit (8 MB default)

// ---- storage, one change at a time (the service worker is one, its events interleave) -------------
let chain = Promise.resolve();
function locked(fn) { const run = chain.then(fn, fn); chain = run.catch(() => {}); return run; }
async function read(key, fallback) { const got = await api.storage.local.get(key); return got[key] ?? fallback; }
async function settings() { return { ...DEFAULTS, ...(await read("settings", {})) }; }
async function state() { return { dropped: 0, tooLarge: 0, error: null, failures: 0, nextTry: 0, kept: 0, ...(await read("state", {})) }; }
async function setState(patch) { const s = { ...(await state()), ...patch }; await api.storage.local.set({ state: s }); return s; }

async function sha256(text) {
  const bytes = new TextEncoder().encode(text);
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

// ---- the queue ---------------------------------------------------------------------------------------
function sizeOf(item) { return (item.html?.length || 0) + (item.title?.length || 0) + item.url.length + 200; }

async function enqueue(page, { force = false } = {}) {
  const s = await settings();
  if (page.html.length > s.maxPageBytes) {
    const st = await state();
    await setState({ tooLarge: st.tooLarge + 1, error: null });
    await badge();
    return { kept: false, why: `over ${Math.round(s.maxPageBytes / 1e6)} MB: not kept` };
  }
  const hash = await sha256(page.title + "\u0000" + page.text);
  await locked(async () => {
    const queue = await read("queue", []);
    const sent = await read("sent", {});
    queue.push({
      id: crypto.randomUUID(), url: page.url, title: page.title, html: page.html, hash,
      seen_at: new Date().toISOString(), visit: !force && sent[page.url] === hash,
    });
    let dropped = 0, bytes = queue.reduce((n, it) => n + sizeOf(it), 0);
    while (queue.length > 1 && (queue.length > s.maxQueue || bytes > s.maxQueueBytes)) {
      bytes -= sizeOf(queue.shift());   // full: the oldest capture goes, and is counted
      dropped += 1;
    }
    await api.storage.local.set({ queue });
    if (dropped) await setState({ dropped: (await state()).dropped + dropped });
  });
  await badge();
  flushSoon(0);
  return { kept: true, why: "kept" };
}

async function request(path, body, key) {
  const s = await settings();
  const url = new URL(path, s.server).href;
  return fetch(url, {
    method: "POST", credentials: "omit", cache: "no-store", redirect: "error",
    headers: { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(s.workspace ? { ...body, workspace: s.workspace } : body),
  });
}

async function errorOf(resp) {
  let title = "";
  try { title = (await resp.json()).title || ""; } catch { /* not JSON */ }
  return title || `HTTP ${resp.status}`;
}

let flushing = false, again = false, retryTimer = null;
function flushSoon(ms) { clearTimeout(retryTimer); retryTimer = setTimeout(() => flush().catch(() => {}), ms); }

async function flush() {
  if (flushing) { again = true; return; }
  flushing = true;
  try {
    do { again = false; } while (await sendSome() || again);
  } finally { flushing = false; await badge(); }
}

/* Send the oldest waiting captures: visits as one batch, pages as another. True when it sent some and
   more may wait; false when the queue is empty or the server could not take them (then a retry is set). */
async function sendSome() {
  const s = await settings();
  const queue = await read("queue", []);
  if (!queue.length) return false;
  if (!s.captureKey) { await setState({ error: "no capture key: add one in the settings" }); return false; }
  const visits = queue.filter((it) => it.visit).slice(0, 500);
  let pages = [], bytes = 0;
  for (const it of queue.filter((it) => !it.visit)) {
    if (pages.length && (bytes + sizeOf(it) > BATCH_BYTES || pages.length >= 100)) break;
    pages.push(it); bytes += sizeOf(it);
  }
  const batch = visits.length ? visits : pages;
  let resp;
  try {
    resp = visits.length
      ? await request("/v1/visits", { visits: batch.map((it) => ({ url: it.url, seen_at: it.seen_at })) }, s.captureKey)
      : await request("/v1/pages", { pages: batch.map((it) => ({ url: it.url, title: it.title, html: it.html, seen_at: it.seen_at })) }, s.captureKey);
  } catch (e) {
    return retry(s, `server unreachable: ${new URL(s.server).host}`);
  }
  if (resp.status === 401 || resp.status === 403) {
    await setState({ error: `bad key: ${await errorOf(resp)}`, failures: 0 });
    flushSoon(s.retryMaxSeconds * 1000);   // a key put right in the settings flushes at once
    return false;
  }
  if (resp.status === 413 && batch.length > 1 && !visits.length) {   // too large together: one at a time
    for (const it of batch) if (!(await sendOne(s, it))) return false;
    return true;
  }
  if (resp.status === 413 || resp.status === 422) {   // this batch will never be taken: say so and drop it
    const why = await errorOf(resp);
    await settle(batch.map((it) => [it, "error", why]));
    return true;
  }
  if (!resp.ok) return retry(s, `server answered ${resp.status}: ${await errorOf(resp)}`);
  const reply = await resp.json();
  await settle(batch.map((it, i) => [it, reply.items?.[i]?.status, reply.items?.[i]?.error]));
  return true;
}

async function sendOne(s, item) {
  let resp;
  try {
    resp = await request("/v1/pages", { pages: [{ url: item.url, title: item.title, html: item.html, seen_at: item.seen_at }] }, s.captureKey);
  } catch { return retry(s, `server unreachable: ${new URL(s.server).host}`); }
  if (resp.status === 413 || resp.status === 422) { await settle([[item, "error", await errorOf(resp)]]); return true; }
  if (!resp.ok) return retry(s, `server answered ${resp.status}: ${await errorOf(resp)}`);
  const reply = await resp.json();
  await settle([[item, reply.items?.[0]?.status, reply.items?.[0]?.error]]);
  return true;
}

async function retry(s, error) {
  const st = await state();
  const failures = st.failures + 1;
  const wait = Math.min(s.retryMaxSeconds, 2 ** Math.min(failures - 1, 12)) * (0.8 + Math.random() * 0.4);
  await setState({ error, failures, nextTry: Date.now() + wait * 1000 });
  flushSoon(wait * 1000);
  api.alarms.create("retry", { when: Date.now() + wait * 1000 });   // if the worker sleeps meanwhile
  return false;
}

/* Take answered items off the queue: a page the server kept remembers its hash (its next unchanged
   visit goes without a body); a visit of a page the server does not have goes again as the page. */
async function settle(answers) {
  await locked(async () => {
    const queue = await read("queue", []);
    const sent = await read("sent", {});
    const done = new Set();
    let kept = 0, lastError = null;
    for (const [it, status, error] of answers) {
      const q = queue.find((x) => x.id === it.id);
      if (!q) continue;
      if (status === "not_found" && q.visit) { q.visit = false; continue; }
      done.add(it.id);
      if (status === "error" || !status) { lastError = `${it.url}: ${error || "refused"}`; delete sent[it.url]; continue; }
      kept += 1;
      delete sent[it.url];
      sent[it.url] = it.hash;
    }
    const keys = Object.keys(sent);
    for (const k of keys.slice(0, Math.max(0, keys.length - MAX_SENT))) delete sent[k];   // oldest first
    await api.storage.local.set({ queue: queue.filter((x) => !done.has(x.id)), sent });
    const st = await state();
    await setState({ kept: st.kept + kept, failures: 0, nextTry: 0, error: null, lastRefused: lastError ?? st.lastRefused ?? null });
  });
}

// ---- the badge: on, paused, N waiting, or the error in words --------------------------------------
async function status() {
  const [s, st, queue] = await Promise.all([settings(), state(), read("queue", [])]);
  let text = "", color = "#2b6cb0", words = "on: keeping the pages you read";
  if (!s.mode) { text = "set"; words = "not keeping anything yet: choose what to keep in the settings"; }
  else if (st.error) { text = "!"; color = "#c53030"; words = st.error + (queue.length ? ` (${queue.length} waiting)` : ""); }
  else if (queue.length) { text = String(queue.length); words = `${queue.length} page${queue.length > 1 ? "s" : ""} waiting for the server`; }
  else if (s.paused) { text = "off"; color = "#718096"; words = "paused: nothing is kept"; }
  if (s.paused && (st.error || queue.length)) words = "paused; " + words;
  return { text, color, words, waiting: queue.length, paused: s.paused, mode: s.mode, error: st.error,
           dropped: st.dropped, tooLarge: st.tooLarge, kept: st.kept, lastRefused: st.lastRefused ?? null,
           searchable: Boolean(s.searchKey) || !s.captureKey, server: s.server };
}

async function badge() {
  const st = await status();
  await api.action.setBadgeText({ text: st.text });
  await api.action.setBadgeBackgroundColor({ color: st.color });
  await api.action.setTitle({ title: `Refindery — ${st.words}` });
  return st;
}

// ---- search (the popup and the address bar) ---------------------------------------------------------
let lastResults = new Map();   // url -> {query_id, page_id}, for the feedback of the one opened

async function search(query, k = 8) {
  const s = await settings();
  const key = s.searchKey || (s.captureKey ? null : "");
  if (key === null) return { error: "searching needs a read-only key: add one in the settings (the capture key cannot search)" };
  let resp;
  try {
    resp = await request("/v1/search", { query, k, shortcuts: true }, key);
  } catch { return { error: `server unreachable: ${new URL(s.server).host}` }; }
  if (!resp.ok) return { error: resp.status === 401 || resp.status === 403 ? `bad search key: ${await errorOf(resp)}` : await errorOf(resp) };
  const r = await resp.json();
  lastResults = new Map(r.pages.map((p) => [p.url, { query_id: r.query_id, page_id: p.page_id }]));
  return {
    query_id: r.query_id,
    pages: r.pages.map((p) => ({ page_id: p.page_id, url: p.url, title: p.title || p.url,
                                 passage: (p.snippets?.[0]?.text ?? "").replace(/^#{1,6} .*$/gm, "").trim() })),
  };
}

async function found(url) {
  const hit = lastResults.get(url);
  const s = await settings();
  if (!hit) return false;
  try {
    const resp = await request("/v1/feedback", { query_id: hit.query_id, page_id: hit.page_id, kind: "found" }, s.searchKey);
    return resp.ok;
  } catch { return false; }
}

async function open(url, disposition = "newForegroundTab") {
  await found(url);
  if (disposition === "currentTab") {
    const [tab] = await api.tabs.query({ active: true, currentWindow: true });
    if (tab) return api.tabs.update(tab.id, { url });
  }
  return api.tabs.create({ url, active: disposition !== "newBackgroundTab" });
}

const escapeXml = (t) => t.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" }[c]));
const markup = typeof globalThis.browser === "undefined";   // Chromium's suggestions take XML; Firefox's plain text
let typed = null;
api.omnibox.onInputChanged.addListener((text, suggest) => {
  clearTimeout(typed);
  typed = setTimeout(async () => {
    const r = text.trim() ? await search(text.trim(), 6) : { pages: [] };
    if (r.error) { api.omnibox.setDefaultSuggestion({ description: markup ? escapeXml(r.error) : r.error }); suggest([]); return; }
    api.omnibox.setDefaultSuggestion({ description: markup ? `Refindery: <match>${escapeXml(text)}</match>` : `Refindery: ${text}` });
    suggest(r.pages.map((p) => ({
      content: p.url,
      description: markup ? `${escapeXml(p.title)} <dim>—</dim> <url>${escapeXml(p.url)}</url>` : `${p.title} — ${p.url}`,
    })));
  }, 200);
});
api.omnibox.onInputEntered.addListener(async (text, disposition) => {
  let url = text.trim();
  if (!lastResults.has(url)) {   // words, not a suggestion: the first result
    const r = await search(url, 1);
    if (!r.pages?.length) return;
    url = r.pages[0].url;
  }
  await open(url, disposition);
});

// ---- messages from the content script, the popup and the settings page ----------------------------
/* The page the popup's buttons act on: the active tab — or, when the popup was opened as a tab of its
   own (a pinned popup, a test), the web page of this window used last. */
async function activeTab() {
  const [tab] = await api.tabs.query({ active: true, currentWindow: true });
  if (tab && /^https?:/.test(tab.url || "")) return tab;
  const pages = (await api.tabs.query({ currentWindow: true })).filter((t) => /^https?:/.test(t.url || ""));
  return pages.sort((a, b) => (b.lastAccessed || 0) - (a.lastAccessed || 0))[0] ?? tab;
}

async function snapshotOf(tab) {
  try {
    return await api.tabs.sendMessage(tab.id, { type: "snapshot" });
  } catch {   // a tab loaded before the extension: its content script is not there
    await api.scripting.executeScript({ target: { tabId: tab.id }, files: ["content.js"] });
    return api.tabs.sendMessage(tab.id, { type: "snapshot" });
  }
}

/* Forget `what` ("page": the tab's URL, "site": its host and subdomains, "hour": what was seen in the
   last hour): what still waits in the queue goes too, and the server deletes the rest. */
async function forget(url, what = "page") {
  const s = await settings();
  const host = new URL(url).hostname.replace(/^www\./, "");
  const since = new Date(Date.now() - 3600e3);
  const gone = (it) => what === "site" ? sameSite(it.url, host) : what === "hour" ? new Date(it.seen_at) >= since
    : it.url === url;
  await locked(async () => {
    const queue = (await read("queue", [])).filter((it) => !gone(it));
    const sent = await read("sent", {});
    // (after "the last hour" the sent map, which keeps no times, stays: a page read again that the server
    // no longer has is answered not_found, and then sent whole)
    for (const u of Object.keys(sent)) if (what === "site" ? sameSite(u, host) : what === "page" && u === url) delete sent[u];
    await api.storage.local.set({ queue, sent });
  });
  const body = what === "site" ? { domain: host } : what === "hour" ? { since: since.toISOString() } : { url };
  const resp = await request("/v1/forget", body, s.captureKey);
  if (!resp.ok) throw new Error(await errorOf(resp));
  return resp.json();
}

function sameSite(url, host) {
  try {
    const h = new URL(url).hostname.replace(/^www\./, "");
    return h === host || h.endsWith("." + host);
  } catch { return false; }
}

async function handle(msg, sender) {
  const s = await settings();
  const tab = sender.tab;
  switch (msg.type) {
    case "watch": {
      const d = decide(s, msg.url, { incognito: Boolean(tab?.incognito) });
      return { keep: d.keep, dwellMs: Math.max(0, Number(s.dwellSeconds) || 0) * 1000 };
    }
    case "capture": {
      if (!tab || tab.incognito || !decide(s, msg.page.url, { incognito: tab.incognito }).keep) return { kept: false };
      return enqueue(msg.page);
    }
    case "keep": {   // the popup's "keep this page": any mode, paused or not
      const t = await activeTab();
      const d = t ? decide(s, t.url, { incognito: t.incognito, force: true }) : { keep: false, why: "no page" };
      if (!d.keep) return { kept: false, why: d.why };
      return enqueue(await snapshotOf(t), { force: true });
    }
    case "forget": {
      const t = await activeTab();
      if (!t?.url) return { forgotten: 0 };
      try { return await forget(t.url, msg.what); } catch (e) { return { error: e.message }; }
    }
    case "status": { const st = await badge(); const t = await activeTab(); return { ...st, tab: t?.url ?? null }; }
    case "pause": {
      await api.storage.local.set({ settings: { ...(await read("settings", {})), paused: Boolean(msg.paused) } });
      return badge();
    }
    case "search": return search(msg.query);
    case "open": await open(msg.url); return { opened: true };
    case "flush": await setState({ failures: 0, error: null }); flushSoon(0); return { flushing: true };
    default: return { error: `unknown message ${msg.type}` };
  }
}

api.runtime.onMessage.addListener((msg, sender, reply) => {
  if (sender.id !== api.runtime.id) return false;
  handle(msg, sender).then(reply, (e) => reply({ error: String(e?.message || e) }));
  return true;   // the reply comes later
});

api.storage.onChanged.addListener((changes) => {
  if (changes.settings) { setState({ error: null, failures: 0 }).then(() => { badge(); flushSoon(0); }); }
});
api.alarms.onAlarm.addListener((a) => { if (a.name === "retry") flush().catch(() => {}); });
api.runtime.onStartup.addListener(() => flushSoon(0));
api.runtime.onInstalled.addListener(async (d) => {
  // A first install asks for the server and the keys. One that finds a key kept does not: a browser that
  // loads the extension from a folder at each start (--load-extension, a temporary add-on) installs it
  // again every time, with its storage, and would open the settings page at every start.
  if (d.reason === "install" && !(await settings()).captureKey) api.runtime.openOptionsPage();
  badge();
});
flushSoon(0);   // the worker started (a browser start, a message): whatever waits goes now
