"""Document loads: a folder of documents (Markdown or text, with optional YAML front matter), each
tied to an entity by a declared key path, read into relation rows at ingest.

Two readers recover rows, and every value they keep re-slices to a quote in the document:
  - rules (declared by the workspace's packs under `[[readers]]`, or by the load): a front-matter
    key holding a mapping or a list of mappings, labelled lines ("Outcome: passed") grouped in
    blocks under a heading, and Markdown tables under a heading. A rule's value IS the document's
    text at its span;
  - the configured compiler model (`model_reader`), through one forced tool call per document whose
    schema is the pack's relations; its output goes through the brief compiler's checker
    discipline: a quote must be whole words of the document at its span (re-located when it occurs
    exactly once), and the value must be what the quote says (the same words, a vocabulary surface
    of the same term, the number, or the month it names) — otherwise the row is dropped with the
    reason.

Every kept row is `extracted` and carries a span receipt per slot (document, char span, quote,
content hash) that delivery and `region` re-read from the document (`byte_verified`).

A load is prepared whole before anything is written (`prepare`), then written in one transaction
(`write`). Re-loading the same folder is a sync: only documents whose content (or whose reading:
readers, paths, model) changed are re-read and their rows superseded; a document gone from the
folder has its rows superseded; the rest stay exactly as they were (corrections included). The
documents are also the workspace's pages (the Engine ingests them, so criteria and ideas read them).
"""
from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from indexes.relation_loads import DocumentRow, LoadWriter
from indexes.relations import RelationStore

from engine.core.access import Forbidden
from engine.core.clock import utcnow
from engine.core.errors import CompileFailed, LoadInvalid, ReaderUnavailable
from engine.core.identity import printable
from engine.core.values import Name
from engine.relations.loads import _maybe_crash, confine, shown, slot_reads
from engine.relations.doc_model_reader import MODEL_SYSTEM, check_model_rows, reader_tool
from engine.relations.doc_readers import READERS, Doc, Extracted, ReaderRule, _text_at, parse
from engine.relations.workspaces import Space, open_space

SUFFIXES = (".md", ".markdown", ".txt", ".json")
MAX_DOCUMENTS = 20_000
# Rows one document may yield (all its readers together): a 2 MB file can alias one list of its front
# matter hundreds of thousands of times; no profile or record states that many facts.
MAX_ROWS_PER_DOCUMENT = 2_000


class DocumentsDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key_path: str = Field(min_length=1, max_length=200,
                          description="The front-matter key (dotted for a nested one) holding the entity id.")
    name_path: str | None = Field(default=None, max_length=200,
                                  description="The front-matter key holding the entity's display name.")
    title_path: str | None = Field(default=None, max_length=200, description="The page title (default: the name).")
    kind: str | None = Field(default=None, max_length=100,
                             description="Subject kind of the entities; the relations' one kind when absent.")
    url_base: str | None = Field(default=None, max_length=2000,
                                 description="Page URL = url_base + the document's path in the folder "
                                             "(default file:///<workspace>/<folder>/<path>).")
    scope: Name | None = Field(default=None, min_length=1, max_length=200, description=(
        "The document scope of every document of the load (absent: every key of the workspace reads them)."))
    scope_path: str | None = Field(default=None, min_length=1, max_length=200, description=(
        "The front-matter key (or record field) holding a document's scope; a document without it has `scope`."))


class DocumentLoadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(min_length=1, description="A folder of .md / .markdown / .txt documents, or of .json "
                                                  "records (a document-store export, re-synced by re-loading).")
    documents: DocumentsDecl
    readers: list[ReaderRule] | None = Field(default=None, max_length=100,
                                             description="Rules; absent: the readers the workspace's packs declare.")
    model_reader: bool | list[str] = Field(default=False, description=(
        "Read prose with the configured compiler model too: true for every relation, or the relations to read."))
    coverage: list[str] = Field(default_factory=list, max_length=100, description=(
        "Relations every loaded document was read for: an entity with a document and no row of one is none."))


# ---------------------------------------------------------------------------------------------
# Prepare (read and check everything) and write (one transaction)

