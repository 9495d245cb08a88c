"""Agreement between two rankings at k: Jaccard@k, rank-biased overlap, Kendall's tau-b.

RBO is Webber, Moffat & Zobel (2010), "A similarity measure for indefinite rankings". We report
the extrapolated RBO_EXT (their eq. 32, with its extension to lists of uneven length): it assumes
the agreement seen at the depth of the lists continues below it, which makes it a point estimate
between the bounds RBO_MIN and RBO_MAX. p (default 0.9) is the persistence: the top d ranks carry
a weight of 1 - p^d (~ 0.65 of the weight in the top 10 at p = 0.9).
"""
from __future__ import annotations

from typing import Sequence


def jaccard_at_k(a: Sequence, b: Sequence, k: int) -> float:
    sa, sb = set(a[:k]), set(b[:k])
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def rbo_ext(a: Sequence, b: Sequence, p: float = 0.9) -> float:
    """Extrapolated rank-biased overlap of two rankings without ties (items unique per list)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    S, L = (a, b) if len(a) <= len(b) else (b, a)
    s, l = len(S), len(L)
    seen_s, seen_l = set(), set()
    overlap = 0
    x = [0] * (l + 1)  # x[d] = |S[:d] & L[:d]|
    for d in range(1, l + 1):
        if d <= s:
            item_s = S[d - 1]
            item_l = L[d - 1]
            if item_s == item_l:
                overlap += 1
            else:
                overlap += (item_s in seen_l) + (item_l in seen_s)
            seen_s.add(item_s)
            seen_l.add(item_l)
        else:
            item_l = L[d - 1]
            overlap += item_l in seen_s
            seen_l.add(item_l)
        x[d] = overlap
    x_s, x_l = x[s], x[l]
    total = sum(x[d] / d * p ** d for d in range(1, l + 1))
    total += sum(x_s * (d - s) / (s * d) * p ** d for d in range(s + 1, l + 1))
    return (1 - p) / p * total + ((x_l - x_s) / l + x_s / s) * p ** l


def kendall_tau_b(a: Sequence, b: Sequence) -> tuple[float | None, int]:
    """Kendall's tau-b over the items both rankings share, and how many they share (None when
    fewer than two are shared, where tau is undefined)."""
    shared = [x for x in a if x in set(b)]
    if len(shared) < 2:
        return None, len(shared)
    from scipy.stats import kendalltau   # here: scipy.stats takes most of a second to import, and only compare uses it

    pos_b = {x: i for i, x in enumerate(b)}
    tau = kendalltau([a.index(x) for x in shared], [pos_b[x] for x in shared], variant="b").statistic
    return float(tau), len(shared)


def agreement(a: Sequence, b: Sequence, k: int, p: float = 0.9) -> dict:
    a, b = list(a[:k]), list(b[:k])
    tau, shared = kendall_tau_b(a, b)
    return {"k": k, "jaccard": jaccard_at_k(a, b, k), "rbo_ext": rbo_ext(a, b, p), "rbo_p": p,
            "kendall_tau_b": tau, "shared": shared}
