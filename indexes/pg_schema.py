"""The corpus store's schema in PostgreSQL, versioned: each migration is a list of statements applied
once, in one transaction, by whichever process opens the store first — the others wait on an
advisory lock, then find it done. A store whose schema is newer than this code knows is refused
(an older replica must not write into a layout it does not understand).

The tables are the DuckDB store's (indexes/store.py), with three differences that concurrent writers
need: embeddings have a primary key (model, chunk_id), page_entities one on (page_id, entity_id), and
vectors are float32 bytes (bytea) rather than a list of floats. Text columns compare and sort in the
"C" collation, byte by byte, as DuckDB and Python do, whatever the database's own locale.
"""
from __future__ import annotations

from .store_rows import StoreError

# The change feed's NOTIFY channel: each committed generation, in commit order (its number), and
# "vectors:<model>" when vectors were added without a new generation (a background embedding).
CHANNEL = "refindery_generation"
VECTORS_NOTICE = "vectors:"

# pg_advisory_lock's key: "refindery" as a 64-bit number, so that it does not meet another program's.
ADVISORY_KEY = 0x726566696E646572

T = 'text COLLATE "C"'

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "the corpus store", [
        f"CREATE TABLE meta (key {T} PRIMARY KEY, value {T})",
        f"CREATE TABLE workspaces (workspace_id {T} PRIMARY KEY, name {T}, created_at timestamp)",
        f"""CREATE TABLE pages (
            page_id {T} PRIMARY KEY, workspace_id {T} NOT NULL, url {T} NOT NULL, url_norm {T} NOT NULL,
            domain {T}, title {T}, body_text {T}, content_hash {T} NOT NULL, first_seen timestamp NOT NULL,
            last_seen timestamp NOT NULL, published timestamp, visit_count integer NOT NULL DEFAULT 1,
            cluster_id bigint, scope {T}, updated_generation bigint NOT NULL)""",
        "CREATE INDEX pages_workspace ON pages (workspace_id, url_norm)",
        "CREATE INDEX pages_domain ON pages (workspace_id, domain)",
        f"""CREATE TABLE chunks (
            chunk_id bigint PRIMARY KEY, page_id {T} NOT NULL, ordinal integer NOT NULL, text {T} NOT NULL,
            char_start integer NOT NULL, char_end integer NOT NULL, section_path text[] COLLATE "C", n_tokens integer)""",
        "CREATE INDEX chunks_page ON chunks (page_id)",
        f"""CREATE TABLE entities (
            entity_id {T} PRIMARY KEY, workspace_id {T} NOT NULL, canonical {T} NOT NULL, aliases text[] COLLATE "C", scope {T})""",
        "CREATE INDEX entities_workspace ON entities (workspace_id)",
        f"CREATE TABLE page_entities (page_id {T} NOT NULL, entity_id {T} NOT NULL, PRIMARY KEY (page_id, entity_id))",
        "CREATE INDEX page_entities_entity ON page_entities (entity_id)",
        f"""CREATE TABLE embeddings (
            model {T} NOT NULL, chunk_id bigint NOT NULL, vector bytea NOT NULL, PRIMARY KEY (model, chunk_id))""",
        "CREATE INDEX embeddings_chunk ON embeddings (chunk_id)",
        f"CREATE TABLE changes (generation bigint NOT NULL, page_id {T} NOT NULL, op {T} NOT NULL)",
        "CREATE INDEX changes_generation ON changes (generation)",
        f"""CREATE TABLE quarantine (
            page_id {T} NOT NULL, workspace_id {T}, url {T}, reason {T} NOT NULL,
            quarantined_at timestamp NOT NULL, generation bigint NOT NULL, page jsonb)""",
        f"""CREATE TABLE clusters (
            cluster_id bigint PRIMARY KEY, workspace_id {T} NOT NULL, model {T}, size integer,
            created_at timestamp NOT NULL, tombstoned_at timestamp)""",
    ]),
    (2, "API keys (indexes/keys.py)", [
        f"""CREATE TABLE api_keys (
            key_id {T} PRIMARY KEY, name {T}, salt {T} NOT NULL, digest {T} NOT NULL,
            workspaces text[] COLLATE "C" NOT NULL, scopes text[] COLLATE "C" NOT NULL, read_only boolean NOT NULL,
            created_at timestamp NOT NULL, revoked_at timestamp)""",
    ]),
    # params, timings and pinned are JSON kept as the text it was written as (cast to jsonb to query in it)
    (3, "the query log (indexes/querylog.py)", [
        f"""CREATE TABLE log_queries (
            query_id {T} PRIMARY KEY, ts timestamp NOT NULL, endpoint {T} NOT NULL, workspace {T},
            query {T}, params {T}, models text[] COLLATE "C", timings {T}, total integer, returned integer,
            pinned {T}, error_type {T}, error_title {T}, scopes text[] COLLATE "C")""",
        "CREATE INDEX log_queries_ts ON log_queries (ts)",
        f"""CREATE TABLE log_candidates (
            query_id {T} NOT NULL, model {T} NOT NULL, arm {T} NOT NULL, rank integer NOT NULL,
            chunk_id bigint NOT NULL, page_id {T}, score double precision)""",
        "CREATE INDEX log_candidates_query ON log_candidates (query_id)",
        f"""CREATE TABLE log_fused (
            query_id {T} NOT NULL, model {T} NOT NULL, stage {T} NOT NULL, rank integer NOT NULL,
            chunk_id bigint NOT NULL, page_id {T}, score double precision)""",
        "CREATE INDEX log_fused_query ON log_fused (query_id)",
        f"""CREATE TABLE log_results (
            query_id {T} NOT NULL, model {T} NOT NULL, rank integer NOT NULL, page_id {T} NOT NULL,
            score double precision, pinned {T})""",
        "CREATE INDEX log_results_query ON log_results (query_id)",
        f"""CREATE TABLE log_agreement (
            query_id {T} NOT NULL, model_a {T} NOT NULL, model_b {T} NOT NULL, k integer,
            jaccard double precision, rbo_ext double precision, rbo_p double precision,
            kendall_tau_b double precision, shared integer)""",
        f"""CREATE TABLE log_access (
            request_id {T} NOT NULL, ts timestamp NOT NULL, key_id {T}, method {T}, route {T},
            workspace {T}, status integer, duration_ms double precision)""",
        "CREATE INDEX log_access_ts ON log_access (ts)",
        f"""CREATE TABLE feedback (
            query_id {T} NOT NULL, page_id {T} NOT NULL, kind {T} NOT NULL, ts timestamp NOT NULL)""",
        "CREATE INDEX feedback_query ON feedback (query_id)",
    ]),
    (4, "evidence map notes (indexes/map_notes.py)", [
        f"""CREATE TABLE evidence_map_notes (
            workspace_id {T} NOT NULL, version bigint NOT NULL, group_key {T} NOT NULL, page_id {T} NOT NULL,
            url {T}, title {T}, sub_query {T} NOT NULL, query_vector real[] NOT NULL, confidence {T},
            session_id {T}, query_id {T}, written_at timestamp NOT NULL)""",
        "CREATE INDEX evidence_map_notes_workspace ON evidence_map_notes (workspace_id, version)",
    ]),
    (5, "replicas and the generation each has applied (indexes/pg_store.py)", [
        f"""CREATE TABLE replicas (
            replica_id {T} PRIMARY KEY, address {T}, applied bigint NOT NULL, started_at timestamp NOT NULL,
            seen_at timestamp NOT NULL)""",
    ]),
    (6, "relation writes every replica replays, and the relation records every replica reads", [
        # each write of the relation tables (kept in DuckDB by every replica: indexes/relation_log.py),
        # as the statements and Arrow tables that made it, at the generation it took
        f"""CREATE TABLE relation_ops (
            generation bigint PRIMARY KEY, replica {T} NOT NULL, written_at timestamp NOT NULL,
            changes text[] NOT NULL, ops text NOT NULL, tables bytea[] NOT NULL)""",
        # the tables come compressed (Arrow IPC, zstd): PostgreSQL's own compression would only cost time
        "ALTER TABLE relation_ops ALTER COLUMN tables SET STORAGE EXTERNAL",
        # what relation searches and criterion readers record (indexes/relation_records.py)
        f"""CREATE TABLE audit_events (
            request_id {T} NOT NULL, ts timestamp NOT NULL, verb {T} NOT NULL, workspace_id {T},
            request text, rows text, spans text, summary text)""",
        "CREATE INDEX audit_events_request ON audit_events (request_id)",
        f"""CREATE TABLE criterion_judgments (
            workspace_id {T} NOT NULL, criterion_key {T} NOT NULL, entity_id {T} NOT NULL, doc_key {T} NOT NULL,
            state {T} NOT NULL, quote text, page_id {T}, url text, chunk_id bigint, char_start integer,
            char_end integer, score double precision, read_at timestamp NOT NULL)""",
        "CREATE INDEX criterion_judgments_key ON criterion_judgments (workspace_id, criterion_key, entity_id)",
        f"""CREATE TABLE criterion_facets (
            criterion text NOT NULL, model {T} NOT NULL, facets text NOT NULL, dropped text NOT NULL,
            created_at timestamp NOT NULL)""",
        "CREATE INDEX criterion_facets_key ON criterion_facets (criterion, model)",
    ]),
    (7, "the API key that sent each judgment (whom its shortcut serves)", [
        "ALTER TABLE feedback ADD COLUMN IF NOT EXISTS key_id text",
    ]),
    (8, "keys that only add pages (the browser extension's, indexes/keys.py)", [
        "ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS pages_only boolean",
    ]),
    (9, "imports and the status of each URL they fetch (indexes/imports.py)", [
        f"""CREATE TABLE imports (
            import_id {T} PRIMARY KEY, workspace {T} NOT NULL, kind {T} NOT NULL, source {T} NOT NULL,
            options json, created timestamp NOT NULL, updated timestamp NOT NULL)""",
        f"""CREATE TABLE import_urls (
            import_id {T} NOT NULL, url {T} NOT NULL, page_id {T}, title {T}, status {T} NOT NULL, reason {T},
            placeholder {T}, updated timestamp NOT NULL, PRIMARY KEY (import_id, url))""",
    ]),
]
LATEST = MIGRATIONS[-1][0]


class SchemaTooNew(StoreError):
    """The store was migrated by a newer refindery than this one."""


def migrate(con, corpus_version: str) -> int:
    """Bring the schema to LATEST under the advisory lock (`con` in autocommit); returns the version
    found before. A fresh store also gets its meta rows: the corpus's schema version and generation 0."""
    con.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_KEY])
    try:
        con.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
                           version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)""")
        found = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
        if found > LATEST:
            raise SchemaTooNew(f"the store's schema is version {found}, newer than this refindery knows "
                               f"({LATEST}): upgrade refindery before it opens this store")
        for version, name, statements in MIGRATIONS:
            if version <= found:
                continue
            with con.transaction():
                for stmt in statements:
                    con.execute(stmt)
                if version == 1:
                    con.execute("INSERT INTO meta VALUES ('schema_version', %s), ('generation', '0')",
                                [corpus_version])
                con.execute("INSERT INTO schema_migrations VALUES (%s, %s, now())", [version, name])
        return found
    finally:
        con.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_KEY])
