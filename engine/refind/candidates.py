"""What a page search carries between its stages: the filters as each arm takes them (`Restriction`),
the arms' hit lists (`ArmResults`), and the fused, rolled-up candidate set (`Candidates`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from indexes.hot import HotView
from indexes.sparse import SparseFilter

from engine.refind.fusion import Fused, fuse
from engine.refind.rollup import Rolled
from engine.refind.schema import Params


@dataclass
class Restriction:
    """What the filters leave: a tantivy filter and, for FAISS, the allowed chunk ids (None = all)."""
    sparse: SparseFilter
    dense_ids: np.ndarray | None
    page_ids: set[str] | None


@dataclass
class ArmResults:
    dense: list[tuple[int, float]] = field(default_factory=list)
    sparse: list[tuple[int, float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Candidates:
    """What candidate generation leaves: the fused chunks best first (their ids and scores, and each
    one's page as its row in `view`; -1 for a chunk the view does not hold) rolled up to pages, both
    arms' lists (for trace and explain) and the depth the arms were run at. `fused` (each chunk's
    ranks and arm scores), `ranked` and `chunk_page` are made when explain, the reranker or the log
    ask for them."""
    ids: np.ndarray
    scores: np.ndarray
    rows: np.ndarray
    rolled: Rolled              # ... rolled up to pages (the request's rollup)
    dense: list[tuple[int, float]]
    sparse: list[tuple[int, float]]
    depth: Params
    view: HotView
    fusion: tuple = ()          # fuse()'s arguments after the arms' lists
    _fused: list[Fused] | None = None
    _chunk_page: dict[int, str] | None = None

    @property
    def fused(self) -> list[Fused]:
        if self._fused is None:
            self._fused = fuse(*self.fusion)
        return self._fused

    @property
    def ranked(self) -> list[tuple[int, float]]:
        """The fused chunks best first as (chunk id, score)."""
        return list(zip(self.ids.tolist(), self.scores.tolist()))

    @property
    def chunk_page(self) -> dict[int, str]:
        """chunk id -> page id, for the fused chunks the view holds."""
        if self._chunk_page is None:
            held = self.rows >= 0
            self._chunk_page = dict(zip(self.ids[held].tolist(), self.view.page_ids_of(self.rows[held])))
        return self._chunk_page
