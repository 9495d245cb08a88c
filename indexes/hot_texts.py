"""Where the hot view keeps the chunks' texts it does not hold in memory (indexes/hot.py): an unlinked
file of the data dir, written straight from a full read's Arrow buffers (`_Spill`) and appended to by
the views brought forward from it (`_append_texts`), read with os.pread.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

import numpy as np


class TextFile:
    """The chunks' texts and section paths (JSON) a view does not hold in memory, in an unlinked file
    of the data dir: written by a full read, appended to by the views brought forward from it (only
    appended, so an older view still reads what it was made with), read with os.pread — the OS's
    page cache keeps the parts read often in memory, outside the process. It goes with the last view
    using it, and with the process: nothing is left in the data dir."""

    def __init__(self, folder: Path | str):
        fd, path = tempfile.mkstemp(prefix=".hot-texts-", dir=folder)
        os.unlink(path)
        self.fd = fd
        self.size = 0
        self._lock = threading.Lock()

    def append(self, data) -> int:
        """Write `data` at the end; its offset."""
        view = memoryview(data).cast("B")
        with self._lock:
            at = self.size
            done = 0
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], at + done)
            self.size += len(view)
            return at

    def read(self, at: int, n: int) -> bytes:
        return os.pread(self.fd, n, at)

    def __del__(self):
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)


class _Spill:
    """Receives a full read's texts (CorpusStore.hot_read's `spill`): each Arrow batch's string
    buffers go to the text file as they are, with each chunk's offsets and lengths kept."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.file: TextFile | None = None
        self.ids: list[np.ndarray] = []
        self.at: list[np.ndarray] = []

    def __call__(self, batch) -> None:
        if self.file is None:
            self.file = TextFile(self.folder)
        cols = []
        for j in (1, 2):
            arr = batch.column(j)
            kind = np.int64 if str(arr.type).startswith("large") else np.int32
            offsets = np.frombuffer(arr.buffers()[1], dtype=kind)[arr.offset: arr.offset + len(arr) + 1]
            offsets = offsets.astype(np.int64)
            data = arr.buffers()[2]
            first, last = int(offsets[0]), int(offsets[-1])
            at = self.file.append(memoryview(data)[first:last]) if data is not None and last > first else self.file.size
            cols += [at + offsets[:-1] - first, np.diff(offsets)]
        self.ids.append(batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64))
        self.at.append(np.stack(cols, axis=1))

    def positions(self, chunk_ids: np.ndarray) -> np.ndarray:
        """(len(chunk_ids), 4) int64: text offset, length, section offset, length of each chunk id."""
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, dtype=np.int64)
        at = np.concatenate(self.at) if self.at else np.zeros((0, 4), dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        where = np.searchsorted(ids[order], chunk_ids)
        return at[order][where] if len(chunk_ids) else np.zeros((0, 4), dtype=np.int64)


def _append_texts(file: TextFile, texts, sections) -> np.ndarray:
    """Chunks' texts and section paths appended to `file` in one write: their (n, 4) positions."""
    parts, sizes = [], []
    for text, sec in zip(texts, sections):
        t = (text or "").encode()
        s = json.dumps(list(sec)).encode() if sec is not None else b""
        parts += [t, s]
        sizes += [len(t), len(s)]
    at = file.append(b"".join(parts))
    n = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    starts = at + np.concatenate([[0], np.cumsum(n.ravel())[:-1]]).reshape(-1, 2) if len(n) else n
    return np.stack([starts[:, 0], n[:, 0], starts[:, 1], n[:, 1]], axis=1) if len(n) else \
        np.zeros((0, 4), dtype=np.int64)