@dataclass
class Prepared:
    space: Space
    req: DocumentLoadRequest
    root: Path
    source_key: str
    kind: str
    docs: list[Doc]
    changed: list[Doc]                   # read now (new, or content / reading changed)
    removed: list[dict]                  # documents of the previous load gone from the folder (or their scope changed)
    scopes: tuple[str, ...] | None = None   # the loading key's document scopes (None: every scope)
    rows: list[Extracted] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    model: str | None = None

    def page_url(self, doc: Doc) -> str:
        base = self.req.documents.url_base or f"file:///{self.space.workspace_id}/{self.root.name}/"
        return base + doc.rel

    def pages(self) -> list[dict]:
        """The changed documents as page records of the workspace, each linked to its entity."""
        out = []
        for d in self.changed:
            title = _text_at(d, self.req.documents.title_path) or d.name or Path(d.rel).stem
            body = d.body.strip() if d.body_at < len(d.text) else d.text   # a JSON record: its text
            page = {"url": self.page_url(d), "title": title, "body_text": body or title, "scope": d.scope}
            if d.entity_id:
                page["entities"] = [{"canonical": d.entity_id, "id": d.entity_id,
                                     "aliases": [d.name] if d.name else []}]
            out.append(page)
        return out

    def removed_pages(self) -> list[tuple[str, str | None]]:
        """(url, scope) of each removed document's page."""
        return [(r["url"], r["scope"]) for r in self.removed if r.get("url")]


def _rules(space: Space, req: DocumentLoadRequest) -> list[ReaderRule]:
    if req.readers is not None:
        return req.readers
    rules = []
    for pack in space.packs:
        for i, spec in enumerate(pack.readers):
            try:
                rules.append(ReaderRule.model_validate(spec))
            except ValidationError as exc:
                raise LoadInvalid(f"pack {pack.name}: readers[{i}] is not a reader rule: "
                                  f"{exc.errors()[0]['msg']}", reason="reader_invalid") from exc
    return rules


def _check_rules(space: Space, rules: list[ReaderRule], model_relations: list[str], coverage: list[str]) -> None:
    for i, r in enumerate(rules):
        rel = space.schema.relation(r.relation)
        if rel is None:
            raise LoadInvalid(f"readers[{i}]: no pack of the workspace declares relation {r.relation!r}",
                              reason="relation_unknown", relations=sorted(space.schema.relations))
        for slot in r.slots:
            if slot not in rel.stored_slots:
                raise LoadInvalid(f"readers[{i}]: relation {rel.name} declares no slot {slot!r} a reader fills",
                                  reason="slot_computed" if slot in rel.slots else "slot_unknown",
                                  slots=rel.stored_slots)
    for name in [*model_relations, *coverage]:
        if space.schema.relation(name) is None:
            raise LoadInvalid(f"no pack of the workspace declares relation {name!r}", reason="relation_unknown",
                              relations=sorted(space.schema.relations))


def prepare(rstore: RelationStore, workspace_id: str, req: DocumentLoadRequest, allowed: list[Path] | None,
            compiler=None, scopes: tuple[str, ...] | None = None) -> Prepared:
    """Read and check the whole load; nothing is written. Only the documents that changed since
    the previous load of this folder are read (and sent to the model). `scopes`: the document
    scopes of the loading key (None: every scope): a key may load only documents it could read."""
    space = open_space(rstore, workspace_id)
    root = confine(req.source, allowed)
    if not root.is_dir():
        raise LoadInvalid(f"document source {shown(root)!r} is not a folder", reason="source_unreadable")
    rules = _rules(space, req)
    model_relations = (list(space.schema.relations) if req.model_reader is True
                       else list(req.model_reader) if req.model_reader else [])
    _check_rules(space, rules, model_relations, req.coverage)
    if not rules and not model_relations and not req.documents.name_path:
        raise LoadInvalid("the load names no reader, no model_reader and no name_path: it would read nothing",
                          reason="load_empty")
    if model_relations and compiler is None:
        raise ReaderUnavailable("model_reader needs a compile model: set [compiler] base_url and model "
                                 "(or REFINDERY_COMPILER_BASE_URL)")
    kind = _subject_kind(space, req, rules, model_relations)
    reading = hashlib.sha256(json.dumps({
        "documents": req.documents.model_dump(), "rules": [r.model_dump(by_alias=True) for r in rules],
        "model": model_relations and compiler.describe()["model"], "model_relations": model_relations,
        "packs": [p.name for p in space.packs]}, sort_keys=True).encode()).hexdigest()[:16]
    docs = _documents(root, req, reading, scopes)
    source_key = f"docs:{root.resolve()}"
    # A document is (path in the folder, scope): a key with document scopes syncs only the documents
    # of its scopes — another scope's (or an unscoped one every key reads) is as absent to it as one
    # never loaded, so its load neither replaces nor relabels them but writes its own.
    before = {(r["document"], r["scope"]): r for r in rstore.current_documents(workspace_id, source_key)
              if scopes is None or r["scope"] in scopes}
    changed = [d for d in docs if before.get((d.rel, d.scope), {}).get("fingerprint") != d.fingerprint]
    present = {(d.rel, d.scope) for d in docs}
    removed = [r for key, r in before.items() if key not in present]
    prep = Prepared(space, req, root, source_key, kind, docs, changed, removed, scopes=scopes)
    tool = reader_tool(space, [space.schema.relation(r) for r in model_relations]) if model_relations else None
    prep.usage = {"calls": 0}
    for d in changed:
        _read_document(prep, d, rules, (compiler, tool, set(model_relations)) if tool is not None else None)
    return prep


