"""Progress a person can follow on a terminal and in a log file alike.

On a terminal: a tqdm bar. Anywhere else (output sent to a file, `make demo > demo.log`): one plain
line at most every `every` seconds — what, how many of how many, the rate, the time left — and a
last line with the totals, so a log shows the work moving instead of minutes of silence.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


class Progress:
    def __init__(self, what: str, total: int | None = None, unit: str = "pages", every: float = 5.0,
                 stream: TextIO | None = None, enabled: bool = True, lines: bool = False):
        """`lines`: plain lines on a terminal too (a server's log, where a bar would tangle with the
        other lines)."""
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0
        self.extra: dict[str, int] = {}
        self.t0 = self._last = time.monotonic()
        self._bar = None
        if enabled and not lines and self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit=unit.rstrip("s") or unit, desc=what, file=self.stream)

    def update(self, n: int, **extra: int) -> None:
        """`n` more units done; `extra` counts carried along (chunks embedded, ...)."""
        self.done += n
        for k, v in extra.items():
            self.extra[k] = self.extra.get(k, 0) + v
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._line(now)

    def _line(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self.t0, 1e-9)
        rate = self.done / elapsed
        of = f"/{self.total}" if self.total else ""
        parts = [f"{self.what}: {self.done}{of} {self.unit}"]
        parts += [f"{v} {k}" for k, v in self.extra.items()]
        if final:
            parts.append(f"in {_seconds(elapsed)} ({rate:.1f} {self.unit}/s)")
        else:
            parts.append(f"{rate:.1f} {self.unit}/s")
            if self.total and rate > 0 and self.done < self.total:
                parts.append(f"about {_seconds((self.total - self.done) / rate)} left")
        print(", ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
            return
        self._line(time.monotonic(), final=True)
