/* The settings page, and the first run: nothing is kept until a mode is chosen and saved. It shows
   exactly what is sent, and checks the server and the key on request. */
"use strict";
const api = globalThis.browser ?? globalThis.chrome;
const $ = (id) => document.getElementById(id);
const FIELDS = ["server", "captureKey", "searchKey", "workspace", "skip", "allow", "dwellSeconds"];
const SUGGESTED_SKIP = "# suggested: sign-in and payment pages\n*://accounts.*\n*://login.*\n*/signin*\n*/checkout*\n";

async function load() {
  const s = (await api.storage.local.get("settings")).settings || {};
  const first = !s.mode;
  $("firstrun").hidden = !first;
  $("server").value = s.server ?? "http://127.0.0.1:8000";
  $("captureKey").value = s.captureKey ?? "";
  $("searchKey").value = s.searchKey ?? "";
  $("workspace").value = s.workspace ?? "";
  $("skip").value = s.skip ?? (first ? SUGGESTED_SKIP : "");
  $("allow").value = s.allow ?? "";
  $("dwellSeconds").value = s.dwellSeconds ?? 8;
  for (const r of document.querySelectorAll("input[name=mode]")) r.checked = r.value === s.mode;
  $("bound").textContent = `${s.maxQueue ?? 500} pages or ${Math.round((s.maxQueueBytes ?? 25e6) / 1e6)} MB`;
  describe();
}

function describe() {
  $("dest").textContent = $("server").value || "your server";
  $("example").textContent = `POST ${$("server").value || "http://127.0.0.1:8000"}/v1/pages\nAuthorization: Bearer <capture key>\n` +
    JSON.stringify({ pages: [{ url: "https://example.org/article", title: "The article's title",
                               html: "<html>… the page as rendered …</html>", seen_at: new Date().toISOString() }] }, null, 2);
  const errors = [...RefinderyRules.parseRules($("skip").value).errors, ...RefinderyRules.parseRules($("allow").value).errors];
  $("ruleErrors").textContent = errors.length ? "Not a rule: " + errors.join("; ") : "";
  return errors;
}

$("server").addEventListener("input", describe);
$("skip").addEventListener("input", describe);
$("allow").addEventListener("input", describe);

$("save").addEventListener("click", async () => {
  const mode = document.querySelector("input[name=mode]:checked")?.value ?? null;
  if (describe().length) { $("saved").textContent = "Not saved: a rule is not valid."; return; }
  try { new URL($("server").value); } catch { $("saved").textContent = "Not saved: the server URL is not a URL."; return; }
  if (!mode) { $("saved").textContent = "Not saved: choose what to keep."; return; }
  const old = (await api.storage.local.get("settings")).settings || {};
  const next = { ...old, mode };
  for (const f of FIELDS) next[f] = f === "dwellSeconds" ? Math.max(0, Number($(f).value) || 0) : $(f).value.trim();
  next.server = next.server.replace(/\/+$/, "");
  await api.storage.local.set({ settings: next });
  $("firstrun").hidden = true;
  $("saved").textContent = "Saved.";
});

$("check").addEventListener("click", async () => {
  const server = $("server").value.replace(/\/+$/, "");
  $("saved").textContent = "Checking…";
  try {
    const resp = await fetch(`${server}/v1/visits`, {
      method: "POST", credentials: "omit", cache: "no-store",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${$("captureKey").value.trim()}` },
      body: JSON.stringify({ visits: [{ url: "https://refindery.invalid/check" }] }),
    });
    $("saved").textContent = resp.ok ? "The server answers and takes this capture key."
      : `The server refused the key (${resp.status}): ${(await resp.json().catch(() => ({}))).title || ""}`;
  } catch {
    $("saved").textContent = `No answer from ${server}.`;
  }
});

load();
