"""Backups of a data dir, taken while it serves, checked, and restored into a new one.

A backup is a folder:

    manifest.json          written last: what the backup holds, each file's size and SHA-256
    tables/<table>.*       every table of the store, read in one snapshot (indexes/backup_tables.py):
                           pages, chunks, vectors, entities, relation tables, keys (hashed, as stored),
                           the query log, imports, the change feed
    files/...              the data dir's other files, copied as they are (relation sources,
                           dictionaries, reports, trained rerankers); not the indexes, caches or sockets
    settings.json          the settings it ran with, secrets blanked (for the record: a restore runs
                           with the settings it is given)

While it is being written the folder holds `BACKUP-IN-PROGRESS`; a backup cut short (a SIGKILL, a
full disk) keeps it, or has no manifest, and `verify` calls it incomplete and `restore` refuses it.

The indexes (tantivy, FAISS, a Milvus collection) are not copied: a restore rebuilds them from the
store, whose vectors it holds — tokenising and adding every chunk, no embedding — which is what
opening a data dir with a lagging index does anyway (engine/core/corpus.py). A copy would have to be
of the same generation as the snapshot, which an index written by another thread cannot promise.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from indexes import backup_tables
from indexes.store import SCHEMA_VERSION

from engine.core.errors import EngineError
from engine.core.private import make_private

FORMAT = "refindery-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
IN_PROGRESS = "BACKUP-IN-PROGRESS"
# the data dir's entries a backup leaves out: the store (its tables are the backup), the indexes and
# caches a restore rebuilds, what belongs to the running process, and the backups folder itself
NOT_COPIED = {"refindery.duckdb", "refindery.duckdb.wal", "relations.duckdb", "relations.duckdb.wal", "dense",
              "sparse", "sparse.json", "models", "server.json", "serve.lock", "refindery.sock", "replica_id",
              "backups"}
SECRET_KEYS = {"token", "api_key", "password"}


class BackupFailed(EngineError):
    status = 422
    type = "backup_failed"


class BackupNoSpace(BackupFailed):
    status = 507


class BackupIncomplete(EngineError):
    status = 422
    type = "backup_incomplete"


class RestoreRefused(EngineError):
    status = 422
    type = "restore_refused"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _entry(folder: Path, rel: str) -> dict:
    p = folder / rel
    return {"file": rel, "bytes": p.stat().st_size, "sha256": _sha256(p)}


def _redacted(v: Any, key: str = "") -> Any:
    if isinstance(v, dict):
        return {k: _redacted(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [_redacted(x) for x in v]
    if key in SECRET_KEYS and v:
        return "(secret: not kept)"
    if key == "url" and isinstance(v, str) and "@" in v and "://" in v:   # a store URL's password
        scheme, rest = v.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return v


def _empty_folder(dest: Path) -> None:
    """`dest` is made (0700), or is an empty folder; anything else is refused before a byte is written."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupFailed(f"{dest} is not an empty folder: a backup goes into a new or empty one")
    make_private(dest)


def take(corpus, dest: Path | str, on_table: Callable[[str, int], None] | None = None) -> dict:
    """Back the corpus's data dir up into `dest` (new or empty) while it goes on serving and writing;
    returns the manifest. `on_table(name, rows)` after each table is written (a progress line). A
    failure (a full disk, an unwritable folder) removes what this backup wrote."""
    dest = Path(dest)
    _empty_folder(dest)
    marker = dest / IN_PROGRESS
    marker.write_text("a backup is being written here; without a manifest.json after it, it is incomplete\n")
    started = datetime.now(timezone.utc)
    try:
        manifest = _write(corpus, dest, started, on_table or (lambda name, rows: None))
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        kind = BackupNoSpace if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else BackupFailed
        raise kind(f"the backup could not be written ({exc.strerror or exc}); nothing of it was kept",
                           errno=exc.errno) from exc
    marker.unlink()
    return manifest


def _write(corpus, dest: Path, started: datetime, on_table: Callable[[str, int], None]) -> dict:
    from engine.core.faults import maybe_crash

    store = corpus.store
    (dest / "tables").mkdir(mode=0o700)
    tables: dict[str, dict] = {}
    with backup_tables.snapshot(store) as snap:
        generation = snap.generation()
        for name in sorted(snap.ddl):
            rel = f"tables/{name}.{'parquet' if snap.kind == 'duckdb' else 'copy'}"
            rows = snap.write(name, dest / rel)
            tables[name] = {**_entry(dest, rel), "rows": rows, "ddl": snap.ddl[name]}
            maybe_crash("backup:table")
            on_table(name, rows)
        indexes = snap.indexes
        pg_schema = getattr(snap, "schema", None)
    files = {}
    for src in _other_files(corpus.data_dir, skip=dest):
        rel = "files/" + src.relative_to(corpus.data_dir).as_posix()
        (dest / rel).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(src, dest / rel)
        files[rel] = _entry(dest, rel)
    (dest / "settings.json").write_text(json.dumps(_redacted(corpus.settings.model_dump(mode="json")), indent=2))
    files["settings.json"] = _entry(dest, "settings.json")
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "store": {"kind": store.kind, "schema_version": SCHEMA_VERSION, "pg_schema": pg_schema},
        "generation": generation, "active_model": corpus.settings.models.active,
        "started_at": started.isoformat(), "finished_at": datetime.now(timezone.utc).isoformat(),
        "counts": {"pages": tables.get("pages", {}).get("rows", 0), "chunks": tables.get("chunks", {}).get("rows", 0),
                   "embeddings": tables.get("embeddings", {}).get("rows", 0), "api_keys": tables.get("api_keys", {}).get("rows", 0),
                   "log_queries": tables.get("log_queries", {}).get("rows", 0)},
        "tables": tables, "indexes": indexes, "files": files,
        "indexes_rebuilt_on_restore": True,
    }
    tmp = dest / (MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, dest / MANIFEST)
    return manifest


