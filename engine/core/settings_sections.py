"""The settings' sections, one model per [table] of configs/default.toml (engine/core/settings.py layers
them into one Settings). A field marked REQUEST is also a request field of the verb that reads the
section (`request_fields`): the setting is the default a request may override."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, Field, field_validator


class ModelsSettings(BaseModel):
    registry: str = "models.toml"
    active: str = "all-minilm-l6-v2"
    also_embed: list[str] = Field(default_factory=list)
    device: str = "auto"
    batch_size: int = Field(16, ge=1)
    cpu_threads: int = Field(0, ge=0, le=1024, description=(
        "torch intra-op threads for the process (0: torch's default, one per core). With queries on ONNX Runtime "
        "(whose threads stop spinning after each query) 1 serves about as many concurrent searches as the default "
        "on 2 cores and encodes one query ~2x slower; ingest encodes faster with more."))
    query_runtime: Literal["auto", "torch", "onnx"] = Field("auto", description=(
        "how one query is encoded on CPU: auto runs it through an fp32 ONNX export of the model's own weights "
        "(made once into the models cache; ~3x faster for one query, the same vectors) where that reproduces "
        "the model, else torch; onnx requires it; torch never uses it. Documents are always encoded by torch."))
    reranker: str = "refindery-local"
    cache_dir: str = ""
    # The embedder the quality profile (profile = "quality") makes active in place of `active`.
    quality: str = "all-mpnet-base-v2-int8"
    quality_fast: str = Field("all-minilm-l6-v2", description=(
        "the quality profile's write-time embedder: a page is encoded by it (and BM25) before its write is "
        "acknowledged, and `quality` catches up in a server's background; search ranks by `quality` what it "
        "covers and by this what it does not yet. Empty: `quality` encodes every page on the write path."))
    catch_up: bool = Field(True, description=(
        "a server embeds what the active embedder lacks in its background (the quality profile's catch-up, "
        "or a data dir first written under another profile); false leaves it to `refindery models --embed`"))
    catch_up_batch: int = Field(16, ge=1, le=4096, description=(
        "chunks a background embedding (a catch-up) encodes between two looks at the queue: a search waits "
        "for a core behind at most one such batch"))
    catch_up_nice: int = Field(10, ge=0, le=19, description=(
        "the niceness of a background embedding's threads (Linux): searches take the cores first"))
    catch_up_threads: int = Field(0, ge=0, le=1024, description=(
        "threads of a background embedding's own ONNX Runtime session (0: one per core; 1: its one thread)"))


class ChunkingSettings(BaseModel):
    max_tokens: int = Field(256, ge=16)
    overlap_tokens: int = Field(32, ge=0)


class IngestSettings(BaseModel):
    batch_chunks: int = Field(512, ge=1)
    progress: bool = True
    # What one page may carry: characters of its body_text or html, and entities. A page over either is
    # that item's error (the batch's other pages land); a document load caps a file at 2 MB likewise.
    max_page_chars: int = Field(2_000_000, ge=1_000, le=100_000_000)
    max_page_entities: int = Field(256, ge=0, le=1000)
    # Batch embedding on Ray (`refindery ingest --ray [ADDRESS]`; pip install 'refindery[ray]'):
    # on by default with `ray = true`; an empty address starts a local Ray for the ingest.
    ray: bool = False
    ray_address: str = ""
    ray_actors: int = Field(2, ge=1, le=1024)
    ray_batch_size: int = Field(64, ge=1, le=65_536)
    ray_cpus_per_actor: float = Field(1.0, gt=0, le=64)
    ray_local_cpus: int = Field(2, ge=1, le=1024)
    # chunks per ingest batch under Ray (each batch is one Ray Data job: larger batches keep the
    # actors' model loads a small share)
    ray_batch_chunks: int = Field(4096, ge=1)


class ImportSettings(BaseModel):
    """[imports]: how `refindery import` fetches the pages a history or bookmarks point to — politely:
    one request at a time per host, `host_interval_s` apart; text/html and text/plain only; redirects
    followed within `max_redirects`; a read stopped at `max_bytes`; never a private, loopback or
    link-local address unless `allow_private`; never a cookie (none is sent, none kept)."""
    workers: int = Field(4, ge=1, le=64, description="hosts fetched at once (one request at a time per host)")
    host_interval_s: float = Field(1.0, ge=0, le=3600, description="seconds between two requests to one host")
    connect_timeout_s: float = Field(5.0, gt=0, le=300)
    read_timeout_s: float = Field(10.0, gt=0, le=300)
    total_timeout_s: float = Field(30.0, gt=0, le=3600, description="one fetch, redirects and body included")
    max_bytes: int = Field(5_000_000, ge=1024, le=1_000_000_000, description="a page's body, read at most")
    max_redirects: int = Field(5, ge=0, le=30)
    host_failures: int = Field(2, ge=1, le=1000, description=(
        "failures to connect (or time-outs) after which a host's other URLs are not tried this run"))
    allow_private: bool = Field(False, description=(
        "fetch from private, loopback and link-local addresses too (an intranet's pages); off, such a "
        "URL fails with its reason: an imported URL cannot make the server reach inside its network"))
    user_agent: str = Field("Refindery-import/0.1 (refetching a person's own history)", max_length=300)
    write_batch: int = Field(16, ge=1, le=1000, description="fetched pages written together")


class IndexSettings(BaseModel):
    dense_kind: Literal["auto", "flat", "hnsw"] = "auto"
    # "auto": HNSW from this many vectors of a model up, flat below 80% of it (between the two, the
    # kind already on disk stays, so a corpus near the line does not flip at every start).
    hnsw_above: int = Field(100_000, ge=1)
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_construction: int = Field(200, ge=8)
    hnsw_ef_search: int = Field(128, ge=8)
    sparse_writer_heap: int = Field(128_000_000, ge=15_000_000)
    # OpenMP threads FAISS may use for one query's dense search, set on the search's own arm threads
    # (0: FAISS's default, every core). One query is one thread's work: on 2 cores a flat search of
    # 10k vectors takes 0.3 ms on one thread, 0.6 ms on two, ~3 ms beside the query encoder's threads.
    search_threads: int = Field(1, ge=0)
    # "embedded": tantivy + FAISS in this process; "milvus": both arms in a Milvus server ([milvus])
    backend: Literal["embedded", "milvus"] = "embedded"


class MilvusSettings(BaseModel):
    """[milvus]: where the arms live when index.backend = "milvus" (a cluster, or a local Milvus)."""
    uri: str = Field("http://127.0.0.1:19530", min_length=1)
    token: str = ""                      # "user:password" or an API key; empty: none
    # Collections are <prefix>_sparse and <prefix>_dense_<model>; empty: "rf_" + a hash of the data
    # dir, so two data dirs on one server never share collections.
    collection_prefix: str = Field("", pattern=r"^[A-Za-z0-9_]*$", max_length=120)
    # The dense index: HNSW for a cluster; a local Milvus builds only FLAT, IVF_FLAT and AUTOINDEX.
    index_type: str = "AUTOINDEX"
    index_params: dict[str, Any] = Field(default_factory=dict)
    search_params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = Field(30.0, gt=0)


REQUEST = {"request": True}   # a [search] setting a request may override (SearchRequest derives from these)


class SearchSettings(BaseModel):
    """[search]: every parameter of the page search, declared once. Those marked REQUEST are also
    request parameters: `SearchRequest` takes each as an optional override with the same bounds and
    description (engine/refind/search.py), and `Params` is these settings with the request's values."""
    k: int = Field(10, ge=1, le=200, description="Pages to return.", json_schema_extra=REQUEST)
    offset: int = Field(0, ge=0, le=10_000, description="Pages to skip; applied last.", json_schema_extra=REQUEST)
    dense_top_n: int = Field(100, ge=1, le=5000, description="Chunks the dense arm returns (deepened while too few "
                                                             "pages).", json_schema_extra=REQUEST)
    sparse_top_n: int = Field(100, ge=1, le=5000, description="Chunks the BM25 arm returns (deepened while too few "
                                                              "pages).", json_schema_extra=REQUEST)
    min_candidate_pages: int = Field(50, ge=1)
    max_top_n: int = Field(1600, ge=1)
    fusion: Literal["rrf", "linear"] = Field(
        "rrf", description='How the arms combine: "rrf" sums weight / (rrf_k + rank); "linear" sums weight x '
                           'the arm\'s score after `normalizer`.', json_schema_extra=REQUEST)
    normalizer: Literal["minmax", "zscore", "l2", "dbsf"] = Field(
        "minmax", description="fusion linear: how each arm's candidate scores are put on one scale.",
        json_schema_extra=REQUEST)
    rrf_k: float = Field(60, ge=0, le=10_000, description="Reciprocal-rank fusion constant: weight / (rrf_k + rank).",
                         json_schema_extra=REQUEST)
    dense_weight: float = Field(1.0, ge=0, le=100, description="0 turns the dense arm off.", json_schema_extra=REQUEST)
    sparse_weight: float = Field(1.0, ge=0, le=100, description="0 turns the sparse arm off.",
                                 json_schema_extra=REQUEST)
    bm25_k3: float = Field(8.0, ge=0, le=10_000, description="BM25 query-term saturation: a word the query says n "
                           "times weighs (k3+1)·n/(k3+n); 0 counts it once.", json_schema_extra=REQUEST)
    rollup: Literal["max", "sum", "mean_top2"] = Field("max", description="How a page scores from its chunks.",
                                                       json_schema_extra=REQUEST)
    focus: float = Field(0.2, ge=0, le=10, description="How much of a page is about the query (issue 73): each page's "
                         "rolled-up value times the share of its chunks among the candidates to this power "
                         "(focus_form share), so a page that lists everything and matches by one passage of many "
                         "falls below a page about the query throughout. 0 is off.", json_schema_extra=REQUEST)
    focus_form: Literal["share", "length"] = Field(
        "share", description='focus: "share" min(1, (matched chunks + focus_slack) / chunks) ** focus, or "length" '
                             "chunks ** -focus (engine/refind/focus.py).", json_schema_extra=REQUEST)
    focus_slack: float = Field(2.0, ge=0, le=1000, description="focus_form share: chunks added to a page's matched "
                               "ones before the share is taken (a page of at most matched + slack chunks keeps its "
                               "value).", json_schema_extra=REQUEST)
    focus_results_page: float = Field(0.5, ge=0, le=1, description="focus on: a search engine's results page "
                                      "(a search path with a query parameter) has its value multiplied by this too, "
                                      "so it does not outrank the page it led to. 1 leaves it as any page.",
                                      json_schema_extra=REQUEST)
    recency_half_life_days: float = Field(0.0, ge=0, le=100_000, description="Recency on last_seen (seed 001: off "
                                          "by default; 30 turns it on): the half-life, in days, of a page's recency "
                                          "factor; 0 is off.", json_schema_extra=REQUEST)
    recency_mode: Literal["band", "decay"] = Field(
        "band", description='"band": pages about as relevant as the best page left (within recency_band of it on '
                            'the arms\' scale) are ordered among themselves by when they were seen, most recent '
                            'first; "decay": each page\'s score times 1 - recency_weight * (1 - 0.5 ** (age / '
                            'half-life)).', json_schema_extra=REQUEST)
    recency_band: float = Field(0.07, ge=0, le=1, description='recency_mode band: how far below the best page left '
                                "a page may match and still count as about as relevant, on the arms' scale: the mean "
                                "over the arms (by weight) of the page's best chunk's score over the arm's best score "
                                "(0 to 1).", json_schema_extra=REQUEST)
    recency_title_band: float = Field(0.0, ge=0, le=1, description='recency_mode band: title siblings. When the '
                                      "best page left's title carries at least half the query's terms, the pages "
                                      "whose titles carry all of those and whose level is within this of its level "
                                      "join its band (0 is off).", json_schema_extra=REQUEST)
    recency_visits_days: float = Field(0.0, ge=0, le=3650, description='recency_mode band: how you visited, '
                                       "among near-equals. Within a band a page is ordered as if last seen this many "
                                       "days later for each doubling of its visit count (log2; one visit: none). "
                                       "0 is off.", json_schema_extra=REQUEST)
    recency_bookmark_days: float = Field(0.0, ge=0, le=3650, description='recency_mode band: a bookmarked page '
                                         "(linked to the entity `bookmarked`: refindery import bookmarks) is ordered "
                                         "in its band as if last seen this many days later. 0 is off.",
                                         json_schema_extra=REQUEST)
    recency_weight: float = Field(0.05, ge=0, le=1, description="recency_mode decay: the part of a page's score "
                                  "recency may take away: factor = 1 - w * (1 - 0.5 ** (age / half-life)); 1 is a "
                                  "full exponential decay.", json_schema_extra=REQUEST)
    rerank: bool = Field(False, description="Rerank the top chunks with the cross-encoder.", json_schema_extra=REQUEST)
    rerank_n: int = Field(50, ge=1, le=1000, description="Chunks the cross-encoder reranks.", json_schema_extra=REQUEST)
    rerank_fusion: Literal["replace", "rrf"] = Field(
        "rrf", description='"rrf" (default: measured best, docs/reranker.md): the reranker is one more arm over '
                           'the reranked chunks in the request\'s fusion (rerank_weight / (rrf_k + rank), or '
                           'rerank_weight x its normalised score with fusion linear); "replace": its score alone '
                           'ranks them (lost 0.11-0.32 nDCG@10 on every development collection).',
        json_schema_extra=REQUEST)
    rerank_weight: float = Field(1.0, ge=0, le=100, description='Weight of the reranker arm when rerank_fusion is '
                                                                '"rrf".', json_schema_extra=REQUEST)
    pin: bool = Field(True, description="Pin a page whose URL is the query, or a bare domain's pages.",
                      json_schema_extra=REQUEST)
    pin_domain_max: int = Field(50, ge=1)
    shortcuts: bool = Field(True, description="The page chosen last time first: a page marked found or click "
                            "(feedback) for a logged search of this workspace whose query is close to this one, by "
                            "words or meaning, comes first when it is among this search's candidates "
                            "(engine/refind/shortcuts.py).", json_schema_extra=REQUEST)
    shortcut_min_similarity: float = Field(0.9, ge=0, le=1, description="Shortcuts by meaning: the least cosine "
                                           "between this query's vector and a chosen query's (the search's "
                                           "embedder).", json_schema_extra=REQUEST)
    shortcut_min_overlap: float = Field(1.0, ge=0, le=1, description="Shortcuts by words: the least share of "
                                        "terms (stemmed, no stop words) this query and a chosen query have in "
                                        "common, of the terms of either (Jaccard).", json_schema_extra=REQUEST)
    shortcut_scope: Literal["key", "workspace"] = Field("key", description=(
        "Whom a choice serves: \"key\", the searches of the API key that made it (no key: the open server's "
        "and the owner's own calls, together); \"workspace\", every key's searches in the choice's workspace "
        "(within their scopes)."))
    shortcut_max_choices: int = Field(200, ge=0, description=(
        "The most choices one key keeps serving, newest first: an older one beyond stops counting."))
    shortcut_max_age_days: float = Field(365.0, ge=0, description=(
        "A choice older than this stops counting (0: never ages)."))
    filter_pushdown_cap: int = Field(100_000, ge=1)
    suggestions: bool = Field(False, description="Add pages similar to the top result (by page vector) to "
                                                 "the reply, as `suggestions`.", json_schema_extra=REQUEST)
    query_cache_size: int = Field(256, ge=0)
    snippets_per_page: int = Field(2, ge=1)
    snippet_texts_mb: float = Field(256, ge=0, description=(
        "Chunk texts (the snippets' source) held in the search's in-memory view while all of them take at "
        "most this many MB: a search then reads nothing of the store. Above it they are kept in a file of "
        "the view's (unlinked, in the data dir; read through the OS's page cache); at 0 the k returned "
        "pages' snippets are read from the store, one query a search."))
    highlight: bool = Field(True, description="Snippet `highlights` (offsets of the words matching a query term).",
                            json_schema_extra=REQUEST)


