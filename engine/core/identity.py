"""Identifiers derived from names a client chooses (workspaces, document scopes, URLs, entity ids),
built so that two different names can never give the same identifier.

- A **page** is one URL as one document scope of one workspace saw it: `page_id_for(workspace, url,
  scope)`. Two scopes that saved the same URL hold two pages, so a key of one scope can never reach
  (update, touch, or learn of) the other's.
- An **entity** belongs to one namespace, its workspace and document scope: `entity_id_for`. Its id is
  the namespace, a colon, and the entity's own id; the namespace escapes every character that could
  end it early (`:`, `/`, `%`), so `acme` + `hr:x` and `acme:hr` + `x` are two entities.
- A workspace's **folder** on disk (maps, evidence packets, dictionaries): `workspace_folder`, the
  same escaping, so `Team A`, `team-a` and `team_a` are three folders, and no name reaches outside.

Workspace names themselves are checked once (`check_workspace`): printable, at most 200 characters.
"""
from __future__ import annotations

import hashlib
import json
from urllib.parse import quote

from engine.core.errors import EngineError

MAX_NAME = 200
MAX_FOLDER = 180     # bytes of a workspace's folder name; a suffix (.md, .toml) still fits in 255


class WorkspaceInvalid(EngineError):
    status, type = 422, "workspace_invalid"


class ScopeInvalid(EngineError):
    status, type = 422, "scope_invalid"


def printable(name: str) -> bool:
    """No control character (C0, DEL, C1) anywhere: such a name cannot be told apart on a screen, and
    the identifiers below rely on NUL never appearing in one."""
    return not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name)


def check_workspace(name: str) -> str:
    """A workspace name as every verb takes it: 1 to 200 printable characters."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not printable(name) or name != name.strip():
        raise WorkspaceInvalid("a workspace name is 1 to 200 printable characters, without leading or trailing "
                               "spaces", workspace=name if isinstance(name, str) and printable(name) else None)
    return name


def named_workspace(workspace: str | None) -> str:
    """The workspace a service works in, as the Engine's verb resolved it (engine/verbs/base.py,
    `Verbs.workspace_for`: the request's, else the default): a service never picks one itself."""
    if workspace is None:
        raise TypeError("no workspace named: the Engine's verbs resolve it (Verbs.workspace_for) before a "
                        "service runs")
    return workspace


def check_scope(scope: str | None) -> str | None:
    """A document scope: None (no scope), or 1 to 200 printable characters."""
    if scope is None:
        return None
    if not scope or len(scope) > MAX_NAME or not printable(scope):
        raise ScopeInvalid("a document scope is 1 to 200 printable characters",
                           scope=scope if printable(scope) else None)
    return scope


def _escaped(name: str) -> str:
    # letters, digits and "_.-~" stay; everything else (":", "/", "%", spaces, any non-ASCII) is %XX
    return quote(name, safe="")


def page_id_for(workspace: str, url_norm: str, scope: str | None = None) -> str:
    """Stable id of a page: the same normalised URL, in the same workspace and scope, always gets
    the same id, and no other triple does. An unscoped page keeps the original form (workspace, NUL,
    URL); a scoped one hashes the three as a JSON list, which holds no raw NUL, so the two forms never meet."""
    raw = f"{workspace}\x00{url_norm}" if scope is None else json.dumps([workspace, url_norm, scope])
    return "pg_" + hashlib.sha1(raw.encode()).hexdigest()[:20]


def entity_namespace(workspace: str, scope: str | None = None) -> str:
    ns = _escaped(workspace)
    return ns if scope is None else f"{ns}/{_escaped(scope)}"


def entity_id_for(workspace: str, scope: str | None, local: str) -> str:
    """`<namespace>:<local id>`; for a workspace of letters, digits and `_.-~`, unscoped, the id is
    `<workspace>:<local id>` as it always was."""
    return f"{entity_namespace(workspace, scope)}:{local}"


def workspace_folder(workspace: str) -> str:
    """The folder name of a workspace's files: its name where that is letters, digits and `_-~` (and
    a dot not in first place), else with every other character as %XX — never `.`, `..` or a path."""
    name = _escaped(workspace)
    name = "%2E" + name[1:] if name.startswith(".") else name
    if len(name) > MAX_FOLDER:   # a file name holds 255 bytes: a long escaped name keeps its start and a hash
        # "%~" is never in an escaped name (every % there starts two hex digits), so these cannot meet one
        name = name[:MAX_FOLDER - 18] + "%~" + hashlib.sha1(workspace.encode()).hexdigest()[:16]
    return name