def _subject_kind(space, req: DocumentLoadRequest, rules: list, model_relations: list[str]) -> str:
    """The subject kind of the entities the documents are about: the one named, else the one kind the
    relations read hold, else the workspace's one kind."""
    kinds = {space.schema.relation(r.relation).subject for r in rules}
    kinds |= {space.schema.relation(r).subject for r in model_relations}
    kind = req.documents.kind or (next(iter(kinds)) if len(kinds) == 1 else None)
    if kind is None:
        known = space.subject_kinds()
        kind = known[0] if len(known) == 1 else None
    if kind is None:
        raise LoadInvalid("documents: name the subject `kind` of the entities", reason="entities_kind_missing")
    return kind


def _documents(root: Path, req: DocumentLoadRequest, reading: str, scopes: tuple[str, ...] | None) -> list:
    """Every document of the folder (hidden paths left out), parsed, with its entity, name and scope
    read off it; a document of a scope the loading key does not hold is refused."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise LoadInvalid(f"document source {shown(root)!r} holds no .md, .markdown, .txt or .json document",
                          reason="source_empty")
    if len(files) > MAX_DOCUMENTS:
        raise LoadInvalid(f"a document load reads at most {MAX_DOCUMENTS} documents", reason="too_many_documents")
    docs = []
    for f in files:
        d = parse(f, f.relative_to(root).as_posix())
        d.entity_id = _text_at(d, req.documents.key_path)
        d.name = _text_at(d, req.documents.name_path)
        d.scope = _text_at(d, req.documents.scope_path) or req.documents.scope
        if d.scope is not None and len(d.scope) > 200:
            raise LoadInvalid(f"document {d.rel!r}: its scope is over 200 characters", reason="scope_invalid")
        if scopes is not None and d.scope not in scopes:   # (which scope it is of is not this key's to learn)
            raise Forbidden(f"document {d.rel!r} is not of this key's scopes (" + ", ".join(scopes) + "): it may "
                            "load only documents of its scopes", document=d.rel)
        if d.scope is not None and not printable(d.scope):
            raise LoadInvalid(f"document {d.rel!r}: its scope holds a control character", reason="scope_invalid")
        d.fingerprint = f"{d.content_hash}:{reading}"
        docs.append(d)
    return docs


def _write_relation(w: LoadWriter, prep: Prepared, rel, changed_keys: list[tuple], by_doc: dict, load_id: str
                    ) -> dict | None:
    """One relation's rows of the changed documents written (with a span receipt per slot), the rows
    of the documents they replace superseded: its summary, or None when it has neither."""
    space = prep.space
    shape = space.shape(rel)
    superseded = w.supersede_sources(shape, changed_keys)
    rows = [r for r in prep.rows if r.relation == rel.name]
    if not rows and not superseded:
        return None
    data = pa.table({
        "__entity": pa.array([by_doc[r.source_rel].entity_id for r in rows], pa.string()),
        "__key": pa.array([f"{r.reader}:{r.ordinal}" for r in rows], pa.string()),
        "__source": pa.array([f"{prep.source_key}#doc:{r.source_rel}" for r in rows], pa.string()),
        "__ord": pa.array(list(range(1, len(rows) + 1)), pa.int64()),
        "__scope": pa.array([by_doc[r.source_rel].scope for r in rows], pa.string()),
        **{f"s_{slot}": pa.array([r.slots[slot][0] if slot in r.slots else None for r in rows], pa.string())
           for slot in rel.stored_slots}})
    written = w.insert_rows(shape, rel.subject, rel.name, "__entity",
                            slot_reads(space, rel, {s: f"s_{s}" for s in rel.stored_slots}), data,
                            prep.source_key, None)
    w.insert_spans([DocumentRow(f"{load_id}-{rel.name}-{i}", slot, r.source_rel, s, e, quote,
                                by_doc[r.source_rel].content_hash, r.reader)
                    for i, r in enumerate(rows, 1) for slot, (_, s, e, quote) in r.slots.items()])
    return {"relation": rel.name, **written, "superseded": superseded}


def _read_document(prep: Prepared, d, rules: list, model: tuple | None) -> None:
    """One changed document's rows into `prep`: every rule's reader, then the model reader (`model`:
    the compiler, its tool and the relations it reads; None: no model reader), numbered per reader
    and relation; what a reader dropped, with why."""
    found, dropped = [], []
    for rule in rules:
        got, lost = READERS[rule.from_](d, rule)
        found += got
        dropped += [{**x, "relation": rule.relation, "reader": f"rule:{rule.from_}"} for x in lost]
    if model:
        compiler, tool, model_relations = model
        try:
            call = compiler.call(MODEL_SYSTEM, d.text, tool)
        except Exception as exc:  # CompilerFailed: the endpoint refused or did not call the tool
            raise CompileFailed(f"the model reader failed on document {d.rel!r}: {exc}",
                                compiler=compiler.describe()) from exc
        prep.model = call.model
        prep.usage["calls"] += 1
        for k, v in (call.usage or {}).items():
            if isinstance(v, (int, float)):
                prep.usage[k] = prep.usage.get(k, 0) + v
        got, lost = check_model_rows(prep.space, d, model_relations, call.arguments)
        found += got
        dropped += [{**x, "reader": "model"} for x in lost]
    if len(found) > MAX_ROWS_PER_DOCUMENT:
        raise LoadInvalid(f"document {d.rel!r} yields {len(found)} rows; a document yields at most "
                          f"{MAX_ROWS_PER_DOCUMENT}", reason="document_too_many_rows", document=d.rel)
    counters: dict = {}
    for row in found:
        row.source_rel = d.rel
        row.ordinal = counters[(row.reader, row.relation)] = counters.get((row.reader, row.relation), 0) + 1
    prep.rows += found
    prep.dropped += [{"document": d.rel, **x} for x in dropped]


def write(rstore: RelationStore, prep: Prepared, pages: dict[str, str]) -> dict:
    """Write a prepared load in one transaction. `pages`: url -> page id of the ingested documents."""
    space, ws = prep.space, prep.space.workspace_id
    load_id = f"ld_{secrets.token_hex(5)}"
    now = utcnow()
    # what this load replaces: each changed or removed document's rows of that document's own scope
    changed_keys = [(f"{prep.source_key}#doc:{d.rel}", d.scope) for d in prep.changed] + \
        [(f"{prep.source_key}#doc:{r['document']}", r["scope"]) for r in prep.removed]
    by_doc = {d.rel: d for d in prep.changed}
    summary: dict = {"documents": {"read": len(prep.docs), "changed": len(prep.changed),
                                   "unchanged": len(prep.docs) - len(prep.changed), "removed": len(prep.removed),
                                   "unattributed": sum(1 for d in prep.docs if not d.entity_id)},
                     "relations": [], "dropped": prep.dropped[:200], "dropped_total": len(prep.dropped),
                     "coverage": []}
    if prep.usage.get("calls"):
        summary["model_reader"] = {"model": prep.model, **prep.usage}
    with rstore.transaction(changes=[ws]) as con:
        w = LoadWriter(rstore, con, ws, load_id)
        for rel in space.schema.relations.values():
            written = _write_relation(w, prep, rel, changed_keys, by_doc, load_id)
            if written is not None:
                summary["relations"].append(written)
                _maybe_crash(f"documents:{rel.name}")
        w.replace_documents(prep.source_key, [
            {"document": d.rel, "path": str(d.path), "entity_id": d.entity_id, "name": d.name,
             "content_hash": d.content_hash, "fingerprint": d.fingerprint, "url": prep.page_url(d),
             "page_id": pages.get(prep.page_url(d)), "scope": d.scope} for d in prep.changed],
            [(r["document"], r["scope"]) for r in prep.removed])
        # an entity with several documents: named by the first (by path) that names it, in that
        # document's scope; known to (and covered for) each scope one of its documents is of
        names: dict[str, tuple[str, str | None, str | None]] = {}
        for d in prep.docs:
            if d.entity_id and (d.entity_id not in names or (names[d.entity_id][1] is None and d.name)):
                names[d.entity_id] = (d.entity_id, d.name, d.scope)
        seen = sorted({(d.entity_id, d.scope) for d in prep.docs if d.entity_id}, key=lambda p: (p[0], p[1] or ""))
        added, names_changed = w.name_entities(prep.kind, [names[k] for k in sorted(names)]
                                               + [(e, None, s) for e, s in seen], prep.scopes)
        summary["entities"] = {"kind": prep.kind, "listed": len(names), "added": added,
                               "named": sum(1 for n in names.values() if n[1])}
        scoped = sorted({d.scope for d in prep.docs if d.scope})
        if scoped:
            summary["documents"]["scopes"] = {s: sum(1 for d in prep.docs if d.scope == s) for s in scoped}
        for relation in prep.req.coverage:
            rel = space.schema.relation(relation)
            w.declare_coverage(rel.name, rel.subject, f"{prep.source_key}#coverage:{rel.name}", seen, now,
                               prep.scopes)
            summary["coverage"].append({"relation": rel.name, "entities": len(names), "declared_by": "documents"})
        w.finish(now, prep.source_key, "documents", prep.req.model_dump(by_alias=True), summary, names_changed)
    rstore.changed(ws)
    return {"load_id": load_id, "workspace_id": ws, "source": shown(prep.root), "format": "documents", **summary}