def request_fields(settings_model: type[BaseModel]) -> dict[str, tuple]:
    """The REQUEST-marked fields of a settings model as optional request fields (default None: the
    setting applies), with the setting's bounds and description: for pydantic.create_model."""
    out = {}
    for name, f in settings_model.model_fields.items():
        if (f.json_schema_extra or {}).get("request"):
            kind = Optional[f.annotation]
            out[name] = (Annotated[kind, *f.metadata] if f.metadata else kind, Field(None, description=f.description))
    return out


class CompilerSettings(BaseModel):
    base_url: str = ""
    model: str = ""
    api_key: str = ""
    uds: str = ""
    timeout_s: float = Field(60.0, gt=0)
    max_tokens: int = Field(2000, ge=64)
    # [input, output] USD per million tokens, for `spent.cost_usd` of criteria read by the model
    # (empty: not priced)
    price_usd_per_mtok: list[Annotated[float, Field(ge=0)]] = Field(default_factory=list)

    @field_validator("price_usd_per_mtok")
    @classmethod
    def _two_prices(cls, v: list[float]) -> list[float]:
        if v and len(v) != 2:
            raise ValueError("price_usd_per_mtok is [input, output] USD per million tokens, or [] (not priced)")
        return v


class CriteriaSettings(BaseModel):
    stated_min: float = Field(0.70, ge=-1, le=1)
    plausible_min: float = Field(0.50, ge=-1, le=1)
    passages: int = Field(4, ge=1, le=50)
    reads_per_call: int = Field(50, ge=1, le=10_000)
    # With a model ([compiler]): how long a call waits for its reads before it returns (the reads
    # still running finish behind it), how many run at once, and how much of a candidate's
    # documents one read sends.
    model_wait_s: float = Field(30.0, gt=0, le=600)
    model_parallel: int = Field(4, ge=1, le=64)
    model_chars: int = Field(20_000, ge=500, le=500_000)


