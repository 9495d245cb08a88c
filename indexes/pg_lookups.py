"""What the PostgreSQL corpus store looks up for filters, pins, entities and clusters (indexes/pg_store.py
is the store; pg_reads.py its other reads): the page sets a search's filters and pins name, the facets,
entity references and the clusters, each one statement on a pooled connection, answering exactly as
the DuckDB store's lookups (store_lookups.py) do."""
from __future__ import annotations

from datetime import datetime

from .store_rows import cut_bodies, entity_answer, facets_answer, page_filter


def _lower(expr: str) -> str:
    """lower() in the database's own locale: under "C" it would fold ASCII letters only."""
    return f'lower(({expr}) COLLATE "default")'


_ALIAS_HIT = f"EXISTS (SELECT 1 FROM unnest(coalesce({{col}}, '{{{{}}}}'::text[])) a WHERE {_lower('a')} = lower(%s))"


def _alias_hit(col: str) -> str:
    return _ALIAS_HIT.format(col=col)


class PgLookups:
    """Filters, pins, entities and clusters. Uses the store's `_q` (rows) and `_one` (a row)."""

    def resolve_entities(self, workspace: str, ref: str, scopes: list[str] | None = None) -> list[str]:
        in_scope = "" if scopes is None else "AND scope = ANY(%s::text[])"
        rows = self._q(
            f"""SELECT entity_id, CASE WHEN entity_id = %s THEN 0 WHEN {_lower('canonical')} = lower(%s) THEN 1
                                  ELSE 2 END
                FROM entities WHERE workspace_id = %s AND (
                   entity_id = %s OR {_lower('canonical')} = lower(%s) OR {_alias_hit('aliases')})
                {in_scope} ORDER BY 2, 1""",
            [ref, ref, workspace, ref, ref, ref] + ([] if scopes is None else [list(scopes)]))
        return [eid for eid, rank in rows if rank == rows[0][1]] if rows else []

    def filtered_pages(self, workspace: str, domains=(), after=None, before=None, cluster_ids=(),
                       entity_ids=(), scopes=None, page_ids=None) -> list[str]:
        where, params = page_filter(workspace, domains, after, before, cluster_ids, entity_ids, scopes, page_ids, "%s")
        return [r[0] for r in self._q(f"SELECT p.page_id FROM pages p WHERE {where} ORDER BY 1", params)]

    def facets(self, workspace: str, scopes=None, limit: int = 50) -> dict:
        where, params = "p.workspace_id = %s", [workspace]
        if scopes is not None:
            where += " AND p.scope = ANY(%s::text[])"
            params.append(list(scopes))
        n, lo, hi = self._one(f"SELECT count(*), min(last_seen), max(last_seen) FROM pages p WHERE {where}", params)
        domains = self._q(f"""SELECT p.domain, count(*) AS n FROM pages p WHERE {where} AND p.domain IS NOT NULL
                              GROUP BY 1 ORDER BY n DESC, 1 LIMIT %s""", [*params, limit])
        clusters = self._q(
            f"""SELECT p.cluster_id, count(*) AS n,
                       (array_agg(p.title ORDER BY p.last_seen DESC, p.page_id)
                           FILTER (WHERE p.title IS NOT NULL AND p.title <> ''))[1:3]
                FROM pages p JOIN clusters c ON c.cluster_id = p.cluster_id AND c.tombstoned_at IS NULL
                WHERE {where} GROUP BY 1 ORDER BY n DESC, 1 LIMIT %s""", [*params, limit])
        entities = self._q(
            f"""SELECT e.entity_id, e.canonical, count(DISTINCT p.page_id) AS n
                FROM pages p JOIN page_entities pe ON pe.page_id = p.page_id
                JOIN entities e ON e.entity_id = pe.entity_id
                WHERE {where} GROUP BY 1, 2 ORDER BY n DESC, 2, 1 LIMIT %s""", [*params, limit])
        return facets_answer(n, lo, hi, domains, clusters, entities)

    def entity_document_keys(self, workspace: str, refs: list[str], scopes: list[str] | None) -> dict[str, str]:
        if not refs:
            return {}
        alias = _ALIAS_HIT.format(col="e.aliases").replace("lower(%s)", "lower(c.rid)")
        rows = self._q(
            f"""WITH c AS (SELECT unnest(%s::text[]) AS rid),
                     m AS (SELECT DISTINCT c.rid, e.entity_id AS sid FROM c JOIN entities e ON e.workspace_id = %s
                           AND (e.entity_id = c.rid OR {_lower('e.canonical')} = lower(c.rid) OR {alias}))
                SELECT m.rid, md5(string_agg(DISTINCT p.page_id || ':' || p.content_hash, ',' ORDER BY
                                  p.page_id || ':' || p.content_hash))
                FROM m JOIN page_entities pe ON pe.entity_id = m.sid
                       JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = %s
                                       AND (%s::text[] IS NULL OR p.scope = ANY(%s::text[]))
                GROUP BY m.rid""", [list(refs), workspace, workspace, scopes, scopes])
        return dict(rows)

    def entity_pages(self, workspace: str, ref: str, scopes: list[str] | None, max_chars: int) -> list[tuple]:
        rows = self._q(
            f"""SELECT DISTINCT p.page_id, p.url, p.title, p.body_text
                FROM entities e JOIN page_entities pe ON pe.entity_id = e.entity_id
                     JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = %s
                                     AND (%s::text[] IS NULL OR p.scope = ANY(%s::text[]))
                WHERE e.workspace_id = %s AND (e.entity_id = %s OR {_lower('e.canonical')} = lower(%s)
                      OR {_alias_hit('e.aliases')})
                ORDER BY p.page_id""", [workspace, scopes, scopes, workspace, ref, ref, ref])
        return cut_bodies(rows, max_chars)

    @staticmethod
    def _scoped(scopes: list[str] | None) -> tuple[str, list]:
        return ("", []) if scopes is None else (" AND scope = ANY(%s::text[])", [list(scopes)])

    def pages_with_url(self, workspace: str, url_norm: str, scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        return [r[0] for r in self._q(
            f"SELECT page_id FROM pages WHERE workspace_id = %s AND url_norm = %s{sql} ORDER BY page_id",
            [workspace, url_norm, *params])]

    def pages_seen_between(self, workspace: str, since: datetime, until: datetime,
                           scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        return [r[0] for r in self._q(
            f"""SELECT page_id FROM pages WHERE workspace_id = %s AND last_seen >= %s AND first_seen <= %s{sql}
                ORDER BY page_id""", [workspace, since, until, *params])]

    def pages_of_domain(self, workspace: str, domain: str, limit: int, subdomains: bool = False,
                        scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        tail = "." + domain
        return [r[0] for r in self._q(
            f"""SELECT page_id FROM pages WHERE workspace_id = %s
                AND (domain = %s OR (%s AND right(domain, %s) = %s)){sql}
                ORDER BY last_seen DESC, page_id LIMIT %s""",
            [workspace, domain, subdomains, len(tail), tail, *params, limit])]

    def pages_under_prefix(self, workspace: str, prefix: str, limit: int, scopes: list[str] | None = None) -> list[str]:
        p = prefix.lower().rstrip("/")
        sql, params = self._scoped(scopes)
        low = _lower("url_norm")
        return [r[0] for r in self._q(
            f"""SELECT page_id FROM pages WHERE workspace_id = %s AND ({low} = %s
                   OR starts_with({low}, %s || '/') OR starts_with({low}, %s || '?')){sql}
                ORDER BY last_seen DESC, page_id LIMIT %s""", [workspace, p, p, p, *params, limit])]

    def page_entity_sets(self, workspace: str) -> dict[str, set[str]]:
        rows = self._q("""SELECT pe.page_id, array_agg(pe.entity_id) FROM page_entities pe JOIN pages p USING (page_id)
                          WHERE p.workspace_id = %s GROUP BY 1""", [workspace])
        return {pid: set(ents) for pid, ents in rows}

    def next_cluster_id(self) -> int:
        return int(self._one("SELECT coalesce(max(cluster_id), 0) + 1 FROM clusters")[0])

    def clusters(self, workspace: str, include_tombstoned: bool = False, scopes: list[str] | None = None) -> list[dict]:
        tomb = "" if include_tombstoned else "AND c.tombstoned_at IS NULL"
        if scopes is None:
            cols, rows = self._named(
                f"""SELECT cluster_id, model, size, created_at, tombstoned_at FROM clusters c WHERE workspace_id = %s
                    {tomb} ORDER BY cluster_id""", [workspace])
        else:
            cols, rows = self._named(
                f"""SELECT c.cluster_id, c.model, CAST(count(*) AS INTEGER) AS size, c.created_at, c.tombstoned_at
                    FROM clusters c JOIN pages p ON p.cluster_id = c.cluster_id AND p.workspace_id = c.workspace_id
                    WHERE c.workspace_id = %s AND p.scope = ANY(%s::text[]) {tomb}
                    GROUP BY 1, 2, 4, 5 ORDER BY c.cluster_id""", [workspace, list(scopes)])
        return [dict(zip(cols, r)) for r in rows]

    def entity(self, entity_id: str) -> dict | None:
        row = self._one(
            """SELECT e.entity_id, e.workspace_id, e.canonical, e.aliases, e.scope,
                      (SELECT count(*) FROM page_entities pe JOIN pages p USING (page_id)
                       WHERE pe.entity_id = e.entity_id AND p.workspace_id = e.workspace_id
                         AND p.scope IS NOT DISTINCT FROM e.scope)
               FROM entities e WHERE entity_id = %s""", [entity_id])
        return entity_answer(row)
