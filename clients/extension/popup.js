/* The popup: the state in words, pause, "keep this page", "forget" (this page, this site, the last hour), and a search box whose
   chosen result opens and is marked `found`. Everything goes through the background (one place talks
   to the server); page titles and passages are shown as text, never as markup. */
"use strict";
const api = globalThis.browser ?? globalThis.chrome;
const $ = (id) => document.getElementById(id);
const ask = (msg) => api.runtime.sendMessage(msg);

function say(text, error = false) { $("said").textContent = text; $("said").className = error ? "said error" : "said"; }

async function refresh() {
  const st = await ask({ type: "status" });
  $("state").textContent = st.words;
  $("state").className = st.error ? "error" : "";
  $("paused").checked = Boolean(st.paused);
  $("server").textContent = st.server;
  const extra = [];
  if (st.dropped) extra.push(`${st.dropped} older capture${st.dropped > 1 ? "s" : ""} dropped (storage full)`);
  if (st.tooLarge) extra.push(`${st.tooLarge} page${st.tooLarge > 1 ? "s" : ""} too large to keep`);
  if (st.lastRefused) extra.push(`last refused: ${st.lastRefused}`);
  if (extra.length && !$("said").textContent) say(extra.join("; "), true);
  $("nosearch").hidden = st.searchable;
  $("nosearch").textContent = st.searchable ? "" : "Searching here needs a read-only key: add one in the settings.";
  return st;
}

$("keep").addEventListener("click", async () => {
  const r = await ask({ type: "keep" });
  say(r.kept ? "Kept: it goes to the server now." : `Not kept: ${r.why || r.error}`, !r.kept);
  refresh();
});
$("forget").addEventListener("click", async () => {
  const r = await ask({ type: "forget", what: $("forgetWhat").value });
  const n = r.forgotten || 0;
  say(r.error ? `Not forgotten: ${r.error}`
      : n ? `Forgotten: ${n === 1 ? "one page" : `${n} pages`} deleted from the engine.`
      : "Nothing to forget: the engine had no such page.", Boolean(r.error));
  refresh();
});
$("paused").addEventListener("change", async (ev) => { await ask({ type: "pause", paused: ev.target.checked }); refresh(); });
$("settings").addEventListener("click", (ev) => { ev.preventDefault(); api.runtime.openOptionsPage(); });

$("search").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = $("q").value.trim();
  const list = $("results");
  list.replaceChildren();
  if (!q) return;
  const r = await ask({ type: "search", query: q });
  if (r.error) { say(r.error, true); return; }
  if (!r.pages.length) { say("No page matches."); return; }
  say("");
  for (const p of r.pages) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = p.url;
    a.textContent = p.title;
    a.addEventListener("click", async (e) => { e.preventDefault(); await ask({ type: "open", url: p.url }); window.close(); });
    const url = document.createElement("div");
    url.className = "url";
    url.textContent = p.url;
    const passage = document.createElement("div");
    passage.className = "passage";
    passage.textContent = p.passage.length > 240 ? p.passage.slice(0, 240) + "…" : p.passage;
    li.append(a, url, passage);
    list.append(li);
  }
});

api.storage.onChanged.addListener(() => { refresh(); });   // the state as it changes while the popup is open
refresh();
$("q").focus();