class EvidenceSettings(BaseModel):
    max_rounds: int = Field(5, ge=1, le=20)
    round_k: int = Field(10, ge=1, le=50)
    line_budget: int = Field(1000, ge=1)
    min_high_sources: int = Field(2, ge=1, le=50)
    maps_consulted: int = Field(2, ge=0, le=20)
    distinct_max: float = Field(0.6, ge=-1, le=1)
    split_chars: int = Field(20_000, ge=1000)
    excerpt_chars: int = Field(1500, ge=100)
    line_width: int = Field(100, ge=20)
    reports_dir: str = ""
    dictionary_dir: str = ""
    packs: list[str] = Field(default_factory=lambda: ["workspace"])
    folder_depth: int = Field(2, ge=1, le=20)
    map_note_min_cosine: float = Field(0.7, ge=-1, le=1)
    map_note_pages: int = Field(20, ge=1, le=1000)
    vocabulary_neighbours: int = Field(2, ge=0, le=10)
    vocabulary_round: Literal["no_source", "always"] = "no_source"
    vocabulary_min_cosine: float = Field(0.6, ge=-1, le=1)
    vocabulary_size: int = Field(5000, ge=10, le=100_000)
    vocabulary_sample_chunks: int = Field(20_000, ge=10, le=1_000_000)


