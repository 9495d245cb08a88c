"""Training pairs for the cross-encoder reranker, from what a deployment honestly has:

- **judgments** of a test collection (ingested as a workspace, as `refindery eval` does): each
  judged-relevant document's passage is a positive for its query;
- **mined** pairs from a workspace's own corpus: a heading (or the page title) and the passage it
  heads; a sentence and the passage it was cut from, with the sentence removed (for short or
  unpunctuated passages, a span of words and the rest);
- **feedback** from the query log: pages marked `found` or `click` for a logged query are positives,
  pages marked `irrelevant` are negatives.

Negatives: *hard* ones from the engine's own hybrid search (top pages for the query that are not
positives, rerank off) and *random* in-corpus passages. Every pair carries its query group (for a
validation split by query) and its source, so a model card can say what it learned from.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from models.reranker_train import Pair

from engine.refind.search import SearchRequest, SearchService

# A sentence ends at . ! or ? before white space and a word (either case: some collections are
# lower-cased); abbreviations cut a little too often, which mining tolerates.
_SENT = re.compile(r"(?<=[.!?])\s+(?=[\w\"'(])")
_WORD = re.compile(r"\w+")


@dataclass
class NegativePlan:
    hard: int = 2  # hard negatives per positive
    random: int = 1  # random in-corpus negatives per positive
    search_depth: int = 20  # pages of hybrid search the hard negatives are drawn from


class PassageIndex:
    """A workspace's passages (chunks) in memory: page -> chunks, for positives and random negatives."""

    def __init__(self, store, workspace: str):
        rows = store.workspace_chunks(workspace)
        self.by_page: dict[str, list[dict]] = {}
        self.url_page: dict[str, str] = {}
        self.title: dict[str, str | None] = {}
        self.text: dict[int, str] = {}
        for page_id, url, title, cid, ordinal, text, section in rows:
            self.by_page.setdefault(page_id, []).append(
                {"chunk_id": cid, "ordinal": ordinal, "text": text, "section_path": list(section or [])})
            self.url_page[url] = page_id
            self.title[page_id] = title
            self.text[cid] = text
        self.pages = sorted(self.by_page)

    def __len__(self) -> int:
        return len(self.pages)

    def best_chunk(self, page_id: str, query: str) -> str:
        """The page's passage that shares most words with the query (the first on ties)."""
        chunks = self.by_page[page_id]
        if len(chunks) == 1:
            return chunks[0]["text"]
        q = Counter(w.lower() for w in _WORD.findall(query))
        def overlap(ch):
            return sum(min(n, q[w]) for w, n in Counter(x.lower() for x in _WORD.findall(ch["text"])).items() if w in q)
        return max(chunks, key=lambda ch: (overlap(ch), -ch["ordinal"]))["text"]

    def random_passage(self, rng: random.Random, exclude: set[str]) -> str | None:
        for _ in range(20):
            pid = self.pages[rng.randrange(len(self.pages))]
            if pid not in exclude:
                chunks = self.by_page[pid]
                return chunks[rng.randrange(len(chunks))]["text"]
        return None


def _hard_negatives(service: SearchService, index: PassageIndex, workspace: str, query: str,
                    exclude: set[str], plan: NegativePlan) -> list[str]:
    req = SearchRequest(query=query[:2000], k=plan.search_depth, workspace=workspace, pin=False, rerank=False,
                        shortcuts=False,
                        dense_weight=1.0, sparse_weight=1.0)
    out = []
    for hit in service.search(req, log=False).pages:
        if hit.page_id in exclude or hit.page_id not in index.by_page:
            continue
        cid = hit.snippets[0].chunk_id if hit.snippets else None
        out.append(index.text.get(cid) or index.best_chunk(hit.page_id, query))
    return out


def _with_negatives(group: str, query: str, positives: list[tuple[str, str]], exclude: set[str],
                    service: SearchService, index: PassageIndex, workspace: str, plan: NegativePlan,
                    rng: random.Random) -> list[Pair]:
    """Pairs for one query: its positives (passage, source), then hard and random negatives."""
    pairs = [Pair(query, text, 1.0, group, source) for text, source in positives]
    hard = _hard_negatives(service, index, workspace, query, exclude, plan) if plan.hard else []
    n_hard = min(len(hard), plan.hard * len(positives))
    # The top of the list is the hardest; sample among the top 2x so one query does not always give the same.
    pool = hard[: max(n_hard * 2, n_hard)]
    pairs += [Pair(query, t, 0.0, group, "hard") for t in rng.sample(pool, n_hard)] if n_hard else []
    for _ in range(plan.random * len(positives)):
        t = index.random_passage(rng, exclude)
        if t is not None:
            pairs.append(Pair(query, t, 0.0, group, "random"))
    return pairs


