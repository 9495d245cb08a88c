"""The search faces from the command line: `search` (pages), `evidence` (and its `maps` and
`dictionary`), `feedback` and `compare`. The search and evidence flags are derived from their request
models (server/flags.py): the same parameters as the routes, declared once."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from engine.app import Engine
from engine.evidence.search import EvidenceRequest
from engine.refind.search import SearchRequest

from ..flags import add_request_flags, request_values
from .common import _print, _settings


def cmd_search(args) -> int:
    with Engine(_settings(args)) as e:
        return _show_search(args, e.search(search_request(args)))


def search_request(args):
    """The search request the arguments make (the flags it was not given stay unset)."""
    return SearchRequest(query=args.query, **request_values(args, args.request_fields))


def _show_search(args, resp) -> int:
    if args.json:
        print(resp.model_dump_json(indent=2))
        return 0
    print(f"{resp.total} pages ranked; showing {len(resp.pages)} ({resp.timings_ms['total']:.0f} ms)")
    for hit in resp.pages:
        why = f"pinned: {hit.pinned}" if hit.pinned and not hit.score else f"score={hit.score:.4f}"
        print(f"{hit.rank:>3}. {hit.title or '(untitled)'}\n     {hit.url}   {why}")
        if hit.snippets:
            snip = " ".join(hit.snippets[0].text.split())
            print(f"     {snip[:160]}{'…' if len(snip) > 160 else ''}")
    return 0


def _evidence_request(args):
    """The evidence request the arguments make, or None (the error printed)."""
    values = request_values(args, args.request_fields)
    if args.map_write and "map_write" not in values.get("route_constraints", []):
        values["route_constraints"] = [*values.get("route_constraints", []), "map_write"]
    try:
        return EvidenceRequest(query=args.query, **values)
    except ValidationError as exc:
        print(f"error: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return None


def cmd_evidence(args) -> int:
    req = _evidence_request(args)
    if req is None:
        return 2
    with Engine(_settings(args)) as e:
        return _show_evidence(args, e.evidence(req))


def _show_evidence(args, resp) -> int:
    if args.json:
        print(json.dumps(resp.model_dump(mode="json") | {"file": resp.file}, indent=2))
    else:   # the seed's return text names the packet relative to the data dir; say where it is on disk
        print(f"{resp.summary}\n- Open: {resp.file}")
    return 0


def dictionary_file(args) -> tuple[str, str] | None:
    """`dictionary set FILE`: (format, text), or None with the error printed."""
    if not args.file:
        print("error: dictionary set needs a FILE (.toml or .md)", file=sys.stderr)
        return None
    path = Path(args.file)
    return ("toml" if path.suffix.lower() == ".toml" else "markdown"), path.read_text(encoding="utf-8")


def cmd_dictionary(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        if args.action == "set":
            source = dictionary_file(args)
            if source is None:
                return 2
            _print(e.set_dictionary(args.workspace, *source))
        else:
            _print(e.dictionary(args.workspace))
        return 0


def cmd_maps(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        m = e.maps(args.workspace)
    return _show_maps(args, m)


def _show_maps(args, m: dict) -> int:
    if args.json:
        _print(m)
        return 0
    print(f"workspace {m['workspace']} · {m['pages']} pages · generation {m['generation']} · overview {m['overview']}")
    for g in m["groups"]:
        print(f"  {g['kind']:<8} {str(g['value']):<40} {g['pages']:>6} pages  {g['label']}  ({g['map']})")
    if not m["notes"]:
        print("no notes written by searches (grant map_write: --map-write, route_constraints [\"map_write\"])")
        return 0
    print(f"notes written by searches (version {m['notes_version']}):")
    for n in m["notes"]:
        print(f"  v{n['version']}  {n['group']:<32} \"{n['sub_query']}\" -> {n['title'] or n['url']} "
              f"({n['confidence']}, session {n['session_id']})")
    return 0


def cmd_feedback(args) -> int:
    """Judgments on logged searches and the shortcuts they make: add one, list the choices, clear them."""
    if args.action == "add" and not (args.query_id and args.page_id):
        print("error: feedback add needs a QUERY_ID and a PAGE_ID", file=sys.stderr)
        return 2
    with Engine(_settings(args), repair=False) as e:
        if args.action == "add":
            _print(e.feedback(args.query_id, args.page_id, args.kind))
        elif args.action == "list":
            _print(e.choices(args.workspace))
        else:
            _print(e.clear_feedback(args.workspace, args.clear_query, args.clear_page))
        return 0


def cmd_compare(args) -> int:
    from engine.refind.compare import CompareRequest

    with Engine(_settings(args)) as e:
        return _show_compare(args, e.compare(CompareRequest(query=args.query, models=args.models.split(","),
                                                            k=args.k)))


def _show_compare(args, resp) -> int:
    if args.json:
        print(resp.model_dump_json(indent=2))
        return 0
    for run in resp.runs:
        print(f"{run.model}:")
        for h in run.pages:
            print(f"  {h.rank:>2}. {h.title or h.url}")
    for a in resp.agreement:
        tau = "n/a" if a.kendall_tau_b is None else f"{a.kendall_tau_b:.3f}"
        print(f"{a.model_a} vs {a.model_b} @{a.k}: Jaccard {a.jaccard:.3f}  RBO_EXT(p={a.rbo_p}) {a.rbo_ext:.3f}  "
              f"Kendall tau-b {tau} over {a.shared} shared")
    print(f"query_id {resp.query_id}")
    return 0


def add(sub) -> None:
    """The search faces: pages, evidence (and its maps and dictionary), compare."""
    s = sub.add_parser("search", help="search from the command line (every parameter of POST /v1/search but "
                                      "filters; unset ones take the [search] settings)")
    s.add_argument("query")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search, request_fields=add_request_flags(s, SearchRequest, skip=("query",),
                                                                     names={"k": ["-k", "--k"]}))

    s = sub.add_parser("evidence", help="gather evidence for a question into an evidence packet (seed 002); every "
                                        "parameter of POST /v1/evidence but filters")
    s.add_argument("query")
    fields = add_request_flags(s, EvidenceRequest, skip=("query",),
                               names={"session_id": ["--session", "--session-id"], "pages": ["--page", "--pages"],
                                      "k": ["-k", "--k"], "route_constraints": ["--route-constraint"]})
    s.add_argument("--map-write", action="store_true",
                   help="grant map_write (--route-constraint map_write): what this call finds is written into the "
                        "workspace's group maps")
    s.add_argument("--json", action="store_true", help="the whole reply as JSON (default: the summary)")
    s.set_defaults(request_fields=fields)
    s.set_defaults(func=cmd_evidence)

    s = sub.add_parser("maps", help="a workspace's evidence maps: groups, and what searches wrote into them")
    s.add_argument("action", choices=["show"])
    s.add_argument("--workspace", default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_maps)

    s = sub.add_parser("dictionary", help="a workspace's evidence dictionary: show it, or set it from a file")
    s.add_argument("action", choices=["show", "set"])
    s.add_argument("file", nargs="?", help="set: a .toml or .md dictionary")
    s.add_argument("--workspace", default=None)
    s.set_defaults(func=cmd_dictionary)

    s = sub.add_parser("feedback", help="judgments on logged searches, and the shortcuts they make (the page "
                                        "chosen for a close query comes first): add, list, clear")
    s.add_argument("action", choices=["add", "list", "clear"])
    s.add_argument("query_id", nargs="?", help="add: the logged search (its query_id)")
    s.add_argument("page_id", nargs="?", help="add: the page judged")
    s.add_argument("--kind", choices=["found", "click", "irrelevant"], default="found", help="add: the judgment")
    s.add_argument("--workspace", default=None)
    s.add_argument("--query-id", dest="clear_query", default=None, help="clear: only this logged search's")
    s.add_argument("--page-id", dest="clear_page", default=None, help="clear: only those on this page")
    s.set_defaults(func=cmd_feedback)

    s = sub.add_parser("compare", help="A/B: the pipeline once per embedder, with agreement figures")
    s.add_argument("query")
    s.add_argument("--models", required=True, help="comma-separated embedders, e.g. all-minilm-l6-v2,all-mpnet-base-v2")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_compare)
