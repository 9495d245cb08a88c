"""Reading the SQL sources a relation load names: a DuckDB file, a SQLite file, Parquet or CSV.

A `Source` opens read-only, lists its tables and columns, reads a table's columns as Arrow (every
cell as text, so what was loaded can later be compared byte for byte), and re-reads single cells
by row key for receipts. SQLite is read through Python's sqlite3 (DuckDB's sqlite extension would
have to be downloaded); Parquet and CSV through DuckDB's built-in readers, one file per table:
`<path>/<table>.parquet` when the path is a folder, or the file itself as the one table.
"""
from __future__ import annotations

import secrets
import sqlite3
import threading
from pathlib import Path
from typing import Iterable

import duckdb
import pyarrow as pa

FORMATS = ("duckdb", "sqlite", "parquet", "csv")
ORDINAL = "__ordinal"   # the row key when a load names no key column: the row's position, from 0

# An in-memory DuckDB hosts the sources of one set of folders: a DuckDB file is ATTACHed read-only
# for the life of a Source and DETACHed after (2 ms, against 20 ms for a connection of its own), so
# no export file stays locked between reads. Each host is opened with external access off and only
# its folders allowed, so a view or macro inside an export cannot read a file outside them.
_HOSTS: dict[tuple[str, ...], duckdb.DuckDBPyConnection] = {}
_HOST_LOCK = threading.Lock()


