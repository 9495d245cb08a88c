"""API keys in the store (DuckDB or PostgreSQL, through indexes/sql.py): only a salted SHA-256
digest of each secret is kept.

  api_keys(key_id, name, salt, digest, workspaces, scopes, read_only, created_at, revoked_at, pages_only)

`pages_only`: a key that adds pages (and their visits) to its one workspace and does nothing else —
the browser extension's (server/auth.py lists its routes); NULL in a row from before it was kept.

The secrets are 256 random bits, so a fast salted hash is enough (a slow KDF protects guessable
passwords, not random tokens) and verifying a key costs one indexed lookup — made on every request,
so a key revoked through one process is refused by every process sharing the store at once. Whether
the service is closed (needs keys) and how many are active are kept in memory; over PostgreSQL, where
other processes create and revoke keys too, they are read again when older than SHARED_TTL_S.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime

from .store_protocol import Store

DDL = """CREATE TABLE IF NOT EXISTS api_keys (
    key_id VARCHAR PRIMARY KEY, name VARCHAR, salt VARCHAR NOT NULL, digest VARCHAR NOT NULL,
    workspaces VARCHAR[] NOT NULL, scopes VARCHAR[] NOT NULL, read_only BOOLEAN NOT NULL,
    created_at TIMESTAMP NOT NULL, revoked_at TIMESTAMP)"""
MIGRATE = "ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS pages_only BOOLEAN"
COLUMNS = ["key_id", "name", "workspaces", "scopes", "read_only", "created_at", "revoked_at", "pages_only"]
SET_AUTH = "INSERT INTO meta VALUES ('auth', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
SHARED_TTL_S = 0.5


class KeyStore:
    def __init__(self, store: Store):
        self.sql = store.sql()
        self._lock = threading.Lock()
        self._shared = self.sql.dialect == "postgres"     # other processes write the keys too
        if not self._shared:                               # PostgreSQL: a migration made the table
            with self.sql.transaction() as tx:
                tx.run(DDL)
                tx.run(MIGRATE)
        self._read_state()

    def _read_state(self) -> None:
        self._active = self._count(self.sql)
        self._closed = self._read_closed()
        self._read_at = time.monotonic()

    def _fresh(self) -> None:
        if self._shared and time.monotonic() - self._read_at > SHARED_TTL_S:
            self._read_state()

    @staticmethod
    def _count(sql) -> int:
        return sql.row("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")[0]

    def _read_closed(self) -> bool:
        """Closed once a key has ever existed (the meta flag; a data dir from before the flag: any
        key row, revoked or not), until `reopen`."""
        row = self.sql.row("SELECT value FROM meta WHERE key = 'auth'")
        if row is not None:
            return row[0] == "closed"
        return self.sql.row("SELECT count(*) FROM api_keys")[0] > 0

    @property
    def closed(self) -> bool:
        """Whether requests need a key: from the first key on, even after the last one is revoked."""
        self._fresh()
        return self._closed

    def reopen(self) -> None:
        """Let requests in without a key again (the CLI's explicit, local `keys open`): only when no
        key is active."""
        with self._lock, self.sql.transaction() as tx:
            if self._count(tx):
                raise ValueError("keys are still active: revoke them first")
            tx.run(SET_AUTH, ["open"])
            self._closed = False

    @property
    def active(self) -> int:
        """Active keys: exact where one process holds the store, at most SHARED_TTL_S old where
        several share it."""
        self._fresh()
        return self._active

    def insert(self, key_id: str, name: str | None, salt: str, digest: str, workspaces: list[str],
               scopes: list[str], read_only: bool, now: datetime, pages_only: bool = False) -> None:
        with self._lock, self.sql.transaction() as tx:
            tx.run("INSERT INTO api_keys (key_id, name, salt, digest, workspaces, scopes, read_only, created_at, "
                   "revoked_at, pages_only) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                   [key_id, name, salt, digest, workspaces, scopes, read_only, now, pages_only])
            tx.run(SET_AUTH, ["closed"])
            self._active += 1
            self._closed = True

    def secret_row(self, key_id: str) -> tuple[str, str, list[str], list[str], bool, bool] | None:
        """(salt, digest, workspaces, scopes, read_only, pages_only) of an active key."""
        row = self.sql.row(
            "SELECT salt, digest, workspaces, scopes, read_only, pages_only FROM api_keys "
            "WHERE key_id = ? AND revoked_at IS NULL", [key_id])
        return None if row is None else (row[0], row[1], list(row[2]), list(row[3]), bool(row[4]), bool(row[5]))

    def list(self) -> list[dict]:
        rows = self.sql.rows(f"SELECT {', '.join(COLUMNS)} FROM api_keys ORDER BY created_at, key_id")
        return [{**dict(zip(COLUMNS, r)), "pages_only": bool(r[-1])} for r in rows]

    def revoke(self, key_id: str, now: datetime) -> bool:
        with self._lock, self.sql.transaction() as tx:
            n = tx.rows("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL "
                        "RETURNING key_id", [now, key_id])
            self._active -= len(n)
            return bool(n)
