/* Which pages are kept: the rules, the mode and the pause, decided in one place (the background and
   the settings page load this file). A rule is one of
     example.com            the host and every host under it (www.example.com, docs.example.com)
     https://example.com/a  a URL prefix (begins with http:// or https://, no "*")
     *://*.example.com/*x*  a pattern over the whole URL: "*" is any run of characters
     /^https:\/\/x\/\d+/    a regular expression over the whole URL, between slashes
   Lines that are empty or begin with "#" are comments. */
(() => {
"use strict";

function parseRules(text) {
  const rules = [], errors = [];
  for (const raw of String(text || "").split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    try {
      rules.push(compileRule(line));
    } catch (e) {
      errors.push(`${line}: ${e.message}`);
    }
  }
  return { rules, errors };
}

function compileRule(line) {
  if (line.length > 2 && line.startsWith("/") && line.endsWith("/")) {
    const re = new RegExp(line.slice(1, -1));
    return { text: line, test: (url) => re.test(url) };
  }
  if (line.includes("*")) {
    const re = new RegExp("^" + line.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\/]/g, "\\$&")).join(".*") + "$");
    return { text: line, test: (url) => re.test(url) };
  }
  if (/^https?:\/\//i.test(line)) {
    const prefix = line.toLowerCase();
    return { text: line, test: (url) => url.toLowerCase().startsWith(prefix) };
  }
  if (/[\s/:?#]/.test(line)) throw new Error("not a domain, a URL prefix, a pattern with * or a /regex/");
  const host = line.toLowerCase().replace(/^\.+/, "");
  return {
    text: line,
    test: (url) => {
      let h;
      try { h = new URL(url).hostname.toLowerCase(); } catch { return false; }
      return h === host || h.endsWith("." + host);
    },
  };
}

function firstMatch(rulesText, url) {
  const hit = parseRules(rulesText).rules.find((r) => r.test(url));
  return hit ? hit.text : null;
}

/* Whether a page at `url` is kept: {keep, why}. `force`: the "keep this page" button, which works in
   every mode and while paused — but never for a private window, another scheme or the server itself. */
function decide(settings, url, { incognito = false, force = false } = {}) {
  let u;
  try { u = new URL(url); } catch { return { keep: false, why: "not a URL" }; }
  if (incognito) return { keep: false, why: "a private window" };
  if (u.protocol !== "http:" && u.protocol !== "https:") return { keep: false, why: `a ${u.protocol} page` };
  try {
    if (settings.server && u.origin === new URL(settings.server).origin) {
      return { keep: false, why: "the Refindery server's own page" };
    }
  } catch { /* no server set yet */ }
  if (force) return { keep: true, why: "kept by hand" };
  if (!settings.mode) return { keep: false, why: "choose what to keep first (the settings page)" };
  if (settings.paused) return { keep: false, why: "paused" };
  if (settings.mode === "allow") {
    const rule = firstMatch(settings.allow, url);
    return rule ? { keep: true, why: `allowed by ${rule}` } : { keep: false, why: "no allow rule names it" };
  }
  const rule = firstMatch(settings.skip, url);
  return rule ? { keep: false, why: `skipped by ${rule}` } : { keep: true, why: "kept" };
}

globalThis.RefinderyRules = { parseRules, decide, firstMatch };
})();   // one global only: the background's own names (a service worker's and Firefox's scripts share a scope)
