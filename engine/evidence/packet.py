"""The evidence packet: Markdown with the seed's YAML front matter, one section per source.

Written to ``<reports_dir>/<workspace>/evidence_packet_{session_id}[_{topic}].md`` — a key with
document scopes writes under ``<workspace>/scoped/<its scopes>/`` — so each workspace (and each set of
scopes) has sessions of its own: one cannot read, extend or learn of another's, and the folders'
names cannot collide (engine/core/identity.py). A second call with the same
session (and topic) appends its search and its new sources after the earlier ones and brings the
front matter's counts up to date; nothing earlier is dropped. The packet is drawn from a state file
beside it (``.state/<name>.json``, written first, atomically), so a crash between the two writes
leaves a packet the next call redraws whole. Above `split_chars` characters the packet splits: the
main file keeps the front matter, a summary, the top sources by confidence and the key patterns;
``evidence_appendix_{session_id}[_{topic}].md`` holds every source with its full excerpt.
"""
from __future__ import annotations

import json
import threading
from datetime import date
from pathlib import Path
from urllib.parse import quote

import yaml

from engine.core.identity import workspace_folder
from engine.core.markdown import inline
from engine.evidence.confidence import LEVELS

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
TOP_SOURCES = 10
SHORT_EXCERPT = 300


def packet_lock(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(path), threading.Lock())


def packet_dir(reports_dir: Path, workspace: str, scopes: tuple[str, ...] | None) -> Path:
    """The folder of a workspace's packets written by callers reading `scopes` (None: every document)."""
    folder = reports_dir / workspace_folder(workspace)
    if scopes is None:
        return folder
    joined = "+".join(quote(s, safe="") for s in sorted(set(scopes)))   # '+' is escaped inside each scope
    return folder / "scoped" / workspace_folder(joined)


def adopt_legacy(reports_dir: Path, folder: Path, packet_name: str, workspace: str,
                 scopes: tuple[str, ...] | None) -> None:
    """A packet written before packets had folders (all of them in `reports_dir`) moves into the folder
    of the workspace and scopes it was written for, the first time that caller asks for it (under the
    packet's lock, packet_lock(folder / packet_name))."""
    state = load_state(reports_dir, packet_name)
    if state is None or load_state(folder, packet_name) is not None or state.get("workspace") != workspace:
        return
    written = state.get("scopes")
    if (None if written is None else tuple(sorted(set(written)))) != scopes:
        return
    (folder / ".state").mkdir(parents=True, exist_ok=True)
    appendix_name = packet_name.replace("evidence_packet_", "evidence_appendix_", 1)
    for source, target in ((reports_dir / packet_name, folder / packet_name),
                           (reports_dir / appendix_name, folder / appendix_name),
                           (reports_dir / ".state" / f"{packet_name}.json", folder / ".state" / f"{packet_name}.json")):
        try:   # the state last: a packet whose state moved has moved whole
            source.replace(target)
        except FileNotFoundError:
            pass


def names(session_id: str, topic_slug: str | None) -> tuple[str, str]:
    suffix = f"{session_id}_{topic_slug}" if topic_slug else session_id
    return f"evidence_packet_{suffix}.md", f"evidence_appendix_{suffix}.md"


