"""refindery.client against a real server: typed replies, every covered route, typed errors with the
server's detail.type, auth with a key, retries only where they belong, paging, sync and async."""
from __future__ import annotations

import asyncio
import importlib.util
from importlib import metadata

import httpx
import pytest

from refindery.client import (AsyncClient, Client, Forbidden, Invalid, NotFound, RateLimited, Unauthorized,
                              Unavailable)
from refindery.client.errors import from_response
from refindery.client.models import CompareResponse, EvidenceResponse, PageHit, SearchResponse, UpsertResponse

QUERY = "how do I pretty-print JSON"


def test_the_client_alone_installs_no_engine_part():
    """This suite's venv holds the client and its extras only: no torch, FAISS, tantivy, DuckDB or ONNX."""
    assert metadata.distribution("refindery-client").version
    for heavy in ("torch", "faiss", "tantivy", "duckdb", "onnxruntime", "sentence_transformers", "transformers"):
        assert importlib.util.find_spec(heavy) is None, heavy
    requires = " ".join(metadata.requires("refindery-client") or [])
    assert "torch" not in requires and "faiss" not in requires


def test_search_is_typed_with_explain_and_filters(server):
    with server.client() as rf:
        resp = rf.search(QUERY, k=3, explain=True)
        assert isinstance(resp, SearchResponse) and 1 <= len(resp.pages) <= 3 and resp.total >= len(resp.pages)
        hit = resp.pages[0]
        assert isinstance(hit, PageHit) and hit.rank == 1 and hit.snippets and hit.explain is not None
        assert hit.explain.chunks[0].rrf["total"] > 0 and hit.last_seen.tzinfo is not None
        domain = hit.domain
        narrowed = rf.search(QUERY, k=5, filters={"domain": [domain]})
        assert narrowed.pages and {p.domain for p in narrowed.pages} == {domain}


def test_paging_walks_one_ranking(server):
    with server.client() as rf:
        whole = [h.page_id for h in rf.search(QUERY, k=12).pages]
        paged = [h.page_id for h in rf.iter_pages(QUERY, page_size=5, limit=12)]
        assert paged == whole and len(set(paged)) == len(paged) == 12
        everything = list(rf.iter_pages(QUERY, page_size=7))
        assert len(everything) == rf.search(QUERY, k=1).total


def test_pages_upsert_get_similar_feedback_delete(server):
    with server.client() as rf:
        up = rf.upsert_pages([{"url": "https://client.example/a", "title": "Client page",
                               "body_text": "A page written by the Python client about JSON pretty printing."},
                              {"url": "ftp://client.example/x", "body_text": "x"}])
        assert isinstance(up, UpsertResponse) and up.errors is True
        ok, bad = up.items
        assert ok.status == "created" and ok.page_id and bad.status == "error" and bad.error
        page = rf.get_page(ok.page_id)
        assert page.url == "https://client.example/a" and page.title == "Client page"
        exported = {p["url"]: p for p in rf.export_pages()}   # streamed, one page at a time
        assert exported["https://client.example/a"]["body_text"].startswith("A page written by the Python client")
        assert rf.similar(ok.page_id, k=3).pages
        resp = rf.search("JSON pretty printing written by the Python client", k=5)
        assert ok.page_id in [h.page_id for h in resp.pages]
        assert rf.feedback(resp.query_id, ok.page_id, "found")
        chosen = rf.choices()["choices"]
        assert [(c["query_id"], c["page_id"]) for c in chosen] == [(resp.query_id, ok.page_id)]
        again = rf.search("JSON pretty printing written by the Python client", k=5)
        assert again.pages[0].page_id == ok.page_id and again.pages[0].shortcut.query_id == resp.query_id
        assert rf.clear_feedback(query_id=resp.query_id)["deleted"] == 1 and rf.choices()["choices"] == []
        assert rf.feedback(resp.query_id, ok.page_id, "found")
        assert rf.delete_page(ok.page_id)["deleted"] is True
        assert rf.choices()["choices"] == []
        with pytest.raises(NotFound) as err:
            rf.get_page(ok.page_id)
        assert err.value.status == 404 and err.value.type == "page_not_found"


def test_forget_by_domain_takes_its_subdomains_and_nothing_else(server):
    with server.client() as rf:
        up = rf.upsert_pages([
            {"url": "https://forget.example/a", "body_text": "Notes on the quorvantine ledger kept by the client."},
            {"url": "https://docs.forget.example/b", "body_text": "More quorvantine ledger notes, on a subdomain."},
            {"url": "https://notforget.example/c", "body_text": "A quorvantine page on a domain that only ends alike."}])
        ids = [i.page_id for i in up.items]
        out = rf.forget(domain="forget.example")
        assert out["forgotten"] == 2 and sorted(out["page_ids"]) == sorted(ids[:2])
        assert [h.page_id for h in rf.search("quorvantine ledger", k=10).pages if h.page_id in ids] == [ids[2]]
        assert rf.forget(domain="forget.example")["forgotten"] == 0
        with pytest.raises(Invalid):
            rf.forget()


