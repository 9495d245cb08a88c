"""Who may do what: API keys and the grant a request carries.

A key names the workspaces it may use (``*`` for all), optional document scopes, and whether it
may write. Keys are ``rfy_<key id>_<secret>``; the secret is shown once, when the key is made.
With no active key the engine is open (and the server binds to loopback only); once a key exists,
every /v1 route but health needs one. A workspace outside a key's grant is answered exactly like a
workspace that does not exist (404), so a key cannot learn what other workspaces hold.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

from indexes.keys import KeyStore

from engine.core.errors import EngineError, InvalidRequest, WorkspaceNotFound
from engine.core.clock import utcnow
from engine.core.identity import check_scope, check_workspace, printable

ALL = "*"
TOKEN = re.compile(r"^rfy_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
WORKSPACE = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9_.:-]{0,199})$")


class Unauthorized(EngineError):
    status, type = 401, "unauthorized"


class Forbidden(EngineError):
    status, type = 403, "forbidden"


class KeyNotFound(EngineError):
    status, type = 404, "key_not_found"


class ScopeRequired(EngineError):
    status, type = 422, "scope_required"


@dataclass(frozen=True)
class Grant:
    key_id: str | None                  # None: no keys are configured (open, loopback only)
    workspaces: tuple[str, ...] = (ALL,)
    scopes: tuple[str, ...] = ()        # document scopes; empty: every document
    read_only: bool = False
    pages_only: bool = False            # adds pages (and visits) to its one workspace, nothing else
    seen: list = field(default_factory=list, compare=False, repr=False)  # workspaces this request resolved

    @property
    def everywhere(self) -> bool:
        return ALL in self.workspaces

    @property
    def document_scopes(self) -> tuple[str, ...] | None:
        """The document scopes the key may read; None: every document."""
        return self.scopes or None

    def may_read(self, workspace: str | None) -> bool:
        return self.everywhere or workspace in self.workspaces

    def workspace(self, requested: str | None, default: str) -> str:
        """The workspace a request works in: the one it names, else the server default (or, for a
        key bound to workspaces, its first). Outside the grant: 404, as if it did not exist; a name
        no workspace can have (a control character, over 200 characters): 422."""
        ws = requested or (default if self.everywhere else self.workspaces[0])
        self.seen.append(ws)
        if not self.may_read(ws):
            raise WorkspaceNotFound(f"no workspace {ws!r}", ref=ws)
        return check_workspace(ws)

    def require_write(self) -> None:
        if self.read_only:
            raise Forbidden("this key is read-only", key_id=self.key_id)

    def may_see(self, scope: str | None) -> bool:
        """Whether a document of this scope (None: of no scope) is inside the grant: a key with
        document scopes reads only documents of those scopes."""
        return not self.scopes or scope in self.scopes

    def write_scope(self, requested: str | None) -> str | None:
        """The document scope a write lands in: the one it names, else none — or, for a key with
        document scopes, its only scope. Such a key writes only inside its scopes: a scope outside
        them is refused (403), and with several scopes it must name one (422)."""
        check_scope(requested)
        if not self.scopes:
            return requested
        if requested is None:
            if len(self.scopes) == 1:
                return self.scopes[0]
            raise ScopeRequired("this key has several document scopes: name the scope to write in ("
                                + ", ".join(self.scopes) + ")", scopes=list(self.scopes))
        if requested not in self.scopes:
            raise Forbidden(f"this key writes only in its document scopes ({', '.join(self.scopes)})",
                            key_id=self.key_id)
        return requested

    def require_unscoped(self, what: str) -> None:
        """Verbs over every document of a workspace (a re-clustering, the maps) need a key without
        document scopes: a scoped key would change or read what other scopes hold."""
        if self.scopes:
            raise Forbidden(f"{what} covers every document of the workspace: a key with document scopes "
                            "cannot", key_id=self.key_id)

    def require_everywhere(self, what: str) -> None:
        """Routes over every workspace's documents need a key for every workspace and every scope."""
        if not self.everywhere or self.scopes:
            raise Forbidden(f"{what} needs a key for every workspace (--workspace '*') and no --scope",
                            key_id=self.key_id)


OPEN = Grant(None)


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


