"""API keys in the DuckDB store: only a salted SHA-256 digest of each secret is kept.

  api_keys(key_id, name, salt, digest, workspaces, scopes, read_only, created_at, revoked_at)

The secrets are 256 random bits, so a fast salted hash is enough (a slow KDF protects guessable
passwords, not random tokens) and verifying a key costs one indexed lookup.
"""
from __future__ import annotations

import threading
from datetime import datetime

from .store import CorpusStore

DDL = """CREATE TABLE IF NOT EXISTS api_keys (
    key_id VARCHAR PRIMARY KEY, name VARCHAR, salt VARCHAR NOT NULL, digest VARCHAR NOT NULL,
    workspaces VARCHAR[] NOT NULL, scopes VARCHAR[] NOT NULL, read_only BOOLEAN NOT NULL,
    created_at TIMESTAMP NOT NULL, revoked_at TIMESTAMP)"""
COLUMNS = ["key_id", "name", "workspaces", "scopes", "read_only", "created_at", "revoked_at"]


class KeyStore:
    def __init__(self, store: CorpusStore):
        self.store = store
        self._lock = threading.Lock()
        with store.transaction() as con:
            con.execute(DDL)
        self._active = self._count()
        self._closed = self._read_closed()

    def _count(self) -> int:
        return self.store.cursor().execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL").fetchone()[0]

    def _read_closed(self) -> bool:
        """Closed once a key has ever existed (the meta flag; a data dir from before the flag: any
        key row, revoked or not), until `reopen`."""
        cur = self.store.cursor()
        row = cur.execute("SELECT value FROM meta WHERE key = 'auth'").fetchone()
        if row is not None:
            return row[0] == "closed"
        return cur.execute("SELECT count(*) FROM api_keys").fetchone()[0] > 0

    @property
    def closed(self) -> bool:
        """Whether requests need a key: from the first key on, even after the last one is revoked."""
        return self._closed

    def reopen(self) -> None:
        """Let requests in without a key again (the CLI's explicit, local `keys open`): only when no
        key is active."""
        with self._lock, self.store.transaction() as con:
            if self._count():
                raise ValueError("keys are still active: revoke them first")
            con.execute("INSERT OR REPLACE INTO meta VALUES ('auth', 'open')")
            self._closed = False

    @property
    def active(self) -> int:
        """Active keys. One process holds the store, so the count kept here is exact."""
        return self._active

    def insert(self, key_id: str, name: str | None, salt: str, digest: str, workspaces: list[str],
               scopes: list[str], read_only: bool, now: datetime) -> None:
        with self._lock, self.store.transaction() as con:
            con.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                        [key_id, name, salt, digest, workspaces, scopes, read_only, now])
            con.execute("INSERT OR REPLACE INTO meta VALUES ('auth', 'closed')")
            self._active += 1
            self._closed = True

    def secret_row(self, key_id: str) -> tuple[str, str, list[str], list[str], bool] | None:
        """(salt, digest, workspaces, scopes, read_only) of an active key."""
        row = self.store.cursor().execute(
            "SELECT salt, digest, workspaces, scopes, read_only FROM api_keys WHERE key_id = ? AND revoked_at IS NULL",
            [key_id]).fetchone()
        return None if row is None else (row[0], row[1], list(row[2]), list(row[3]), bool(row[4]))

    def list(self) -> list[dict]:
        rows = self.store.cursor().execute(f"SELECT {', '.join(COLUMNS)} FROM api_keys ORDER BY created_at, key_id")
        return [dict(zip(COLUMNS, r)) for r in rows.fetchall()]

    def revoke(self, key_id: str, now: datetime) -> bool:
        with self._lock, self.store.transaction() as con:
            n = con.execute("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL "
                            "RETURNING key_id", [now, key_id]).fetchall()
            self._active -= len(n)
            return bool(n)