def _other_files(data_dir: Path, skip: Path):
    """The data dir's regular files outside NOT_COPIED and outside `skip` (the backup itself, when it is
    written inside the data dir); links are not followed."""
    skip = skip.resolve()
    for top in sorted(data_dir.iterdir()):
        if top.name in NOT_COPIED or top.name.endswith(".tmp") or top.is_symlink():
            continue
        if top.resolve() == skip:
            continue
        if top.is_file():
            yield top
        elif top.is_dir():
            for root, dirs, names in os.walk(top):
                dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
                dirs[:] = [d for d in dirs if Path(root, d).resolve() != skip]
                for n in sorted(names):
                    p = Path(root) / n
                    if p.is_file() and not p.is_symlink():
                        yield p


def verify(src: Path | str) -> dict:
    """Whether the backup at `src` is whole: its manifest there, written to the end, and every file it
    names of the size and SHA-256 it says. {"complete", "problems", and the manifest's summary}."""
    src = Path(src)
    problems: list[str] = []
    manifest = None
    if not src.is_dir():
        problems.append(f"{src} is not a folder")
    else:
        if (src / IN_PROGRESS).exists():
            problems.append(f"{IN_PROGRESS} is still there: the backup was cut short")
        try:
            manifest = json.loads((src / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            problems.append("no manifest.json: the backup was cut short, or this is not a backup")
        except (OSError, ValueError) as exc:
            problems.append(f"manifest.json cannot be read: {exc}")
    if isinstance(manifest, dict) and manifest.get("format") != FORMAT:
        problems.append("manifest.json is not a refindery backup's")
        manifest = None
    elif manifest is not None and not isinstance(manifest, dict):
        problems.append("manifest.json is not a refindery backup's")
        manifest = None
    if manifest is not None:
        entries = [*manifest.get("tables", {}).values(), *manifest.get("files", {}).values()]
        for e in entries:
            p = src / str(e.get("file", ""))
            if not p.resolve().is_relative_to(src.resolve()) or not p.is_file():
                problems.append(f"{e.get('file')} is missing")
            elif p.stat().st_size != e.get("bytes"):
                problems.append(f"{e['file']}: {p.stat().st_size} bytes, the manifest says {e.get('bytes')}")
            elif _sha256(p) != e.get("sha256"):
                problems.append(f"{e['file']}: its SHA-256 is not the manifest's (changed since the backup)")
    out = {"backup": str(src), "complete": not problems, "problems": problems}
    if manifest is not None:
        out |= {k: manifest.get(k) for k in ("generation", "store", "counts", "started_at", "finished_at")}
    return out


def restore(src: Path | str, settings, pool=None) -> dict:
    """A working data dir at `settings.data_dir` (new, or an empty folder) from the backup at `src`: its
    store written in one transaction — a DuckDB file in the data dir, or the empty PostgreSQL database
    `settings.store.url` names — its other files copied, its indexes built from the store. Nothing is
    left at the data dir's path unless all of it was."""
    from engine.core.corpus import STORE_FILE, open_corpus

    src = Path(src)
    check = verify(src)
    if not check["complete"]:
        raise BackupIncomplete("the backup is not whole and is not restored: " + "; ".join(check["problems"]),
                               problems=check["problems"])
    manifest = json.loads((src / MANIFEST).read_text(encoding="utf-8"))
    kind = "postgres" if settings.store.url else "duckdb"
    if manifest["store"]["kind"] != kind:
        raise RestoreRefused(f"the backup is of a {manifest['store']['kind']} store and the settings name a {kind} "
                             f"one: restore it into a {manifest['store']['kind']} store")
    if manifest["store"]["schema_version"] != SCHEMA_VERSION:
        raise RestoreRefused(f"the backup's store schema is {manifest['store']['schema_version']}, this refindery's "
                             f"{SCHEMA_VERSION}: restore it with the release that wrote it, then open it with this one")
    target = Path(settings.data_dir)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreRefused(f"{target} is not an empty folder: a restore makes a new data dir")
    staging = target.parent / f".{target.name}.restoring-{secrets.token_hex(4)}"
    make_private(staging)
    tables = manifest["tables"]
    try:
        for rel in manifest["files"]:
            if rel.startswith("files/"):
                to = staging / rel[len("files/"):]
                to.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                shutil.copyfile(src / rel, to)
        if kind == "duckdb":
            counts = backup_tables.load_duckdb(staging / STORE_FILE, tables, src, manifest["indexes"])
        else:
            counts = backup_tables.load_postgres(settings.store.url, tables, src, manifest["store"]["pg_schema"],
                                                 SCHEMA_VERSION)
        # (each load compared its tables' rows with the manifest's inside its transaction: a short one rolled back)
        if target.exists():
            target.rmdir()
        os.rename(staging, target)
    except backup_tables.RestoreRefused as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise RestoreRefused(str(exc)) from exc
    except backup_tables.RowsDiffer as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise BackupIncomplete(str(exc)) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    corpus = open_corpus(settings, pool)   # builds every index from the store (nothing to replay from)
    try:
        restored = corpus.store.counts()
        generation = corpus.store.generation()
    finally:
        corpus.close()
    return {"data_dir": str(target), "store": kind, "generation": generation, "backup_generation": manifest["generation"],
            "counts": restored, "tables": len(tables), "files": sum(1 for r in manifest["files"] if r.startswith("files/"))}

