"""The extension's manifest as Firefox reads it (Mozilla's web-ext lint, installed by `make test` from
npm) and its keep rules (clients/extension/rules.js, run by Node as the browser runs it)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "clients" / "extension"
WEB_EXT = ROOT / ".tools" / "web-ext" / "node_modules" / ".bin" / "web-ext"


def test_the_manifest_passes_web_ext_lint_for_firefox():
    if not WEB_EXT.exists():
        pytest.fail("web-ext is not installed: `make test` installs it (npm install web-ext@10 in .tools/web-ext)")
    out = subprocess.run([str(WEB_EXT), "lint", "--source-dir", str(EXTENSION), "--output", "json", "--no-input"],
                         capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["errors"] == [], report["errors"]
    # the one expected warning: Firefox runs background.scripts and ignores the service worker key
    assert [w["code"] for w in report["warnings"]] == ["BACKGROUND_SERVICE_WORKER_IGNORED"], report["warnings"]
    manifest = json.loads((EXTENSION / "manifest.json").read_text())
    assert manifest["manifest_version"] == 3 and manifest["incognito"] == "not_allowed"
    assert manifest["background"]["scripts"] == ["rules.js", "background.js"]


CASES = """
const R = globalThis.RefinderyRules;
const s = {mode: "skip", server: "http://127.0.0.1:8000", paused: false, allow: "docs.example\\nhttps://wiki.test/team/",
           skip: "# comment\\nbank.example\\nhttps://a.test/private\\n*secret*\\n/\\\\/\\\\d{4}$/"};
const urls = ["https://www.bank.example/x", "https://notbank.example/", "https://a.test/private/1", "https://a.test/pub",
              "http://x.test/my-secret-page", "http://x.test/1234", "http://127.0.0.1:8000/?q=a", "file:///etc/passwd",
              "https://docs.example/a", "https://wiki.test/team/page", "https://wiki.test/other"];
const out = {
  skip: urls.map((u) => R.decide(s, u).keep),
  allow: urls.map((u) => R.decide({...s, mode: "allow"}, u).keep),
  paused: R.decide({...s, paused: true}, urls[1]).keep,
  forcedWhilePaused: R.decide({...s, paused: true}, urls[1], {force: true}).keep,
  forcedPrivate: R.decide(s, urls[1], {incognito: true, force: true}).keep,
  forcedServer: R.decide(s, urls[6], {force: true}).keep,
  noMode: R.decide({...s, mode: null}, urls[1]).keep,
  errors: R.parseRules("ok.example\\nnot a rule\\n/([/").errors.length,
  globals: Object.keys(globalThis).filter((k) => ["decide", "parseRules", "firstMatch"].includes(k)),
};
console.log(JSON.stringify(out));
"""


def test_the_keep_rules():
    node = shutil.which("node")
    if node is None:
        pytest.fail("the extension's rule tests run rules.js in Node.js (apt-get install nodejs)")
    script = (EXTENSION / "rules.js").read_text() + "\n" + CASES
    got = json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True,
                                    timeout=60).stdout)
    #                 bank   notbank private pub    secret 1234   server file   docs   wiki/team wiki/other
    assert got["skip"] == [False, True, False, True, False, False, False, False, True, True, True]
    assert got["allow"] == [False, False, False, False, False, False, False, False, True, True, False]
    assert got["paused"] is False and got["forcedWhilePaused"] is True
    assert got["forcedPrivate"] is False and got["forcedServer"] is False and got["noMode"] is False
    assert got["errors"] == 2
    assert got["globals"] == []   # one global only (RefinderyRules): the background's scope is shared


def test_the_rule_cases_read_alike_in_the_extension_and_the_imports():
    """One table (clients/extension/rule_cases.json), two readers: rules.js in Node, engine/ingest/rules.py here."""
    from engine.ingest.rules import Rules

    node = shutil.which("node")
    if node is None:
        pytest.fail("the extension's rule tests run rules.js in Node.js (apt-get install nodejs)")
    table = json.loads((EXTENSION / "rule_cases.json").read_text())
    script = (EXTENSION / "rules.js").read_text() + f"""
const T = {json.dumps(table)};
const R = globalThis.RefinderyRules;
console.log(JSON.stringify({{matches: T.cases.map(([u]) => R.firstMatch(T.rules, u)),
                            bad: R.parseRules(T.bad_rules).errors.length}}));
"""
    got = json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True,
                                    timeout=60).stdout)
    want = [m for _, m in table["cases"]]
    assert got["matches"] == want
    rules = Rules.parse(table["rules"])
    assert [rules.first_match(u) for u, _ in table["cases"]] == want
    assert got["bad"] == len(Rules.parse(table["bad_rules"]).errors) == table["bad_count"]
