"""Keys and the access log: the verbs of whoever administers a server's keys."""
from __future__ import annotations

from datetime import datetime

from engine.core import access
from engine.core.access import OPEN, Grant
from engine.verbs.base import Verbs


class AccessVerbs(Verbs):
    def grant_for(self, authorization: str | None) -> Grant:
        return access.grant_for(self.keys, authorization)

    def create_key(self, workspaces: list[str], scopes: list[str] | None = None, read_only: bool = False,
                   name: str | None = None, caller: Grant = OPEN, pages_only: bool = False) -> dict:
        access.require_admin(caller)
        return access.create_key(self.keys, workspaces, scopes, read_only, name, pages_only)

    def list_keys(self, caller: Grant = OPEN) -> list[dict]:
        access.require_admin(caller)
        return access.list_keys(self.keys)

    def revoke_key(self, key_id: str, caller: Grant = OPEN) -> dict:
        access.require_admin(caller)
        return access.revoke_key(self.keys, key_id)

    def require_admin(self, what: str, caller: Grant = OPEN) -> None:
        """Reading what covers every workspace and the server itself (its metrics): a key that may
        administer (every workspace, no scope, may write); else 403."""
        caller.require_everywhere(what)
        caller.require_write()

    def reopen_keys(self) -> None:
        self.keys.reopen()

    @property
    def active_keys(self) -> int:
        return self.keys.active

    def access_log(self, since: datetime | None = None, key_id: str | None = None, request_id: str | None = None,
                   limit: int = 100, caller: Grant = OPEN) -> list[dict]:
        caller.require_everywhere("the access log")
        self.querylog.flush()
        return self.querylog.tables.access(since, key_id, request_id, limit)
