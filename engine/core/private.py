"""A data dir only its owner can read: the folder 0700 and everything in it 0600 (folders 0700),
whatever the umask, since it holds every workspace's pages, the query log and the API keys' table.

Opening a data dir (`make_private`) tightens the process's umask to at least 077, so whatever the
engine and its libraries write there from now on (DuckDB and its WAL, tantivy's segments, FAISS
files, evidence packets, the socket's folder) is created private: files are written from several
threads and from Rust and C code, which a chmod after each write could not all reach. A data dir
made by an older release (0755, files 0644) is swept once: its folder was open to others.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


def tighten_umask() -> None:
    """The process's umask, with the group's and others' bits added (never loosened). The first
    call sets 077 for a moment, so no file is created looser in between."""
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)


def make_private(data_dir: Path | str) -> Path:
    """Create `data_dir` (and missing parents of it) 0700, or make an existing one 0700 — sweeping
    what is inside when it was open to others. Returns the path."""
    tighten_umask()
    path = Path(data_dir)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
        sweep(path)
    return path


def sweep(folder: Path) -> int:
    """Take the group's and others' bits off everything under `folder` (symbolic links are left
    alone: what they point to is not the data dir's); how many entries changed."""
    changed = 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode) or not stat.S_IMODE(st.st_mode) & 0o077:
                continue
            try:
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o077)
                changed += 1
            except OSError:
                pass
    return changed