def _host(roots: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    with _HOST_LOCK:
        con = _HOSTS.get(roots)
        if con is None:
            con = duckdb.connect()
            con.execute("SET allowed_directories = ?", [[r.rstrip("/") + "/" for r in roots]])
            con.execute("SET enable_external_access = false")
            _HOSTS[roots] = con
        return con.cursor()


class SourceError(ValueError):
    """A source, table or column that cannot be read as named."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def infer_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".duckdb", ".ddb", ".db") and not _is_sqlite(path):
        return "duckdb"
    if suffix in (".sqlite", ".sqlite3", ".db"):
        return "sqlite"
    if suffix == ".parquet" or (path.is_dir() and any(path.glob("*.parquet"))):
        return "parquet"
    if suffix in (".csv", ".tsv") or (path.is_dir() and any(path.glob("*.csv"))):
        return "csv"
    raise SourceError("source_format_unknown", f"cannot tell the format of {path.name}; name `format`")


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def cell_text(value) -> str | None:
    """A cell as the text a receipt compares: None for NULL or blank, else str() stripped."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


class Source:
    """`roots`: the folders this source may read from (itself and, inside a DuckDB file, any view or
    macro); default: the source's own folder. Messages name the file, never the server's path."""

    def __init__(self, path: str | Path, format: str | None = None, roots: list[Path] | None = None):
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise SourceError("source_not_found", f"no source {self.path.name!r}")
        self.format = format or infer_format(self.path)
        if self.format not in FORMATS:
            raise SourceError("source_format_unknown", f"format must be one of {', '.join(FORMATS)}")
        self._con: duckdb.DuckDBPyConnection | None = None
        self._sqlite: sqlite3.Connection | None = None
        self._alias: str | None = None
        real = self.path.resolve()
        allowed = tuple(sorted(str(Path(r).resolve()) for r in roots)) if roots else \
            (str(real if real.is_dir() else real.parent),)
        try:
            if self.format == "duckdb":
                self._con = _host(allowed)
                alias = f"src_{secrets.token_hex(6)}"
                self._con.execute(f"ATTACH '{str(self.path).replace(chr(39), chr(39) * 2)}' AS {alias} (READ_ONLY)")
                self._alias = alias
            elif self.format == "sqlite":
                self._sqlite = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
                self._sqlite.execute("SELECT 1 FROM sqlite_master LIMIT 1")
            else:
                self._con = _host(allowed)
        except (duckdb.Error, sqlite3.Error) as exc:
            self.close()
            raise SourceError("source_unreadable", f"cannot open {self.path.name!r} as {self.format}: "
                                                   f"{type(exc).__name__}") from exc

    def close(self) -> None:
        if self._con is not None:
            if self._alias is not None:
                try:
                    self._con.execute(f"DETACH {self._alias}")
                except duckdb.Error:
                    pass
                self._alias = None
            self._con.close()
            self._con = None
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def key(self) -> str:
        """What names this source across loads (a re-load of the same source supersedes)."""
        return str(self.path.resolve())

    # Tables ----------------------------------------------------------------------------------
    def _file(self, table: str) -> Path:
        ext = self.format
        if self.path.is_dir():
            return self.path / f"{table}.{ext}"
        return self.path

    def tables(self) -> list[str]:
        if self.format == "duckdb":
            return [r[0] for r in self._con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? ORDER BY 1",
                [self._alias]).fetchall()]
        if self.format == "sqlite":
            return [r[0] for r in self._sqlite.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY 1").fetchall()]
        if self.path.is_dir():
            return sorted(p.stem for p in self.path.glob(f"*.{self.format}"))
        return [self.path.stem]

    def _relation(self, table: str) -> str:
        """A DuckDB FROM clause for a table of a duckdb/parquet/csv source, with its ordinal."""
        if self.format == "duckdb":
            return f"(SELECT *, rowid AS {ORDINAL} FROM {self._alias}.{_quote(table)})"
        f = str(self._file(table)).replace("'", "''")
        if self.format == "parquet":
            return f"(SELECT * EXCLUDE (file_row_number), file_row_number AS {ORDINAL} " \
                   f"FROM read_parquet('{f}', file_row_number = true))"
        return f"(SELECT *, row_number() OVER () - 1 AS {ORDINAL} FROM read_csv('{f}', all_varchar = true))"

    def _refuse_view(self, table: str) -> None:
        """A DuckDB view has no stable row order or rowid to key receipts by: refused, by name."""
        if self.format == "duckdb" and self._con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_catalog = ? AND table_name = ? "
                "AND table_type = 'VIEW'", [self._alias, table]).fetchall()[0][0]:
            raise SourceError("source_view_unsupported", f"{table!r} is a view: load from a table (CREATE TABLE "
                                                         f"... AS SELECT ... in the export)")

    def columns(self, table: str) -> list[str]:
        if table not in self.tables():
            raise SourceError("load_table_unknown", f"the source has no table {table!r}")
        self._refuse_view(table)
        if self.format == "sqlite":
            return [r[1] for r in self._sqlite.execute(f"PRAGMA table_info({_quote(table)})").fetchall()]
        cols = [d[0] for d in self._con.execute(f"SELECT * FROM {self._relation(table)} LIMIT 0").description]
        return [c for c in cols if c != ORDINAL]

    def read(self, table: str, columns: list[str], key_column: str | None) -> pa.Table:
        """The named columns of every row, as text, plus `__key` (the key column, or the ordinal) and
        `__row` (the ordinal, as a number: where `cells` looks for the row first)."""
        key = key_column or ORDINAL
        self._refuse_view(table)
        if self.format == "sqlite":
            key_sql = "rowid - 1" if key_column is None else _quote(key_column)
            cur = self._sqlite.execute(
                f"SELECT rowid - 1, CAST({key_sql} AS TEXT), "
                + ", ".join(f"CAST({_quote(c)} AS TEXT)" for c in columns) + f" FROM {_quote(table)} ORDER BY rowid")
            rows = cur.fetchall()
            data = {"__key": [r[1] for r in rows]}
            for i, c in enumerate(columns):
                data[c] = [r[i + 2] for r in rows]
            out = {k: pa.array(v, pa.string()) for k, v in data.items()}
            return pa.table({**out, "__row": pa.array([r[0] for r in rows], pa.int64())})
        sel = ", ".join(f"CAST({_quote(c)} AS VARCHAR) AS {_quote(c)}" for c in columns)
        return self._con.sql(
            f"SELECT CAST({_quote(key)} AS VARCHAR) AS __key, {sel}, CAST({ORDINAL} AS BIGINT) AS __row "
            f"FROM {self._relation(table)} ORDER BY {ORDINAL}").to_arrow_table()

    def cells(self, table: str, key_column: str | None, keys: Iterable[str], columns: list[str],
              rows: dict[str, int | None] | None = None) -> dict[str, dict]:
        """Re-read cells: {row key: {column: text}} for the rows whose key is among `keys`.

        `rows`: the ordinal each key was loaded from, where known. Those rows are read first, by
        position (a DuckDB table's rowid, a Parquet file's row number, a SQLite rowid: no scan of
        the table), and taken only where the key there is still the key; every other key (moved,
        gone, or loaded before ordinals were kept) is looked for by key, as always."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        found: dict[str, dict] = {}
        wanted = {rows[k]: k for k in keys if rows and rows.get(k) is not None}
        if wanted and self.format != "csv":   # a CSV has no position to seek: read by key
            for ordinal, key, *cells in self._at(table, key_column, list(wanted), columns):
                if wanted.get(ordinal) == key:
                    found[key] = {c: cell_text(v) for c, v in zip(columns, cells)}
        rest = [k for k in keys if k not in found]
        if not rest:
            return found
        placeholders = ", ".join("?" for _ in rest)
        if self.format == "sqlite":
            key_sql = "CAST(rowid - 1 AS TEXT)" if key_column is None else f"CAST({_quote(key_column)} AS TEXT)"
            cur = self._sqlite.execute(
                f"SELECT {key_sql}, " + ", ".join(f"CAST({_quote(c)} AS TEXT)" for c in columns)
                + f" FROM {_quote(table)} WHERE {key_sql} IN ({placeholders})", rest)
            read = cur.fetchall()
        else:
            key_sql = f"CAST({_quote(key_column or ORDINAL)} AS VARCHAR)"
            sel = ", ".join(f"CAST({_quote(c)} AS VARCHAR)" for c in columns)
            # a list parameter unnested is a hash semi-join: twice as fast as 50 placeholders
            read = self._con.execute(
                f"SELECT {key_sql}, {sel} FROM {self._relation(table)} WHERE {key_sql} IN (SELECT unnest(?))",
                [rest]).fetchall()
        found.update({r[0]: {c: cell_text(r[i + 1]) for i, c in enumerate(columns)} for r in read})
        return found

    def _at(self, table: str, key_column: str | None, ordinals: list[int], columns: list[str]) -> list[tuple]:
        """(ordinal, key as text, *cells) of the rows at these ordinals, by a seek where the format has one."""
        if self.format == "sqlite":
            key_sql = "rowid - 1" if key_column is None else _quote(key_column)
            return self._sqlite.execute(
                f"SELECT rowid - 1, CAST({key_sql} AS TEXT), " + ", ".join(f"CAST({_quote(c)} AS TEXT)" for c in columns)
                + f" FROM {_quote(table)} WHERE rowid IN ({', '.join('?' for _ in ordinals)})",
                [o + 1 for o in ordinals]).fetchall()
        sel = ", ".join(f"CAST({_quote(c)} AS VARCHAR)" for c in columns)
        key = f"CAST({_quote(key_column or ORDINAL)} AS VARCHAR)"
        if self.format == "duckdb":   # on the table itself: a filter on rowid is a seek, not a scan
            return self._con.execute(
                f"SELECT rowid AS {ORDINAL}, {key.replace(_quote(ORDINAL), 'rowid')}, {sel} "
                f"FROM {self._alias}.{_quote(table)} WHERE rowid = ANY(?::BIGINT[])", [ordinals]).fetchall()
        return self._con.execute(
            f"SELECT {ORDINAL}, {key}, {sel} FROM {self._relation(table)} WHERE {ORDINAL} = ANY(?::BIGINT[])",
            [ordinals]).fetchall()