def create_key(keys: KeyStore, workspaces: list[str], scopes: list[str] | None = None, read_only: bool = False,
               name: str | None = None, pages_only: bool = False) -> dict:
    """Make a key; the reply is the only place its token ever appears. `pages_only`: a key that adds
    pages to one workspace and does nothing else (no search, no reads; the browser extension's)."""
    if not workspaces:
        raise InvalidRequest("a key needs at least one workspace (or '*' for all)")
    if pages_only and (read_only or len(set(workspaces)) != 1 or ALL in workspaces):
        raise InvalidRequest("a pages-only key adds pages to one workspace: name exactly one (not '*'), "
                             "and it cannot be read-only")
    bad = [w for w in workspaces if not WORKSPACE.match(w)]
    if bad:
        raise InvalidRequest(f"not a workspace id: {bad[0]!r}")
    scopes = list(dict.fromkeys(scopes or []))
    if any(not s or len(s) > 200 or not printable(s) for s in scopes):
        raise InvalidRequest("a scope is a label of 1 to 200 printable characters")
    key_id, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_hex(16)
    now = utcnow()
    keys.insert(key_id, name, salt, _digest(salt, secret), list(dict.fromkeys(workspaces)), scopes, read_only, now,
                pages_only)
    return {"key_id": key_id, "token": f"rfy_{key_id}_{secret}", "name": name, "workspaces": workspaces,
            "scopes": scopes, "read_only": read_only, "pages_only": pages_only, "created_at": now.isoformat(),
            "note": "the token is shown once; only its salted hash is stored"}


def verify(keys: KeyStore, token: str) -> Grant | None:
    m = TOKEN.match(token or "")
    if not m:
        return None
    row = keys.secret_row(m.group(1))
    if row is None:
        return None
    salt, digest, workspaces, scopes, read_only, pages_only = row
    if not hmac.compare_digest(_digest(salt, m.group(2)), digest):
        return None
    return Grant(m.group(1), tuple(workspaces), tuple(scopes), read_only, pages_only)


def grant_for(keys: KeyStore, authorization: str | None) -> Grant:
    """The grant of a request's Authorization header: OPEN only while the data dir has never had a
    key (or was explicitly reopened on the server). Revoking the last key leaves it closed: every
    request then needs a key, and only the server's own operator can make one."""
    if not keys.closed:
        return OPEN
    if keys.active == 0:
        raise Unauthorized("every API key of this server is revoked: create one on the server itself",
                           remedy=("create_key", {}))
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("this server needs an API key: send Authorization: Bearer <key>")
    grant = verify(keys, token.strip())
    if grant is None:
        raise Unauthorized("the API key is not valid (unknown, revoked or mistyped)")
    return grant


def list_keys(keys: KeyStore) -> list[dict]:
    out = []
    for k in keys.list():
        k["created_at"] = k["created_at"].isoformat()
        k["revoked_at"] = k["revoked_at"].isoformat() if k["revoked_at"] else None
        out.append(k)
    return out


def revoke_key(keys: KeyStore, key_id: str) -> dict:
    if not keys.revoke(key_id, utcnow()):
        raise KeyNotFound(f"no active key {key_id!r}", ref=key_id)
    return {"key_id": key_id, "revoked": True}




def is_loopback(host: str) -> bool:
    """Whether every address `host` stands for is a loopback one (127.0.0.0/8, ::1). A name is
    resolved, so "127.0.0.1.example" is not loopback; a name that does not resolve is not either."""
    import ipaddress
    import socket

    name = (host or "").strip().strip("[]")
    if not name:
        return False
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except (socket.gaierror, UnicodeError, OSError):
        return False
    addrs = {info[4][0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def require_admin(grant: Grant) -> None:
    """Managing keys: a key for every workspace and every scope, that may write."""
    grant.require_everywhere("managing keys")
    grant.require_write()


def within_scopes(grant: Grant, read: list[str] | None) -> bool:
    """Whether something made from documents of the scopes `read` (None: of every document) is
    within the grant: a key with document scopes sees it only when `read` lies inside them."""
    if not grant.scopes:
        return True
    return read is not None and set(read) <= set(grant.scopes)


def readable_page(grant: Grant, store, page_id: str) -> None:
    """404 for a page of a workspace outside the grant, exactly as for a page that does not exist."""
    from engine.core.errors import PageNotFound

    if grant.everywhere and not grant.scopes:
        return
    meta = store.pages_by_id([page_id]).get(page_id)
    if meta is None or not grant.may_read(meta.get("workspace_id")) or \
            (grant.scopes and meta.get("scope") not in grant.scopes):
        raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)


def readable_query(grant: Grant, log, query_id: str) -> None:
    """404 for a logged query the caller could not have read, exactly as for an unknown one: of a
    workspace outside the grant, or (for a key with document scopes) run within scopes that are not
    all the key's — an unscoped key's query, or one logged before queries kept their scopes, included.
    `log`: the query log (engine/core/querylog.py: what is queued counts too)."""
    from engine.core.errors import QueryNotFound

    if grant.everywhere and not grant.scopes:
        return
    found, workspace, scopes = log.origin_of(query_id)
    if not found or not grant.may_read(workspace) or not within_scopes(grant, scopes):
        raise QueryNotFound(f"no logged query with id {query_id!r}", ref=query_id)
