"""Backups and the way out: `backup` (a consistent copy while serving, engine/core/backup.py) and
`export` (pages, relation tables, the query log in open formats, engine/core/export.py)."""
from __future__ import annotations

import re
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from engine.core import access, backup, export
from engine.core.access import OPEN, Grant
from engine.core.errors import InvalidRequest
from engine.verbs.base import Verbs

BACKUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_one_backup = threading.Lock()


class BackupVerbs(Verbs):
    def backup_dir(self) -> Path:
        """Where backups asked for by name go: [server] backup_dir, else the data dir's `backups`."""
        return Path(self.settings.server.backup_dir or Path(self.settings.data_dir) / "backups")

    def backup(self, dest: Path | str | None = None, name: str | None = None, caller: Grant = OPEN) -> dict:
        """Back the data dir up while it serves: into `dest` (a path: the local operator's), or into the
        backup folder under `name` (a key's: it never names a path), by default `backup-<UTC time>`.
        Its pages, keys and log are every workspace's: a key that may administer only."""
        access.require_admin(caller)
        if dest is None:
            name = name or "backup-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            if not BACKUP_NAME.match(name):
                raise InvalidRequest("a backup's name is 1 to 100 letters, digits, '.', '_' or '-', not starting "
                                     "with '.' or '-'", field="name")
            dest = self.backup_dir() / name
        if not _one_backup.acquire(blocking=False):
            raise backup.BackupFailed("a backup is already being written by this process: one at a time")
        try:
            manifest = backup.take(self.corpus, Path(dest))
        finally:
            _one_backup.release()
        return {"backup": str(dest), "name": Path(dest).name, "generation": manifest["generation"],
                "counts": manifest["counts"], "tables": len(manifest["tables"]), "files": len(manifest["files"]),
                "started_at": manifest["started_at"], "finished_at": manifest["finished_at"]}

    # The way out ---------------------------------------------------------------------------------------
    def export_pages(self, workspace: str | None = None, caller: Grant = OPEN) -> Iterator[dict]:
        """A workspace's pages as export lines (engine/core/export.py), those of the caller's scopes only."""
        ws = self.workspace_for(caller, workspace)
        return export.page_records(self.store, ws, caller.may_see)

    def export(self, what: str, dest: Path | str, workspace: str | None = None, caller: Grant = OPEN) -> dict:
        """`pages` (JSONL at dest), `relations` or `log` (a folder of Parquet files): one workspace's, or —
        for `relations` and `log` with no workspace, a key that may administer — every workspace's."""
        dest = Path(dest)
        if what == "pages":
            n = export.write_pages(self.export_pages(workspace, caller), dest)
            return {"what": what, "dest": str(dest), "workspace": self.workspace_for(caller, workspace), "pages": n}
        if what not in ("relations", "log"):
            raise InvalidRequest(f"export pages, relations or log, not {what!r}", field="what")
        if workspace is None:
            access.require_admin(caller)
        else:
            workspace = self.workspace_for(caller, workspace)
            caller.require_unscoped(f"an export of the {what}")
        if what == "log":
            self.querylog.flush()
            tables = export.write_tables(self.store, export.LOG_TABLES, dest, export.log_filter(workspace))
            return {"what": what, "dest": str(dest), "workspace": workspace, "tables": tables}
        return {"what": what, "dest": str(dest), "workspaces": export.write_relations(self.relation_store.store, dest, workspace)}