class LogSettings(BaseModel):
    enabled: bool = True
    queue_size: int = Field(10_000, ge=1)
    batch_size: int = Field(200, ge=1)
    flush_interval_s: float = Field(1.0, gt=0)
    # an execution's rows committed before its reply, not queued: none lost when a process is killed.
    # "auto" (the default): so with the store in PostgreSQL (replicas), queued with the DuckDB store
    durable: bool | Literal["auto"] = "auto"


class ServerSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    max_body_bytes: int = Field(16_000_000, ge=1024)
    rate_limit_per_minute: int = Field(600, ge=0)
    rate_limit_burst: int = Field(60, ge=1)
    # where `POST /v1/backup` writes a backup it is given a name for; empty: the data dir's `backups`
    backup_dir: str = ""
    # count requests and stage times for GET /metrics (off: neither counted nor served)
    metrics: bool = True
    # GET /metrics (Prometheus): "" serves it on the API's address to a key that may administer;
    # "HOST:PORT" on a listener of its own as well, open to whoever reaches it (bind it to loopback)
    metrics_listen: str = Field("", pattern=r"^(|[^\s:]+:\d{1,5})$")
    # one line per request in the server's log: "text", or "json" (one object a line)
    log_format: Literal["text", "json"] = "text"
    gc_freeze: bool = Field(True, description=(
        "Once the server has started (store view read, model loaded), move every object it holds into "
        "Python's permanent GC generation, so the collector stops re-scanning them during requests."))


