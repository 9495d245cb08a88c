"""`refindery relations`: relation workspaces — create one, load SQL tables or a folder of documents
into it (a re-load of a folder is a sync), search it (every field of POST /v1/public/search a flag,
derived from its request model by server/flags.py), and the two demo workspaces."""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from engine.app import Engine
from engine.relations.search import RelationSearchRequest

from ..flags import add_request_flags, request_values
from .common import _print, _settings


def cmd_relations(args) -> int:
    """Relation workspaces from the command line: create one, load SQL tables or a folder of
    documents into it (a re-load of a folder is a sync), search it."""
    from engine.core.errors import EngineError
    from engine.relations.documents import DocumentLoadRequest
    from engine.relations.loads import LoadRequest
    from engine.relations.workspaces import WorkspaceCreate

    with Engine(_settings(args)) as e:
        try:
            if args.action == "demo":
                out = _relations_demo(e, args.workspace or "roster")
            elif args.action == "sync":   # local: as the load was given
                if not args.load:
                    _print({"detail": {"type": "validation_error", "message": "sync needs --load LOAD_ID"}})
                    return 2
                out = e.sync_load(args.workspace, args.load, confined=False)
            elif args.action == "demo-profiles":
                out = _profiles_demo(e, args.workspace or "profiles")
            elif args.action == "create":
                out = e.create_relation_workspace(WorkspaceCreate(
                    workspace_id=args.workspace, name=args.name, packs=args.packs or ["expert_network"]))
            elif args.action == "load":   # local: any path the user names
                spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
                try:
                    body = (DocumentLoadRequest if "documents" in spec else LoadRequest).model_validate(spec)
                except ValidationError as exc:
                    _print({"detail": {"type": "validation_error", "errors": json.loads(exc.json())}})
                    return 2
                out = e.load(args.workspace, body, confined=False)
            else:
                req = relation_request(args)
                if req is None:
                    return 2
                out = e.relation_search(req)
            _print(out)
            return 0
        except EngineError as exc:
            _print({"detail": exc.body()})
            return 2


def relation_request(args):
    """The relation search the arguments make, or None (the error printed): --constraints names a
    JSON file of them; every other field of POST /v1/public/search is a flag of its own (those not
    given stay unset)."""
    constraints = (json.loads(Path(args.constraints).read_text(encoding="utf-8"))
                   if args.constraints else None)
    try:
        return RelationSearchRequest(workspace_id=args.workspace, constraints=constraints,
                                     **request_values(args, args.request_fields))
    except ValidationError as exc:
        _print({"detail": {"type": "validation_error", "errors": json.loads(exc.json())}})
        return None


def _relations_demo(e: Engine, workspace: str) -> dict:
    """The seed's roster as a demo workspace: written as a DuckDB export under the data dir and
    loaded (again: a re-run supersedes the previous load of the same export)."""
    from demo.roster import LOAD, write_export
    from engine.relations.loads import LoadRequest
    from engine.relations.workspaces import WorkspaceCreate

    source = write_export(e.data_dir / "sources" / "roster-warehouse.duckdb")
    if not e.has_relation_workspace(workspace):
        e.create_relation_workspace(WorkspaceCreate(workspace_id=workspace, name="roster"))
    summary = e.load(workspace, LoadRequest(source=str(source), **LOAD), confined=False)
    return {"workspace_id": workspace, "load_id": summary["load_id"],
            "rows": {r["relation"]: r["rows"] for r in summary["relations"]}}


def _profiles_demo(e: Engine, workspace: str) -> dict:
    """The 30 invented profiles (demo/profiles/) as a document-loaded workspace (a re-run syncs)."""
    from demo.profiles import LOAD, copy_to
    from engine.relations.documents import DocumentLoadRequest
    from engine.relations.workspaces import WorkspaceCreate

    source = copy_to(e.data_dir / "sources" / workspace / "profiles")
    if not e.has_relation_workspace(workspace):
        e.create_relation_workspace(WorkspaceCreate(workspace_id=workspace, name="expert profiles"))
    summary = e.load(workspace, DocumentLoadRequest(source=str(source), **LOAD), confined=False)
    return {"workspace_id": workspace, "load_id": summary["load_id"], "documents": summary["documents"],
            "rows": {r["relation"]: r["rows"] for r in summary["relations"]}}


def add(sub) -> None:
    s = sub.add_parser("relations", help="relation workspaces: create, load SQL tables, search with constraints")
    s.add_argument("action", choices=["create", "load", "sync", "search", "demo", "demo-profiles"],
                   help="demo: (re)load the seed's roster into workspace `roster`; demo-profiles: (re)load "
                        "the 30 invented profiles (documents) into workspace `profiles`")
    s.add_argument("workspace", nargs="?", default=None, help="workspace id (generated by create when absent)")
    s.add_argument("--packs", nargs="*", help="create: relation packs (default expert_network)")
    s.add_argument("--name", default=None, help="create: display name")
    s.add_argument("--spec", help="load: a JSON file with the load body: SQL (source, relations, entities, "
                                  "coverage) or documents (source, documents, readers, model_reader, coverage)")
    s.add_argument("--load", help="sync: the load to run again from its source (only what changed is re-read)")
    s.add_argument("--constraints", help="search: a JSON file with the list of constraints (or --brief, --idea)")
    s.set_defaults(func=cmd_relations, request_fields=add_request_flags(
        s, RelationSearchRequest, skip=("workspace_id", "constraints")))