def _atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def load_state(reports_dir: Path, packet_name: str) -> dict | None:
    p = reports_dir / ".state" / f"{packet_name}.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def front_matter(state: dict, appendix: str | None, kind: str = "evidence_packet") -> dict:
    calls = state["calls"]
    sources = [s for c in calls for s in c["sources"]]
    last = calls[-1]
    maps = []
    for c in calls:
        maps += [m for m in c["navigation"]["maps_accessed"] if m not in maps]
    found_in = next((c["navigation"]["evidence_found_in"] for c in calls if c["sources"]), "raw")
    expansions: dict[str, list[str]] = {}
    for c in calls:
        for term, exp in c["keyword_expansions"].items():
            expansions.setdefault(term, [])
            expansions[term] += [e for e in exp if e not in expansions[term]]
    failed = []
    for c in calls:
        failed += [f for f in c["scratchpad_state"]["failed_searches"] if f not in failed]
    fm = {
        "type": kind,
        "query": calls[0]["query"],
        "scope": state["scope"],
        "sources_found": len(sources),
        "created": state["created"],
        "updated": last["date"],
        "session_id": state["session_id"],
        "topic": state["topic"],
        "workspace": state["workspace"],
        "calls": len(calls),
        "confidence": {lvl: sum(1 for s in sources if s["confidence"] == lvl) for lvl in LEVELS},
        "navigation": {
            "maps_accessed": maps,
            "navigation_path": last["navigation"]["navigation_path"],
            "raw_files_scanned": sum(c["navigation"]["raw_files_scanned"] for c in calls),
            "raw_files_read": sum(c["navigation"]["raw_files_read"] for c in calls),
            "directories_seen": sum(c["navigation"]["directories_seen"] for c in calls),
            "domains_seen": sum(c["navigation"].get("domains_seen", 0) for c in calls),
            "lines_read": sum(c["navigation"]["lines_read"] for c in calls),
            "evidence_found_in": found_in,
            "search_rounds": sum(c["navigation"]["search_rounds"] for c in calls),
            "search_termination": last["navigation"]["search_termination"],
            "decomposition": {"sub_queries": [sq for c in calls for sq in c["decomposition"]["sub_queries"]],
                              "signal": last["decomposition"]["signal"]},
            "scratchpad_state": {
                "rounds_completed": sum(c["scratchpad_state"]["rounds_completed"] for c in calls),
                "failed_searches": failed,
                "gaps_remaining": last["scratchpad_state"]["gaps_remaining"],
            },
        },
        "keyword_expansions": expansions,
        "expansion_sources": {term: src for c in calls for term, src in c.get("expansion_sources", {}).items()},
        "grep_patterns_used": [p for c in calls for p in c["patterns"]],
        "appendix": appendix,
    }
    for key in ("pages_listed", "pages_unknown", "map_write"):   # the last call's, when it had them
        if key in last["navigation"]:
            fm["navigation"][key] = last["navigation"][key]
    if not fm["expansion_sources"]:
        del fm["expansion_sources"]
    if len(calls) > 1:
        fm["queries"] = [c["query"] for c in calls]
    return fm


# libyaml's emitter when PyYAML has it (the packet is drawn after every round: the pure-Python emitter
# took ~12 ms a packet on a long session); the same YAML either way (tests/evidence/test_evidence_workflow.py).
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _yaml(fm: dict, dumper=None) -> str:
    return "---\n" + yaml.dump(fm, Dumper=dumper or DUMPER, sort_keys=False, allow_unicode=True,
                               width=1000) + "---\n"


def _quote(text: str) -> str:
    return "\n".join("> " + line if line.strip() else ">" for line in text.splitlines() or [""])


def _source(n: int, s: dict, short: bool = False) -> str:
    excerpt = s["excerpt"]
    if short and len(excerpt) > SHORT_EXCERPT:
        excerpt = excerpt[:SHORT_EXCERPT].rsplit(" ", 1)[0] + " …"
    sig = s["signals"]
    lines = [f"### Source {n}: {inline(s['path'])}",
             f"- **Type:** {s['type']}",
             f"- **Title:** {inline(s['title']) or '(untitled)'}",
             f"- **Page id:** {s['page_id']}" + (f" · section: {s['section']}" if s["section"] else "")
             + f" · chars {s['char_start']}–{s['char_end']}",
             "- **Relevant excerpt:**", "", _quote(excerpt), "",
             f"- **Confidence:** {s['confidence']} (p = {s['p']:.2f}: cosine {sig['dense_cosine']:.3f}, "
             f"both arms {'yes' if sig['both_arms'] else 'no'}, rank {sig['rank']}, "
             f"coverage {sig['coverage']:.2f})",
             f"- **Found by:** round {s['round']} ({s['kind']}; route {s.get('route', s['type'])}) \"{inline(s['found_by'])}\""
             + (f" within {s['within']}" if s.get("within") else "")]
    return "\n".join(lines) + "\n"


