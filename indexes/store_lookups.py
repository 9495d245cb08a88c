"""What the DuckDB corpus store looks up for filters, pins, entities and clusters (indexes/store.py
is the store; store_reads.py its other reads): the page sets a search's filters and pins name, the
facets, entity references and the clusters, each on the calling thread's cursor."""
from __future__ import annotations

from datetime import datetime

from .store_rows import cut_bodies, entity_answer, facets_answer, page_filter


class DuckLookups:
    """Filters, pins, entities and clusters. Uses the store's `cursor()`."""

    def resolve_entities(self, workspace: str, ref: str, scopes: list[str] | None = None) -> list[str]:
        """The entity ids a reference names: its id, else every entity whose canonical form is it, else
        every one with it as an alias (case-insensitive) — one per namespace (document scope) that
        has it. With `scopes`, only entities of those scopes (to a scoped key, another scope's
        entity does not exist)."""
        in_scope = "" if scopes is None else "AND scope IN (SELECT unnest(?::VARCHAR[]))"
        rows = self.cursor().execute(
            f"""SELECT entity_id, CASE WHEN entity_id = ? THEN 0 WHEN lower(canonical) = lower(?) THEN 1 ELSE 2 END
                FROM entities WHERE workspace_id = ? AND (
                   entity_id = ? OR lower(canonical) = lower(?)
                   OR list_contains(list_transform(coalesce(aliases, []), lambda a: lower(a)), lower(?)))
                {in_scope} ORDER BY 2, 1""",
            [ref, ref, workspace, ref, ref, ref] + ([] if scopes is None else [list(scopes)])).fetchall()
        return [eid for eid, rank in rows if rank == rows[0][1]] if rows else []

    def filtered_pages(self, workspace: str, domains=(), after=None, before=None, cluster_ids=(),
                       entity_ids=(), scopes=None, page_ids=None) -> list[str]:
        """Page ids of a workspace that pass every given restriction (`page_ids`: among these; [] none)."""
        where, params = page_filter(workspace, domains, after, before, cluster_ids, entity_ids, scopes, page_ids)
        rows = self.cursor().execute(f"SELECT p.page_id FROM pages p WHERE {where} ORDER BY 1", params).fetchall()
        return [r[0] for r in rows]

    def facets(self, workspace: str, scopes=None, limit: int = 50) -> dict:
        """What a workspace's pages can be filtered by, with page counts: domains, live clusters
        (with up to three titles of their most recently seen pages), entities, the last_seen range."""
        where, params = "p.workspace_id = ?", [workspace]
        if scopes is not None:
            where += " AND p.scope IN (SELECT unnest(?::VARCHAR[]))"
            params.append(list(scopes))
        cur = self.cursor()
        n, lo, hi = cur.execute(f"SELECT count(*), min(last_seen), max(last_seen) FROM pages p WHERE {where}",
                                params).fetchone()
        domains = cur.execute(
            f"""SELECT p.domain, count(*) AS n FROM pages p WHERE {where} AND p.domain IS NOT NULL
                GROUP BY 1 ORDER BY n DESC, 1 LIMIT ?""", [*params, limit]).fetchall()
        clusters = cur.execute(
            f"""SELECT p.cluster_id, count(*) AS n,
                       list(p.title ORDER BY p.last_seen DESC, p.page_id)
                           FILTER (WHERE p.title IS NOT NULL AND p.title <> '')[1:3]
                FROM pages p JOIN clusters c ON c.cluster_id = p.cluster_id AND c.tombstoned_at IS NULL
                WHERE {where} GROUP BY 1 ORDER BY n DESC, 1 LIMIT ?""", [*params, limit]).fetchall()
        entities = cur.execute(
            f"""SELECT e.entity_id, e.canonical, count(DISTINCT p.page_id) AS n
                FROM pages p JOIN page_entities pe ON pe.page_id = p.page_id
                JOIN entities e ON e.entity_id = pe.entity_id
                WHERE {where} GROUP BY 1, 2 ORDER BY n DESC, 2, 1 LIMIT ?""", [*params, limit]).fetchall()
        return facets_answer(n, lo, hi, domains, clusters, entities)

    def entity_document_keys(self, workspace: str, refs: list[str], scopes: list[str] | None) -> dict[str, str]:
        """Per entity reference (id, canonical form or alias) with pages, an md5 over its pages' ids and
        content hashes (within `scopes` when given): a changed or added document changes it."""
        if not refs:
            return {}
        rows = self.cursor().execute(
            """WITH c AS (SELECT unnest(?) AS rid),
                    m AS (SELECT DISTINCT c.rid, e.entity_id AS sid FROM c JOIN entities e ON e.workspace_id = ?
                          AND (e.entity_id = c.rid OR lower(e.canonical) = lower(c.rid)
                               OR list_contains(list_transform(coalesce(e.aliases, []), lambda a: lower(a)),
                                                lower(c.rid))))
               SELECT m.rid, md5(string_agg(DISTINCT p.page_id || ':' || p.content_hash, ',' ORDER BY
                                 p.page_id || ':' || p.content_hash))
               FROM m JOIN page_entities pe ON pe.entity_id = m.sid
                      JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = ?
                                      AND (? IS NULL OR list_contains(?, p.scope))
               GROUP BY m.rid""", [refs, workspace, workspace, scopes, scopes]).fetchall()
        return dict(rows)

    def entity_pages(self, workspace: str, ref: str, scopes: list[str] | None, max_chars: int) -> list[tuple]:
        """An entity's own pages (matched as entity_document_keys matches a reference), as
        (page_id, url, title, body_text) by page id, within `scopes` when given, the bodies cut
        so that together they hold at most `max_chars` characters."""
        rows = self.cursor().execute(
            """SELECT DISTINCT p.page_id, p.url, p.title, p.body_text
               FROM entities e JOIN page_entities pe ON pe.entity_id = e.entity_id
                    JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = ?
                                    AND (? IS NULL OR list_contains(?, p.scope))
               WHERE e.workspace_id = ? AND (e.entity_id = ? OR lower(e.canonical) = lower(?)
                     OR list_contains(list_transform(coalesce(e.aliases, []), lambda a: lower(a)), lower(?)))
               ORDER BY p.page_id""", [workspace, scopes, scopes, workspace, ref, ref, ref]).fetchall()
        return cut_bodies(rows, max_chars)

    @staticmethod
    def _scoped(scopes: list[str] | None) -> tuple[str, list]:
        return ("", []) if scopes is None else (" AND scope IN (SELECT unnest(?::VARCHAR[]))", [list(scopes)])

    def pages_with_url(self, workspace: str, url_norm: str, scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"SELECT page_id FROM pages WHERE workspace_id = ? AND url_norm = ?{sql} ORDER BY page_id",
            [workspace, url_norm, *params]).fetchall()]

    def pages_seen_between(self, workspace: str, since: datetime, until: datetime,
                           scopes: list[str] | None = None) -> list[str]:
        """Pages with a visit between `since` and `until` as far as the page's first and last visit say
        (its span meets the range), by page id."""
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"""SELECT page_id FROM pages WHERE workspace_id = ? AND last_seen >= ? AND first_seen <= ?{sql}
               ORDER BY page_id""", [workspace, since, until, *params]).fetchall()]

    def pages_of_domain(self, workspace: str, domain: str, limit: int, subdomains: bool = False,
                        scopes: list[str] | None = None) -> list[str]:
        """A domain's pages (and its subdomains' with `subdomains`), most recently seen first (ties by page id)."""
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"""SELECT page_id FROM pages WHERE workspace_id = ? AND (domain = ? OR (? AND ends_with(domain, ?))){sql}
               ORDER BY last_seen DESC, page_id LIMIT ?""",
            [workspace, domain, subdomains, "." + domain, *params, limit]).fetchall()]

    def pages_under_prefix(self, workspace: str, prefix: str, limit: int, scopes: list[str] | None = None) -> list[str]:
        """Pages whose normalised URL is `prefix` or lies under it at a path-segment boundary (a
        following "/", "?" or nothing), compared without case; most recently seen first."""
        p = prefix.lower().rstrip("/")
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"""SELECT page_id FROM pages WHERE workspace_id = ? AND (lower(url_norm) = ?
                   OR starts_with(lower(url_norm), ? || '/') OR starts_with(lower(url_norm), ? || '?')){sql}
               ORDER BY last_seen DESC, page_id LIMIT ?""", [workspace, p, p, p, *params, limit]).fetchall()]

    def page_entity_sets(self, workspace: str) -> dict[str, set[str]]:
        rows = self.cursor().execute(
            """SELECT pe.page_id, list(pe.entity_id) FROM page_entities pe JOIN pages p USING (page_id)
               WHERE p.workspace_id = ? GROUP BY 1""", [workspace]).fetchall()
        return {pid: set(ents) for pid, ents in rows}

    def next_cluster_id(self) -> int:
        return int(self.cursor().execute("SELECT coalesce(max(cluster_id), 0) + 1 FROM clusters").fetchone()[0])

    def clusters(self, workspace: str, include_tombstoned: bool = False, scopes: list[str] | None = None) -> list[dict]:
        """A workspace's clusters. With `scopes`, each size counts only the pages of those document
        scopes, and a cluster with none of them is left out (its size would tell of other pages)."""
        tomb = "" if include_tombstoned else "AND c.tombstoned_at IS NULL"
        if scopes is None:
            res = self.cursor().execute(
                f"""SELECT cluster_id, model, size, created_at, tombstoned_at FROM clusters c WHERE workspace_id = ?
                    {tomb} ORDER BY cluster_id""", [workspace])
        else:
            res = self.cursor().execute(
                f"""SELECT c.cluster_id, c.model, CAST(count(*) AS INTEGER) AS size, c.created_at, c.tombstoned_at
                    FROM clusters c JOIN pages p ON p.cluster_id = c.cluster_id AND p.workspace_id = c.workspace_id
                    WHERE c.workspace_id = ? AND p.scope IN (SELECT unnest(?::VARCHAR[])) {tomb}
                    GROUP BY ALL ORDER BY c.cluster_id""", [workspace, list(scopes)])
        cols = [d[0] for d in res.description]
        return [dict(zip(cols, r)) for r in res.fetchall()]

    def entity(self, entity_id: str) -> dict | None:
        """An entity with the number of pages linked to it (all of its own workspace and scope)."""
        row = self.cursor().execute(
            """SELECT e.entity_id, e.workspace_id, e.canonical, e.aliases, e.scope,
                      (SELECT count(*) FROM page_entities pe JOIN pages p USING (page_id)
                       WHERE pe.entity_id = e.entity_id AND p.workspace_id = e.workspace_id
                         AND p.scope IS NOT DISTINCT FROM e.scope)
               FROM entities e WHERE entity_id = ?""", [entity_id]).fetchone()
        return entity_answer(row)
