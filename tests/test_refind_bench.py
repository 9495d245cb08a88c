"""The known-item refind test's harness (eval/refind.py): a seeded history, and each query's page
worked out from it (its run is `make eval`)."""
from __future__ import annotations

from engine.core.urls import normalize_url
from eval import refind


def test_the_history_is_seeded_and_every_query_means_a_page_in_it():
    a, b = refind.history(), refind.history()
    assert a == b and len(a) > 400
    assert [r["seen_at"] for r in a] == sorted(r["seen_at"] for r in a)
    assert all(refind.START.strftime("%Y") <= r["seen_at"][:4] <= "2026" for r in a)
    seen = refind._last_seen(a)
    cases = refind.targets(a)
    assert len(cases) == len(refind.QUERIES) and {k for k, _, _ in cases} == set(refind.KINDS)
    assert all(t in seen for _, _, t in cases)
    for (kind, query, meant), (_, _, target) in zip(refind.QUERIES, cases):
        if kind == "recent":       # the most recently seen of the page's versions, which are word for word the same
            copies = [normalize_url(meant)] + [normalize_url(refind._version(meant, v)) for v in refind.VERSIONED[meant]]
            assert target in copies and seen[target] == max(seen[c] for c in copies)
        elif kind == "site":       # the most recently seen page under the domain or prefix
            under = [u for u in seen if u.startswith(meant.rstrip("/") + "/") or u.split("/", 1)[0].endswith(meant)]
            assert target in under and seen[target] == max(seen[u] for u in under)
        else:
            assert target == normalize_url(meant)
    # the versioned copies say exactly what their original says
    pages = {r["url"]: r for r in a}
    for url, versions in refind.VERSIONED.items():
        for v in versions:
            copy = pages[refind._version(url, v)]
            assert copy["body_text"] == pages[url]["body_text"] and copy["title"] == pages[url]["title"]