def judgment_pairs(service: SearchService, store, coll, workspace: str, plan: NegativePlan | None = None,
                   max_positives: int = 4, seed: int = 13) -> list[Pair]:
    """Pairs from a collection's relevance judgments; `coll` (eval.collections.Collection) must be
    ingested into `workspace` with the URLs `refindery eval` gives its documents."""
    plan = plan or NegativePlan()
    rng = random.Random(seed)
    index = PassageIndex(store, workspace)
    prefix = f"https://ir.example/{coll.name}/"
    relevant: dict[str, list[str]] = {}
    for q in coll.qrels:
        if q.relevance > 0:
            relevant.setdefault(q.query_id, []).append(q.doc_id)
    pairs: list[Pair] = []
    for qid in sorted(relevant):
        query = coll.queries.get(qid)
        if not query:
            continue
        pages = [index.url_page[prefix + d] for d in sorted(set(relevant[qid])) if prefix + d in index.url_page]
        if not pages:
            continue
        chosen = rng.sample(pages, min(max_positives, len(pages)))
        positives = [(index.best_chunk(p, query), "judgments") for p in chosen]
        pairs += _with_negatives(f"{coll.name}:{qid}", query, positives, set(pages), service, index, workspace,
                                 plan, rng)
    return pairs


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if s.strip()]


def mined_pairs(service: SearchService, store, workspace: str, n: int = 400, plan: NegativePlan | None = None,
                seed: int = 13) -> list[Pair]:
    """Up to `n` queries mined from the workspace's passages, half heading/title -> passage, half
    sentence -> the passage without that sentence (whichever a passage offers)."""
    plan = plan or NegativePlan()
    rng = random.Random(seed)
    index = PassageIndex(store, workspace)
    chunks = [(pid, ch) for pid in index.pages for ch in index.by_page[pid]]
    rng.shuffle(chunks)
    pairs: list[Pair] = []
    made = 0
    for i, (pid, ch) in enumerate(chunks):
        if made >= n:
            break
        text = ch["text"]
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")).strip()
        heading = ch["section_path"][-1] if ch["section_path"] else (index.title[pid] if ch["ordinal"] == 0 else None)
        query, passage, source = None, None, None
        if i % 2 == 0 and heading and len(_WORD.findall(heading)) >= 2 and len(_WORD.findall(body)) >= 20:
            query, passage, source = heading.lstrip("# ").strip(), body, "mined-heading"
        else:
            sents = _sentences(body)
            fit = [j for j, s in enumerate(sents) if 6 <= len(_WORD.findall(s)) <= 40]
            if len(sents) >= 3 and fit:
                j = rng.choice(fit)
                rest = " ".join(sents[:j] + sents[j + 1:])
                if len(_WORD.findall(rest)) >= 20:
                    query, passage, source = sents[j], rest, "mined-sentence"
            elif len(sents) < 3:
                # Too few sentences (short or unpunctuated text): cut a span of words instead.
                words = body.split()
                if len(words) >= 24:
                    n_span = max(5, min(12, len(words) // 4))
                    j = rng.randrange(0, len(words) - n_span + 1)
                    query = " ".join(words[j:j + n_span])
                    passage, source = " ".join(words[:j] + words[j + n_span:]), "mined-span"
        if query is None:
            continue
        pairs += _with_negatives(f"{workspace}:mined:{ch['chunk_id']}", query, [(passage, source)], {pid}, service,
                                 index, workspace, plan, rng)
        made += 1
    return pairs


def feedback_pairs(service: SearchService, store, querylog, workspace: str, plan: NegativePlan | None = None,
                   seed: int = 13) -> list[Pair]:
    """Pairs from the query log: `found` / `click` feedback makes the page a positive for the logged
    query, `irrelevant` makes it a negative; hard and random negatives are added as elsewhere."""
    plan = plan or NegativePlan()
    rng = random.Random(seed)
    index = PassageIndex(store, workspace)
    rows = querylog.tables.feedback_with_queries(workspace)
    by_query: dict[tuple[str, str], dict[str, set[str]]] = {}
    for qid, query, page_id, kind in rows:
        if page_id in index.by_page:
            by_query.setdefault((qid, query), {"pos": set(), "neg": set()})[
                "neg" if kind == "irrelevant" else "pos"].add(page_id)
    pairs: list[Pair] = []
    for (qid, query), sets in by_query.items():
        pos = sorted(sets["pos"] - sets["neg"])
        if not pos:
            continue
        group = f"{workspace}:feedback:{qid}"
        pairs += _with_negatives(group, query, [(index.best_chunk(p, query), "feedback") for p in pos],
                                 set(pos), service, index, workspace, plan, rng)
        pairs += [Pair(query, index.best_chunk(p, query), 0.0, group, "feedback-irrelevant")
                  for p in sorted(sets["neg"])]
    return pairs


def describe(pairs: list[Pair]) -> dict:
    """Counts by source and label, for the model card."""
    c = Counter(p.source for p in pairs)
    return {"pairs": len(pairs), "queries": len({p.group for p in pairs}),
            "positives": sum(1 for p in pairs if p.label > 0.5), "by_source": dict(sorted(c.items()))}
