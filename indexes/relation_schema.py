"""The relation store's tables (indexes/relations.py runs this DDL as it opens).

Fixed tables:
  rel_workspaces(workspace_id, name, packs, created_at, map_version)
                                                   map_version counts the changes of names every key
                                                   reads; rel_map_versions counts, per document
                                                   scope, the changes of names only that scope's
                                                   documents carry (a key's map version is the sum
                                                   of the ones it may read)
  rel_map_versions(workspace_id, scope, version)
  rel_entities(workspace_id, entity_id, kind, name, load_id, ent_no, scopes, name_scope)
                                                   the subjects a load named; ent_no is a dense
                                                   per-workspace number that enumeration groups and
                                                   joins on (integers hash faster than ids); scopes:
                                                   NULL when a source every key reads named it, else
                                                   the document scopes whose documents did;
                                                   name_scope: the scope of the document the name
                                                   was read from (NULL: every key reads it)
  rel_loads(load_id, workspace_id, created_at, source, format, spec, summary)
  rel_coverage(workspace_id, relation, entity_id, load_id, source_key, declared_by, declared_at, current, ent_no,
               scope)                              who a load says it looked at, per relation (scope:
                                                   of the documents that say so; NULL: every key)
  rel_corrections(correction_id, workspace_id, relation, row_id, source_key, row_key, vhash, reason, created_at)
  criterion_judgments(workspace_id, criterion_key, entity_id, doc_key, state, quote, page_id, ...)
                                                   what a criterion's reader found in an entity's own
                                                   documents, keyed by the documents' content
  criterion_facets(criterion, model, facets, dropped, created_at)
                                                   a criterion's decomposition by a model, kept
  audit_events(request_id, ts, verb, workspace_id, request, rows, spans, summary)
  rel_documents(workspace_id, source_key, document, path, entity_id, name, content_hash, fingerprint,
                url, page_id, load_id, current, scope)
                                                   the documents a document load read (one current
                                                   row per document of a folder; superseded on change)
  rel_spans(workspace_id, row_id, slot, document, char_start, char_end, quote, content_hash, reader)
                                                   an extracted row's span receipt per slot: where in
                                                   which document its value is written

One wide table per (pack, relation), `rel_<pack>__<relation>`, one row per loaded row:
  row_id, workspace_id, entity_id (NULL: the loader could tie the row to nobody), ent_no, load_id,
  source_key, db_table, row_key, vhash (hash of the row's cells), current (false once a later load
  of the same source supersedes it), retired (the correction that retired it), withheld (why the
  loader could not read it), scope (the document scope of the document it was read from; NULL:
  every key of the workspace reads it), and per slot: v_<slot> (the cell as text) plus its typed reading —
  term: t_<slot> (the vocabulary term) and r_<slot> (its rung on an ordered axis); number: n_<slot>;
  month / date: lo_<slot> and hi_<slot> (the first and last day of the span the value names).
"""
DDL = [
    """CREATE TABLE IF NOT EXISTS rel_workspaces (
        workspace_id VARCHAR PRIMARY KEY, name VARCHAR, packs VARCHAR[] NOT NULL,
        created_at TIMESTAMP NOT NULL, map_version INTEGER NOT NULL DEFAULT 1)""",
    """CREATE TABLE IF NOT EXISTS rel_entities (
        workspace_id VARCHAR NOT NULL, entity_id VARCHAR NOT NULL, kind VARCHAR NOT NULL,
        name VARCHAR, load_id VARCHAR, ent_no INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rel_loads (
        load_id VARCHAR PRIMARY KEY, workspace_id VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL,
        source VARCHAR NOT NULL, format VARCHAR NOT NULL, spec JSON NOT NULL, summary JSON)""",
    """CREATE TABLE IF NOT EXISTS rel_coverage (
        workspace_id VARCHAR NOT NULL, relation VARCHAR NOT NULL, entity_id VARCHAR NOT NULL,
        load_id VARCHAR NOT NULL, source_key VARCHAR NOT NULL, declared_by VARCHAR NOT NULL,
        declared_at TIMESTAMP NOT NULL, current BOOLEAN NOT NULL, ent_no INTEGER)""",
    """CREATE TABLE IF NOT EXISTS rel_corrections (
        correction_id VARCHAR PRIMARY KEY, workspace_id VARCHAR NOT NULL, relation VARCHAR NOT NULL,
        row_id VARCHAR NOT NULL, source_key VARCHAR, row_key VARCHAR, vhash VARCHAR, reason VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rel_documents (
        workspace_id VARCHAR NOT NULL, source_key VARCHAR NOT NULL, document VARCHAR NOT NULL, path VARCHAR NOT NULL,
        entity_id VARCHAR, name VARCHAR, content_hash VARCHAR NOT NULL, fingerprint VARCHAR NOT NULL, url VARCHAR,
        page_id VARCHAR, load_id VARCHAR NOT NULL, current BOOLEAN NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rel_spans (
        workspace_id VARCHAR NOT NULL, row_id VARCHAR NOT NULL, slot VARCHAR NOT NULL, document VARCHAR NOT NULL,
        char_start INTEGER NOT NULL, char_end INTEGER NOT NULL, quote VARCHAR NOT NULL, content_hash VARCHAR NOT NULL,
        reader VARCHAR NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rel_map_versions (
        workspace_id VARCHAR NOT NULL, scope VARCHAR NOT NULL, version INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, scope))""",
    # document scopes (a data dir from before them gains the columns, every row readable by all)
    "ALTER TABLE rel_entities ADD COLUMN IF NOT EXISTS scopes VARCHAR[]",
    "ALTER TABLE rel_entities ADD COLUMN IF NOT EXISTS name_scope VARCHAR",
    "ALTER TABLE rel_coverage ADD COLUMN IF NOT EXISTS scope VARCHAR",
    "ALTER TABLE rel_documents ADD COLUMN IF NOT EXISTS scope VARCHAR",
]
# what the relation search records (indexes/relation_records.py): here when the corpus is this
# DuckDB file; in PostgreSQL (indexes/pg_schema.py) when it is there
RECORDS_DDL = [
    """CREATE TABLE IF NOT EXISTS criterion_judgments (
        workspace_id VARCHAR NOT NULL, criterion_key VARCHAR NOT NULL, entity_id VARCHAR NOT NULL,
        doc_key VARCHAR NOT NULL, state VARCHAR NOT NULL, quote VARCHAR, page_id VARCHAR, url VARCHAR,
        chunk_id BIGINT, char_start INTEGER, char_end INTEGER, score DOUBLE, read_at TIMESTAMP NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS criterion_facets (
        criterion VARCHAR NOT NULL, model VARCHAR NOT NULL, facets JSON NOT NULL, dropped JSON NOT NULL,
        created_at TIMESTAMP NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS audit_events (
        request_id VARCHAR NOT NULL, ts TIMESTAMP NOT NULL, verb VARCHAR NOT NULL, workspace_id VARCHAR,
        request JSON, rows JSON, spans JSON, summary JSON)""",
]
