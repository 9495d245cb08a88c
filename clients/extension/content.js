/* In each http(s) page: ask the background whether this page is kept; if so, count the time the page
   is in view, and once it reaches the dwell time hand the page as rendered (URL, title, HTML, its text
   for the hash) to the background. Never fetches anything and never sends anything itself. A page
   whose address changes without a load (a single-page app) starts again. */
(() => {
  "use strict";
  const api = globalThis.browser ?? globalThis.chrome;
  if (globalThis.__refinderyContent) return;   // injected twice (the "keep this page" fallback)
  globalThis.__refinderyContent = true;

  let url = location.href, shown = 0, since = null, timer = null, dwellMs = null, sent = false;

  function snapshot() {
    return {
      url: location.href,
      title: document.title || "",
      html: document.documentElement ? document.documentElement.outerHTML : "",
      text: document.body ? document.body.innerText || "" : "",
    };
  }

  function visible() { return document.visibilityState === "visible"; }

  function tick() {
    clearTimeout(timer);
    if (sent || dwellMs === null) return;
    const now = performance.now();
    if (since !== null) { shown += now - since; since = null; }
    if (shown >= dwellMs) {
      sent = true;
      api.runtime.sendMessage({ type: "capture", page: snapshot() }).catch(() => {});
      return;
    }
    if (visible()) {
      since = now;
      timer = setTimeout(tick, dwellMs - shown);
    }
  }

  async function watch() {
    shown = 0; since = null; sent = false; dwellMs = null;
    let answer;
    try {
      answer = await api.runtime.sendMessage({ type: "watch", url });
    } catch { return; }
    if (!answer || !answer.keep || url !== location.href) return;
    dwellMs = answer.dwellMs;
    tick();
  }

  document.addEventListener("visibilitychange", tick);
  setInterval(() => {   // an address changed by the page itself: another page to read
    if (location.href !== url) { url = location.href; clearTimeout(timer); watch(); }
  }, 1000);
  api.runtime.onMessage.addListener((msg, _sender, reply) => {
    if (msg && msg.type === "snapshot") { reply(snapshot()); }
    return false;
  });
  watch();
})();
