"""A search's clocks: milliseconds per stage (`StageTimer`, the reply's `timings_ms`) and the arms'
recent times (`ArmClock`, which decides when the BM25 arm starts)."""
from __future__ import annotations

import contextlib
import time


class StageTimer:
    """Milliseconds per named stage (a stage entered twice adds up), and the total since it was made."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.ms: dict[str, float] = {}

    def add(self, stage: str, ms: float) -> None:
        self.ms[stage] = self.ms.get(stage, 0.0) + ms

    @contextlib.contextmanager
    def __call__(self, stage: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, (time.perf_counter() - t) * 1000)

    def stop(self, stage: str = "total") -> None:
        self.ms[stage] = (time.perf_counter() - self.t0) * 1000

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.ms.items()}



class ArmClock:
    """Recent times of the two arms (exponential moving averages, ms): whether the BM25 arm is
    expected to end within FAISS's time, so that it can start after the query's encoding."""

    def __init__(self, alpha: float = 0.1):
        self.alpha = alpha
        self._sparse: float | None = None
        self._dense: float | None = None

    def _mix(self, old: float | None, ms: float) -> float:
        return ms if old is None else old + self.alpha * (ms - old)

    def sparse(self, ms: float) -> None:
        self._sparse = self._mix(self._sparse, ms)

    def dense(self, ms: float) -> None:
        self._dense = self._mix(self._dense, ms)

    def sparse_fits_beside_dense(self) -> bool:
        return self._sparse is not None and self._dense is not None and self._sparse <= self._dense