def _call_section(c: dict, first_number: int, short: bool = False) -> tuple[str, int]:
    out = [f"## Search {c['n']}: {inline(c['query'])}", "",
           f"{c['date']} · query_id {c['query_id']} · {c['navigation']['search_rounds']} rounds · "
           f"stopped: {c['navigation']['search_termination']}", ""]
    subs = c["decomposition"]["sub_queries"]
    if len(subs) > 1:
        out.append(f"Decomposed ({c['decomposition']['signal']}) into: "
                   + "; ".join(f"\"{inline(s['query'])}\"" for s in subs))
        out.append("")
    n = first_number
    if not c["sources"]:
        out += ["No relevant sources were found for this search"
                + (" beyond those above." if c["refound"] else "."), ""]
    for s in c["sources"]:
        out.append(_source(n, s, short))
        n += 1
    if c["refound"]:
        out += ["Found again (already above): " + ", ".join(inline(u) for u in c["refound"]), ""]
    return "\n".join(out), n


def render_full(state: dict, fm: dict) -> str:
    parts = [_yaml(fm), f"# Evidence for: {inline(state['scope'])}", ""]
    n = 1
    for c in state["calls"]:
        text, n = _call_section(c, n)
        parts.append(text)
    if n == 1:
        parts.append("sources_found: 0 — no page in the workspace gave evidence for this query.\n")
    return "\n".join(parts)


def render_main(state: dict, fm: dict, appendix_name: str) -> str:
    sources = [s for c in state["calls"] for s in c["sources"]]
    numbered = {id(s): i for i, s in enumerate(sources, start=1)}
    top = sorted(sources, key=lambda s: (-s["p"], s["path"]))[:TOP_SOURCES]
    conf = fm["confidence"]
    out = [_yaml(fm), f"# Evidence for: {inline(state['scope'])}", "",
           f"{len(sources)} sources ({conf['high']} high, {conf['medium']} medium, {conf['low']} low) over "
           f"{len(state['calls'])} search(es). Every source with its full excerpt: {appendix_name}.", "",
           "## Top sources by confidence", ""]
    out += [_source(numbered[id(s)], s, short=True) for s in top]
    out += ["## Key patterns", ""]
    for p in fm["grep_patterns_used"]:
        out.append(f"- round {p['round']} ({p['kind']}): \"{inline(p['pattern'])}\" — {p['matches']} pages scanned, "
                   f"{p['new_sources']} new sources")
    return "\n".join(out) + "\n"


def write_packet(reports_dir: Path, state: dict, split_chars: int) -> dict:
    """Write the state, then the packet (and the appendix when it is due). Returns the paths."""
    packet_name, appendix_name = names(state["session_id"], state["topic_slug"])
    _atomic(reports_dir / ".state" / f"{packet_name}.json", json.dumps(state, indent=1, default=str))
    full = render_full(state, front_matter(state, None))
    main_path, appendix_path = reports_dir / packet_name, reports_dir / appendix_name
    if len(full) <= split_chars and not appendix_path.exists():
        _atomic(main_path, full)
        return {"packet": main_path, "appendix": None}
    # Once split, a packet stays split: the appendix keeps growing, the main file stays a summary.
    _atomic(appendix_path, render_full(state, front_matter(state, None, kind="evidence_appendix")))
    _atomic(main_path, render_main(state, front_matter(state, appendix_name), appendix_name))
    return {"packet": main_path, "appendix": appendix_path}


def new_state(session_id: str, topic: str | None, topic_slug: str | None, workspace: str, scope: str) -> dict:
    return {"session_id": session_id, "topic": topic, "topic_slug": topic_slug, "workspace": workspace,
            "scope": scope, "created": date.today().isoformat(), "calls": []}