class StoreSettings(BaseModel):
    """[store]: where the corpus store lives. Empty `url`: the DuckDB file in the data dir (the default).
    `url = "postgresql://…"`: the corpus, API keys, the query log and evidence map notes in that
    PostgreSQL database (the `postgres` extra), shared by any number of replicas, each with a data dir
    of its own for its indexes — and, for now, its own relation tables (docs/scaling.md)."""
    url: str = Field("", pattern=r"^(|postgres(ql)?://.*)$", max_length=2000)
    pool_size: int = Field(8, ge=1, le=256)        # connections for reads, per process
    connect_timeout_s: float = Field(10.0, gt=0)
    # how long a request sent with Refindery-Min-Generation waits for this replica to apply that
    # generation before a 503 not_caught_up
    catch_up_wait_s: float = Field(5.0, ge=0, le=60)
    # how many such requests may wait at once on one replica, and for one key: past either, a 503
    # not_caught_up at once (a wait holds no worker, but each holds a connection and a timer)
    catch_up_max_waiters: int = Field(32, ge=0, le=10_000)
    catch_up_max_waiters_per_key: int = Field(4, ge=0, le=10_000)


class RelationsSettings(BaseModel):
    source_dirs: list[str] = Field(default_factory=list)
    verdict_cache_mb: float = Field(256, ge=0, description=(
        "Memory for enumeration results kept per workspace version: each relation's per-entity verdicts "
        "under a search's constraints, and each plan's statuses, reused by the next search that names the "
        "same constraints until the workspace's next load or correction (0: off)."))
    columns_mb: float = Field(512, ge=0, description=(
        "Memory for each relation's current rows of a workspace held as columns (entity numbers, "
        "dictionary-coded slots) until the workspace's next load or correction: a search judges them "
        "in NumPy instead of SQL. Read on a thread of its own when a search first needs it after a write "
        "(that search, and any before the read ends, are judged in SQL); a relation over the budget is "
        "judged in SQL (0: off)."))


# The user config file for the settings being built; set by load_settings().
_user_config: Path | None = None
