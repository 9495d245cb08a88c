"""A data dir only its owner can read: the folder 0700 and everything in it 0600 (folders 0700),
whatever the umask, since it holds every workspace's pages, the query log and the API keys' table.

Opening a data dir (`make_private`) tightens the process's umask to at least 077, so whatever the
engine and its libraries write there from now on (DuckDB and its WAL, tantivy's segments, FAISS
files, evidence packets, the socket's folder) is created private: files are written from several
threads and from Rust and C code, which a chmod after each write could not all reach. A data dir
made by an older release (0755, files 0644) is swept once: its folder was open to others.

Another user of the machine must not be able to steer this process through the data dir: a data
dir (and each entry at its top) owned by anyone but this process's user or root is refused
(`UntrustedDataDir`) before anything is read, written or chmodded there; so is a data dir that is a
symbolic link, unless the link and what it points to are both owned that way — and then the folder it
points to is what is made private, never through the link. Files the engine opens there by name go
through `open_private` (O_NOFOLLOW).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


class UntrustedDataDir(PermissionError):
    """The data dir, or an entry in it, belongs to another user (or is a link another user made)."""


def trusted_uids() -> set[int]:
    """Whose files a data dir may hold: this process's user's and root's."""
    return {os.geteuid(), 0}


def _owner_check(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid not in trusted_uids():
        raise UntrustedDataDir(f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}) "
                               "or root: refusing to use it as a data dir (another user could read or steer "
                               "what is written there); choose a data dir of your own")


def check_data_dir(data_dir: Path | str) -> Path:
    """The folder `data_dir` names once it is known to be this user's (or root's): the path itself,
    or — a symbolic link whose link and target are both so owned — its target, resolved. A path that
    does not exist yet is returned as it is (it will be made by this user). Each entry at the top of
    the folder is checked too (lstat: a link planted there is refused, whatever it points to)."""
    path = Path(data_dir)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(st.st_mode):
        _owner_check(path, st, "the symbolic link")
        path = Path(os.path.realpath(path))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return path
        _owner_check(path, st, "the folder the data dir links to,")
    else:
        _owner_check(path, st, "the data dir")
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedDataDir(f"the data dir {path} is not a folder")
    with os.scandir(path) as entries:
        for entry in entries:
            _owner_check(Path(entry.path), entry.stat(follow_symlinks=False), "the data dir's entry")
    return path


def open_private(path: Path | str, flags: int, mode: int = 0o600) -> int:
    """os.open with O_NOFOLLOW (a link at `path` is an OSError, never followed) and close-on-exec; a
    file found there must be this user's or root's (UntrustedDataDir)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        _owner_check(Path(path), os.fstat(fd), "the file")
    except UntrustedDataDir:
        os.close(fd)
        raise
    return fd


def write_private(path: Path | str, text: str) -> None:
    """Write `text` to `path` (created 0600, truncated), never through a symbolic link."""
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def tighten_umask() -> None:
    """The process's umask, with the group's and others' bits added (never loosened). The first
    call sets 077 for a moment, so no file is created looser in between."""
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)


def make_private(data_dir: Path | str) -> Path:
    """Create `data_dir` (and missing parents of it) 0700, or make an existing one 0700 — sweeping
    what is inside when it was open to others. Another user's data dir is refused first
    (check_data_dir). Returns the path given."""
    tighten_umask()
    path = Path(data_dir)
    real = check_data_dir(path)
    real.mkdir(mode=0o700, parents=True, exist_ok=True)
    real = check_data_dir(path)   # (made now, or made by someone else in between: checked again)
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _owner_check(real, st, "the data dir")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)   # the folder opened, not a name that could be swapped for a link
            sweep(real)
    finally:
        os.close(fd)
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