def test_compare_relations_evidence_and_status(server):
    with server.client() as rf:
        cmp = rf.compare(QUERY, ["all-minilm-l6-v2", "all-minilm-l6-v2-int8"], k=5)
        assert isinstance(cmp, CompareResponse) and len(cmp.runs) == 2 and cmp.agreement[0].k == 5
        roster = next(w for w in rf.relation_workspaces()["workspaces"] if w["workspace_id"] == "roster")
        seniority = next(s for r in roster["relations"] if r["relation"] == "held_role"
                         for s in r["slots"] if s["slot"] == "seniority")
        assert "gte" in seniority["operators"] and "VP" in seniority["order"]
        c = [{"relation": "held_role", "slot": "seniority", "op": "gte", "value": "VP"}]
        full = rf.relation_search("roster", constraints=c)
        compact = rf.relation_search("roster", constraints=c, detail="compact")
        assert full.counts["matched"] >= 1
        assert compact.model_dump() != full.model_dump() and "matched" in str(compact.model_dump())
        ev = rf.evidence("compare Postgres and SQLite transactions", session_id="client", max_rounds=2)
        assert isinstance(ev, EvidenceResponse) and ev.path.endswith("evidence_packet_client.md")
        assert rf.read_packet("client").startswith("---\ntype: evidence_packet")
        assert rf.status()["counts"]["pages"] >= 30 and rf.health()["status"] == "ok"


def test_errors_are_typed_and_carry_the_servers_detail(server):
    with server.client() as rf:
        with pytest.raises(Invalid) as err:
            rf.search(QUERY, k=0)                      # the server's bound, the server's 422
        assert err.value.status == 422 and err.value.type == "validation_error"
        assert "k: Input should be greater than or equal to 1" in str(err.value)   # which field, and what
        with pytest.raises(Invalid) as err:
            rf.search(QUERY, colour="red")             # a name the server does not take: refused before sending
        assert err.value.type == "validation_error" and "colour: Extra inputs are not permitted" in str(err.value)
        with pytest.raises(Invalid) as err:
            rf.search("")
        assert "query: String should have at least 1 character" in str(err.value)
        with pytest.raises(NotFound) as err:
            rf.read_packet("nobody")
        assert err.value.type == "packet_not_found"
    with server.client(api_key=None) as anonymous:
        with pytest.raises(Unauthorized) as err:
            anonymous.search(QUERY)
        assert err.value.status == 401 and not isinstance(err.value, Forbidden)
    with server.client(api_key=server.read_only) as reader:
        assert reader.search(QUERY, k=1).pages                 # a read-only key reads ...
        with pytest.raises(Forbidden) as err:                  # ... and may not write
            reader.upsert_pages([{"url": "https://client.example/b", "body_text": "b"}])
        assert err.value.status == 403


def _counting(server, **kw):
    sent = []
    client = server.client(**kw)
    client._http.event_hooks["request"].append(lambda request: sent.append(request.url.path))
    return client, sent


def test_retries_only_on_503_429_and_connection_errors(server, tmp_path):
    client, sent = _counting(server, max_retries=2, backoff=0.01)
    with client:
        with pytest.raises(Unavailable) as err:          # no reranker configured: 503, tried three times
            client.search(QUERY, rerank=True)
        assert err.value.type == "reranker_unavailable" and len(sent) == 3
        sent.clear()
        with pytest.raises(NotFound):                    # a 4xx is never retried
            client.get_page("pg_nothing")
        with pytest.raises(Invalid):
            client.search(QUERY, k=0)
        assert len(sent) == 2
    nowhere, sent = _counting(server, max_retries=2, backoff=0.01)
    nowhere._http._transport = httpx.HTTPTransport(uds=str(tmp_path / "no.sock"))
    with nowhere, pytest.raises(httpx.ConnectError):
        nowhere.status()
    assert len(sent) == 3


def test_rate_limited_reads_retry_after():
    err = from_response(429, {"detail": {"type": "rate_limited", "title": "slow down", "retry_after": 7}}, {})
    assert isinstance(err, RateLimited) and err.retry_after == 7.0
    err = from_response(429, {"detail": {"type": "rate_limited", "title": "x"}}, {"retry-after": "3"})
    assert err.retry_after == 3.0
    err = from_response(502, "<html>bad gateway</html>", {})
    assert err.status == 502 and err.type == "http_error" and "bad gateway" in err.title


def test_async_client(server):
    async def run():
        async with server.aclient() as rf:
            resp = await rf.search(QUERY, k=4)
            paged = [h.page_id async for h in rf.iter_pages(QUERY, page_size=3, limit=4)]
            with pytest.raises(NotFound):
                await rf.get_page("pg_nothing")
            assert len([p async for p in rf.export_pages()]) >= len(resp.pages)
            assert [p async for p in rf.export_pages(workspace="no-such-workspace-here")] == []
            return resp, paged
    resp, paged = asyncio.run(run())
    assert [h.page_id for h in resp.pages] == paged


def test_async_and_sync_clients_share_every_operation():
    ops = {n for n in dir(Client) if not n.startswith("_")}
    assert ops == {n for n in dir(AsyncClient) if not n.startswith("_")} - {"aclose"} | {"close"}
